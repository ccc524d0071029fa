"""Constrained decoding (docs/grammar.md): llama-cpp-python's LlamaGrammar over Kiln's grammar engine.

A LlamaGrammar is GBNF text (llama.cpp's format) compiled by the library; from_json_schema compiles a
JSON Schema to GBNF with the library's converter (kiln_json_schema_to_gbnf, the one the server and the
CLI use), so the three agree on what a schema allows. Llama(..., grammar=g) and response_format build a
matcher per completion; the sampler masks the tokens the grammar refuses and advances the matcher.
"""

from __future__ import annotations

import ctypes
import json
from ctypes import byref, c_int32, c_size_t, c_void_p
from typing import Any, Optional, Sequence, Union

from . import _lib
from ._handle import Handle
from ._lib import check, encode, lib


def json_schema_to_gbnf(schema: Union[str, bytes, Any]) -> str:
    """The GBNF text whose sentences are the JSON documents valid under schema (a JSON string, or a
    dict/list/bool to be serialized). Raises FormatError (not JSON, malformed keyword) or
    UnsupportedError (what Kiln cannot enforce), naming the place in the schema."""
    text = schema if isinstance(schema, (str, bytes)) else json.dumps(schema)
    data = encode(text, "schema")
    out, n = c_void_p(), c_size_t()
    check(lib.kiln_json_schema_to_gbnf(data, len(data), byref(out), byref(n)))
    try:
        return ctypes.string_at(out.value, n.value).decode("utf-8")
    finally:
        lib.kiln_free(out)


class LlamaGrammar(Handle):
    """A compiled grammar, as llama_cpp.LlamaGrammar: make one with from_string, from_file or
    from_json_schema. Immutable; one grammar may serve many completions."""

    _kind = "grammar"

    def __init__(self, *args: Any, _grammar: str = "", **kwargs: Any) -> None:
        self._handle: Optional[int] = None
        data = encode(_grammar, "grammar")
        handle = _lib.grammar_p()
        check(lib.kiln_grammar_parse(data, len(data), byref(handle)))
        self._handle = handle.value
        self._grammar = _grammar

    def _destroy(self, handle: int) -> None:
        lib.kiln_grammar_destroy(handle)

    @property
    def grammar(self) -> str:
        """The GBNF text."""
        return self._grammar

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        """Compile GBNF text; FormatError names the line, column and problem."""
        return cls(_grammar=grammar)

    @classmethod
    def from_file(cls, file: Union[str, Any], verbose: bool = True) -> "LlamaGrammar":
        with open(file, encoding="utf-8") as f:
            return cls.from_string(f.read(), verbose)

    @classmethod
    def from_json_schema(cls, json_schema: Union[str, Any], verbose: bool = True) -> "LlamaGrammar":
        """Compile a JSON Schema (a JSON string, or a dict) through the library's converter."""
        return cls.from_string(json_schema_to_gbnf(json_schema), verbose)


class GrammarVocab(Handle):
    """The token trie of a model's vocabulary (kiln_grammar_vocab), with the tokens that end a text."""

    _kind = "grammar vocabulary"

    def __init__(self, vocab_handle: int, end_tokens: Sequence[int]) -> None:
        self._handle: Optional[int] = None
        ends = (c_int32 * max(1, len(end_tokens)))(*end_tokens)
        handle = _lib.grammar_vocab_p()
        check(lib.kiln_grammar_vocab_create(vocab_handle, ends, len(end_tokens), byref(handle)), "grammar vocab")
        self._handle = handle.value

    def _destroy(self, handle: int) -> None:
        lib.kiln_grammar_vocab_destroy(handle)


class GrammarMatcher(Handle):
    """One completion's position in a grammar (kiln_grammar_matcher)."""

    _kind = "grammar matcher"

    def __init__(self, grammar: LlamaGrammar, vocab: Optional[GrammarVocab] = None) -> None:
        self._handle: Optional[int] = None
        self._keep = (grammar, vocab)  # the C matcher borrows both
        handle = _lib.matcher_p()
        check(lib.kiln_grammar_matcher_create(grammar.handle, vocab.handle if vocab else None, byref(handle)),
              "grammar matcher")
        self._handle = handle.value

    def _destroy(self, handle: int) -> None:
        lib.kiln_grammar_matcher_destroy(handle)

    def accept_text(self, text: Union[str, bytes]) -> None:
        """Advance by text; InvalidArgumentError names the first byte the grammar refuses."""
        data = encode(text)
        check(lib.kiln_grammar_matcher_accept_text(self.handle, data, len(data)))

    @property
    def can_end(self) -> bool:
        return bool(lib.kiln_grammar_matcher_can_end(self.handle))

    @property
    def is_done(self) -> bool:
        return bool(lib.kiln_grammar_matcher_is_done(self.handle))


def response_format_grammar(response_format: Any) -> Optional[LlamaGrammar]:
    """The grammar for an OpenAI / llama-cpp-python response_format: {"type": "text"} (none),
    {"type": "json_object"} (any object, or {"schema": ...} as llama-cpp-python takes it), or
    {"type": "json_schema", "json_schema": {"schema": ...}} as OpenAI takes it."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return LlamaGrammar.from_json_schema(response_format.get("schema") or {"type": "object"})
    if kind == "json_schema":
        js = response_format.get("json_schema") or {}
        return LlamaGrammar.from_json_schema(js.get("schema") or {"type": "object"})
    raise ValueError(f"response_format type {kind!r} is not supported; use 'text', 'json_object' or 'json_schema'")
