"""Tokenization round trips: bytes in, bytes out, UTF-8 included; the streaming detokenizer agrees with
the one-shot one; llama-cpp-python's conventions for BOS and the leading space."""

from __future__ import annotations

import pytest

import kiln

TEXTS = [
    b"Hello world",
    b"Once upon a time, there was a little girl named Lily.",
    "h\u00e9llo w\u00f6rld, na\u00efve caf\u00e9".encode(),
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0".encode(),
    "emoji \U0001f642 and \u20ac".encode(),
    b"  two leading spaces and trailing  ",
    b"line\nbreaks\tand tabs",
]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_then_detokenize_gives_the_bytes_back(llm, text):
    ids = llm.tokenize(text)
    assert ids[0] == llm.token_bos() and all(isinstance(i, int) for i in ids)
    assert llm.detokenize(ids) == text


@pytest.mark.parametrize("text", TEXTS)
def test_the_streaming_detokenizer_agrees_and_every_piece_is_utf8(llm, text):
    ids = llm.tokenize(text)
    with kiln.Detokenizer(llm.model, strip_leading_space=True) as d:
        pieces = [d.push(i) for i in ids] + [d.flush()]
    for p in pieces:
        p.decode("utf-8")  # a character is never split between pieces
    assert b"".join(pieces) == text


def test_without_bos_the_leading_space_stays_as_in_llama_cpp_python(llm):
    ids = llm.tokenize(b"Hello", add_bos=False)
    assert llm.token_bos() not in ids
    assert llm.detokenize(ids) == b" Hello"
    assert llm.detokenize(ids, prev_tokens=[llm.token_bos()]) == b" Hello"


def test_special_parses_control_token_texts(llm):
    bos_text = llm.model.token_text(llm.token_bos())
    assert bos_text == b"<s>"
    assert llm.tokenize(b"<s>", add_bos=False, special=True) == [llm.token_bos()]
    assert llm.token_bos() not in llm.tokenize(b"<s>", add_bos=False, special=False)
    ids = llm.tokenize(b"a<s>b", add_bos=False, special=True)
    assert llm.token_bos() in ids
    plain, shown = llm.detokenize(ids), llm.detokenize(ids, special=True)
    assert b"<s>" not in plain and shown.startswith(b" a<s>") and shown.replace(b"<s>", b"") == plain


def test_str_is_accepted_and_encoded_as_utf8(llm):
    assert llm.tokenize("caf\u00e9") == llm.tokenize("caf\u00e9".encode())
    with pytest.raises(TypeError, match="must be str or bytes"):
        llm.tokenize(42)


def test_long_texts_grow_the_buffers(llm):
    text = ("\u00e9t\u00e9 " * 3000).encode()
    assert llm.detokenize(llm.tokenize(text)) == text
