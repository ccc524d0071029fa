"""
Tool calls in `kiln serve` (docs/server.md, "Tool calls") through the official `openai` client: the
tool-calling loop end to end (a request with tools and a forced tool_choice -> a tool_calls reply whose
arguments validate against the tool's schema with the `jsonschema` package -> the assistant's calls and a
`role: tool` result per call sent back -> a final answer with finish_reason "stop"), streamed and not,
and hostile tool fields refused by name.

The model is stories260K-shaped with random weights (`kiln synth`) and Qwen2.5-Instruct's chat template
(tests/data/tools/qwen2.5.jinja), so the server recognizes a ChatML model and uses the Hermes <tool_call>
syntax. Random weights know nothing of tools: what is tested is the format, the parser and the
constraint. The final answer is constrained by a small JSON schema so that it ends (a random model seldom
emits EOS); the schemas bound every string so that each call ends before max_tokens.
"""
import json
import subprocess
from pathlib import Path

import jsonschema
import openai
import pytest

from conftest import KILN_BIN

TEMPLATE = Path(__file__).resolve().parents[1] / "data" / "tools" / "qwen2.5.jinja"
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The local time in a time zone.",
        "parameters": {"type": "object", "properties": {
            "zone": {"enum": ["UTC", "Europe/Paris", "Asia/Tokyo"]}}, "required": ["zone"]}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ANSWER = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
    "type": "object", "properties": {"answer": {"type": "string", "maxLength": 16}},
    "required": ["answer"], "additionalProperties": False}}}
MAX_TOKENS = 1500


@pytest.fixture(scope="module")
def tools_client(start_server, logdir):
    model = Path(logdir) / "tools-qwen-template.gguf"
    subprocess.run([KILN_BIN, "synth", "--shape", "stories260k", "--n-ctx", "4096", "--chat-template", str(TEMPLATE),
                    "-t", "1", "-o", str(model)], check=True, capture_output=True, timeout=120)
    server = start_server("tools", model=str(model))
    return openai.OpenAI(base_url=server.v1, api_key="no-key", timeout=120, max_retries=0)


def ask(client, messages, stream, **kw):
    """One chat completion -> (message as a dict, finish_reason), assembling a stream's deltas as an
    application does."""
    kw = dict(model="m", messages=messages, tools=TOOLS, max_tokens=MAX_TOKENS, **kw)
    if not stream:
        choice = client.chat.completions.create(**kw).choices[0]
        return choice.message.model_dump(exclude_none=True), choice.finish_reason
    msg, calls, finish = {"role": "assistant", "content": ""}, {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        msg["content"] += delta.content or ""
        for tc in delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": "", "type": "function",
                                               "function": {"name": "", "arguments": ""}})
            call["id"] += tc.id or ""
            if tc.function:
                call["function"]["name"] += tc.function.name or ""
                call["function"]["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return msg, finish


def check_calls(msg, allowed):
    assert msg.get("tool_calls"), msg
    for call in msg["tool_calls"]:
        assert call["id"].startswith("call_") and call["type"] == "function"
        name = call["function"]["name"]
        assert name in allowed
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[name],
                            cls=jsonschema.Draft202012Validator)
    assert len({c["id"] for c in msg["tool_calls"]}) == len(msg["tool_calls"])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("choice", ["required", "named"])
def test_the_tool_calling_loop_ends_in_an_answer(tools_client, stream, choice):
    tool_choice = "required" if choice == "required" else {"type": "function", "function": {"name": "get_time"}}
    allowed = SCHEMAS if choice == "required" else ["get_time"]
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is the weather in Paris, and the time there?"}]
    for temperature, seed in ((0, 1), (1, 2)):
        msg, finish = ask(tools_client, messages, stream, tool_choice=tool_choice, temperature=temperature,
                          seed=seed)
        assert finish == "tool_calls", msg
        check_calls(msg, allowed)
    history = messages + [msg] + [
        {"role": "tool", "tool_call_id": c["id"], "content": json.dumps({"result": i})}
        for i, c in enumerate(msg["tool_calls"])]
    final, finish = ask(tools_client, history, stream, tool_choice="none" if stream else "auto",
                        response_format=ANSWER, temperature=0)
    assert finish == "stop", final
    assert "tool_calls" not in final
    jsonschema.validate(json.loads(final["content"]), ANSWER["json_schema"]["schema"])


def test_the_streamed_call_equals_the_plain_one_at_temperature_0(tools_client):
    messages = [{"role": "user", "content": "Time in Tokyo?"}]
    kw = dict(tool_choice="required", parallel_tool_calls=False, temperature=0)
    plain, _ = ask(tools_client, messages, False, **kw)
    streamed, _ = ask(tools_client, messages, True, **kw)
    assert len(plain["tool_calls"]) == 1
    assert [c["function"] for c in plain["tool_calls"]] == [c["function"] for c in streamed["tool_calls"]]
    assert (plain.get("content") or "") == streamed["content"]


def test_auto_answers_with_content_or_well_formed_calls(tools_client):
    for stream in (False, True):
        msg, finish = ask(tools_client, [{"role": "user", "content": "Hello"}], stream, tool_choice="auto",
                          temperature=1, seed=5, max_completion_tokens=24)
        assert finish in ("stop", "length", "tool_calls")
        if finish == "tool_calls":
            check_calls(msg, SCHEMAS)
        else:
            assert isinstance(msg["content"], str) and "tool_calls" not in msg


@pytest.mark.parametrize("kw, param, fragment", [
    (dict(tool_choice={"type": "function", "function": {"name": "launch"}}), "tool_choice", "not in 'tools'"),
    (dict(tool_choice="always"), "tool_choice", "'always'"),
    (dict(tools=[{"type": "function", "function": {"name": "bad name"}}]), "tools", "letters, digits"),
    (dict(tools=TOOLS + TOOLS[:1]), "tools", "both named 'get_weather'"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "x+"}}}}}],
          tool_choice="required"), "tools", "cannot be enforced"),
    (dict(tool_choice="required", response_format={"type": "json_object"}), "tool_choice", "cannot be combined"),
    (dict(functions=[{"name": "f", "parameters": {}}]), "functions", "use 'tools'"),
    (dict(messages=[{"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "f", "arguments": "not json"}}]}]), "messages[0].tool_calls", "not a JSON object"),
    (dict(messages=[{"role": "tool", "tool_call_id": 7, "content": "x"}]), "messages[0]", "must be a string"),
])
def test_hostile_tool_fields_are_refused_by_name(tools_client, kw, param, fragment):
    args = dict(model="m", messages=[{"role": "user", "content": "Hi"}], tools=TOOLS, max_tokens=4)
    args.update(kw)
    extra = {k: args.pop(k) for k in ("functions",) if k in args}
    with pytest.raises(openai.BadRequestError) as e:
        tools_client.chat.completions.create(extra_body=extra or None, **args)
    err = e.value.body
    assert err["param"] == param and fragment in err["message"], err


def test_the_clients_own_stream_accumulator_assembles_the_call(tools_client):
    """openai's chat.completions.stream helper: its events and final completion from Kiln's deltas."""
    kinds = set()
    with tools_client.chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "Time?"}], tools=TOOLS, temperature=0,
            tool_choice={"type": "function", "function": {"name": "get_time"}}, max_tokens=MAX_TOKENS) as s:
        for event in s:
            kinds.add(event.type)
        final = s.get_final_completion()
    assert "tool_calls.function.arguments.done" in kinds
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    check_calls(choice.message.model_dump(exclude_none=True), ["get_time"])
