"""
Constrained decoding in `kiln serve` (docs/grammar.md): every answer under a JSON schema parses and
validates against the schema with the `jsonschema` package (Draft 2020-12, formats checked), for each
schema of tests/data/schemas/corpus.json, at temperature 0 and 1, streamed and not, through the official
`openai` client (response_format json_schema) and llama-server's fields (json_schema, grammar). GBNF
grammars in the style of llama.cpp's grammars/ folder constrain output; stop strings and max_tokens still
apply; a schema or grammar Kiln cannot compile is a 400 that says why.

The bundled model (stories260K) knows nothing of JSON: what is tested is that the constraint alone makes
the output valid. The corpus bounds every string and array, so each answer ends before max_tokens.
"""
import json
import re
from pathlib import Path

import jsonschema
import pytest
import requests

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = json.loads((DATA / "schemas" / "corpus.json").read_text())
INVALID = json.loads((DATA / "schemas" / "invalid.json").read_text())
GRAMMARS = DATA / "grammars"
MAX_TOKENS = 400


def validate(text, schema):
    doc = json.loads(text)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator,
                        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return doc


def chat_schema(client, model_id, schema, temperature, stream, seed=7):
    kw = dict(model=model_id, max_tokens=MAX_TOKENS, temperature=temperature, seed=seed,
              messages=[{"role": "user", "content": "Answer in JSON."}],
              response_format={"type": "json_schema",
                               "json_schema": {"name": "answer", "schema": schema, "strict": True}})
    if not stream:
        c = client.chat.completions.create(**kw).choices[0]
        return c.message.content, c.finish_reason
    text, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


@pytest.mark.parametrize("entry", CORPUS, ids=[e["name"] for e in CORPUS])
def test_every_schema_answer_validates(client, model_id, entry):
    assert len(CORPUS) >= 30
    for temperature in (0, 1):
        for stream in (False, True):
            text, finish = chat_schema(client, model_id, entry["schema"], temperature, stream)
            assert finish == "stop", (temperature, stream, text)
            validate(text, entry["schema"])


def test_streamed_answer_equals_the_plain_one_at_temperature_0(client, model_id):
    schema = CORPUS[[e["name"] for e in CORPUS].index("array_of_objects")]["schema"]
    assert chat_schema(client, model_id, schema, 0, True) == chat_schema(client, model_id, schema, 0, False)


def test_several_seeds_and_choices_validate(server):
    schema = CORPUS[[e["name"] for e in CORPUS].index("nested_arrays_with_enums")]["schema"]
    r = requests.post(server.v1 + "/completions", json={
        "prompt": "Once", "max_tokens": MAX_TOKENS, "temperature": 1, "n": 3, "seed": 11,
        "json_schema": schema}).json()
    assert len(r["choices"]) == 3
    for c in r["choices"]:
        assert c["finish_reason"] == "stop"
        validate(c["text"], schema)


def test_json_object_mode_returns_an_object(client, model_id):
    r = client.chat.completions.create(model=model_id, max_tokens=MAX_TOKENS, temperature=0,
                                       messages=[{"role": "user", "content": "JSON please"}],
                                       response_format={"type": "json_object"})
    text = r.choices[0].message.content
    assert text.startswith("{")
    if r.choices[0].finish_reason == "stop":  # an unbounded object may run into max_tokens
        assert isinstance(json.loads(text), dict)


def complete_grammar(server, grammar, **kw):
    body = dict(prompt="Once upon a time", max_tokens=200, temperature=1, seed=3, grammar=grammar)
    body.update(kw)
    return requests.post(server.v1 + "/completions", json=body).json()


def arithmetic_prefix(text):
    """What arithmetic.gbnf implies for any prefix of its sentences: parentheses never close more than
    opened, an "=" stands outside them, starts no line and is followed by one term and a newline."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth < 0 or (ch == "=" and (depth > 0 or i == 0 or text[i - 1] == "\n")):
            return False
    for m in re.finditer(r"=[ \t\n]*", text):
        rest = text[m.end():]
        if not re.match(r"([a-z][a-z0-9_]*|[0-9]+|\(|$)", rest):
            return False
    return True


def test_llama_cpp_style_grammars_constrain_output(server):
    arithmetic = (GRAMMARS / "arithmetic.gbnf").read_text()
    lst = (GRAMMARS / "list.gbnf").read_text()
    js = (GRAMMARS / "json.gbnf").read_text()
    for seed in (1, 2, 3):
        out = complete_grammar(server, lst, seed=seed, max_tokens=60)["choices"][0]["text"]
        assert re.fullmatch(r"(- [^\r\n\x0b\x0c\x85\u2028\u2029]+\n)*(- [^\r\n]*)?", out), out
        out = complete_grammar(server, arithmetic, seed=seed, max_tokens=60)["choices"][0]["text"]
        assert re.fullmatch(r"[-+*/()a-z0-9_ \t\n=]*", out) and arithmetic_prefix(out), out
        out = complete_grammar(server, js, seed=seed, max_tokens=60)["choices"][0]
        assert out["text"].startswith("{")
        if out["finish_reason"] == "stop":
            json.loads(out["text"])


def test_small_grammar_ends_by_itself_and_keeps_stop_and_max_tokens(server):
    g = 'root ::= "id-" [0-9]{3} ("," [a-c])?'
    for seed in range(4):
        c = complete_grammar(server, g, seed=seed)["choices"][0]
        assert re.fullmatch(r"id-[0-9]{3}(,[a-c])?", c["text"]) and c["finish_reason"] == "stop", c
    c = complete_grammar(server, 'root ::= "abc" [x]{20}', max_tokens=5)["choices"][0]
    assert c["finish_reason"] == "length" and "abcxxxxxxxxxxxxxxxxxxxx".startswith(c["text"])
    c = complete_grammar(server, 'root ::= "one two three"', stop=[" two"])["choices"][0]
    assert c["text"] == "one" and c["finish_reason"] == "stop"


@pytest.mark.parametrize("entry", INVALID, ids=[e["name"] for e in INVALID])
def test_uncompilable_schema_is_a_named_400(server, entry):
    r = requests.post(server.v1 + "/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": entry["schema"]}}})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "response_format" and entry["mentions"] in err["message"], err


@pytest.mark.parametrize("grammar,mentions", [
    ('root ::= foo', "rule 'foo' is used but never defined"),
    ('root ::= "a', "unterminated string literal"),
    ('start ::= "a"', "no rule named 'root'"),
    ('root ::= root "a"', "left-recursive"),
    ('root ::= [z-a]', "reversed"),
])
def test_invalid_grammar_is_a_named_400(server, grammar, mentions):
    r = requests.post(server.v1 + "/completions", json={"prompt": "x", "grammar": grammar})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "grammar" and mentions in err["message"] and "line 1" in err["message"], err


def test_conflicting_constraints_and_unknown_formats_are_400(server):
    r = requests.post(server.v1 + "/completions", json={
        "prompt": "x", "grammar": 'root ::= "a"', "response_format": {"type": "json_object"}})
    assert r.status_code == 400 and "only one of" in r.json()["error"]["message"]
    r = requests.post(server.v1 + "/completions", json={"prompt": "x", "response_format": {"type": "yaml"}})
    assert r.status_code == 400 and "'yaml' is not supported" in r.json()["error"]["message"]
