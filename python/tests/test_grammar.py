"""Constrained decoding through the binding (docs/grammar.md): LlamaGrammar as llama-cpp-python makes it
(from_string, from_file, from_json_schema), grammar= on completions and chats, and response_format. The
reference is the jsonschema package (pinned in requirements.txt): every answer under a schema of the
shared corpus (tests/data/schemas/corpus.json, the server's too) parses and validates, at temperature 0
and 1, streamed and not. The bundled model knows no JSON; only the constraint makes the answers valid."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

import kiln
from kiln import LlamaGrammar

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
CORPUS = json.loads((DATA / "schemas" / "corpus.json").read_text())


def validate(text: str, schema) -> None:
    jsonschema.validate(json.loads(text), schema, cls=jsonschema.Draft202012Validator,
                        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def test_from_string_errors_name_line_and_column():
    with pytest.raises(kiln.FormatError, match=r"line 2, column 7: rule 'thing' is used but never defined"):
        LlamaGrammar.from_string('root ::= "a" b\nb ::= thing "c"\n')
    with pytest.raises(kiln.FormatError, match=r"line 1, column 10: unterminated string literal"):
        LlamaGrammar.from_string('root ::= "abc')
    with pytest.raises(kiln.UnsupportedError, match=r"schema at /properties/a: 'pattern' cannot be enforced"):
        LlamaGrammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}})
    with pytest.raises(kiln.FormatError, match="not valid JSON"):
        LlamaGrammar.from_json_schema("{nope")


def test_from_file_reads_llama_cpp_style_grammars():
    g = LlamaGrammar.from_file(str(DATA / "grammars" / "json.gbnf"))
    assert "object" in g.grammar


@pytest.mark.parametrize("entry", CORPUS[::3], ids=[e["name"] for e in CORPUS[::3]])
def test_completions_under_a_schema_validate(llm, entry):
    g = LlamaGrammar.from_json_schema(json.dumps(entry["schema"]))
    for temperature in (0.0, 1.0):
        r = llm.create_completion("Once", grammar=g, max_tokens=400, temperature=temperature, seed=5)
        assert r["choices"][0]["finish_reason"] == "stop"
        validate(r["choices"][0]["text"], entry["schema"])
        text = "".join(c["choices"][0]["text"] for c in
                       llm.create_completion("Once", grammar=g, max_tokens=400, temperature=temperature,
                                             seed=5, stream=True))
        validate(text, entry["schema"])


def test_chat_response_format_json_schema_and_json_object(llm):
    schema = CORPUS[[e["name"] for e in CORPUS].index("array_of_objects")]["schema"]
    msgs = [{"role": "user", "content": "Give me JSON."}]
    r = llm.create_chat_completion(msgs, max_tokens=400, response_format={
        "type": "json_schema", "json_schema": {"name": "order", "schema": schema, "strict": True}})
    validate(r["choices"][0]["message"]["content"], schema)
    r = llm.create_chat_completion(msgs, max_tokens=400, response_format={"type": "json_object", "schema": schema})
    validate(r["choices"][0]["message"]["content"], schema)
    chunks = list(llm.create_chat_completion(msgs, max_tokens=400, stream=True, response_format={
        "type": "json_schema", "json_schema": {"name": "order", "schema": schema}}))
    validate("".join(c["choices"][0]["delta"].get("content", "") for c in chunks), schema)
    r = llm.create_chat_completion(msgs, max_tokens=60, response_format={"type": "json_object"})
    assert r["choices"][0]["message"]["content"].startswith("{")


def test_gbnf_grammar_text_constrains_and_ends_by_itself(llm):
    for seed in range(3):
        r = llm.create_completion("Once upon a time", grammar='root ::= "n=" [1-9] [0-9]? ("!" | "?")',
                                  max_tokens=50, temperature=1.0, seed=seed)
        c = r["choices"][0]
        assert re.fullmatch(r"n=[1-9][0-9]?[!?]", c["text"]) and c["finish_reason"] == "stop", c


def test_stop_strings_and_max_tokens_still_apply(llm):
    g = LlamaGrammar.from_string('root ::= "alpha beta gamma"')
    assert llm.create_completion("x", grammar=g, stop=[" beta"], temperature=0)["choices"][0]["text"] == "alpha"
    r = llm.create_completion("x", grammar=LlamaGrammar.from_string('root ::= "a"{50}'), max_tokens=3)
    assert r["choices"][0]["finish_reason"] == "length" and set(r["choices"][0]["text"]) <= {"a"}


def test_grammar_and_response_format_together_are_refused(llm):
    with pytest.raises(ValueError, match="not both"):
        llm.create_chat_completion([{"role": "user", "content": "x"}], grammar='root ::= "a"',
                                   response_format={"type": "json_object"})
