"""Llama.create_chat_completion: the chat.completion dict, the chat.completion.chunk stream (first a role
delta, then content deltas, then an empty delta with the finish_reason), and the templates."""

from __future__ import annotations

import pytest

import kiln

MESSAGES = [
    {"role": "system", "content": "You tell short stories."},
    {"role": "user", "content": "Tell me about a cat."},
]


def test_chat_completion_has_llama_cpp_pythons_shape(llm):
    out = llm.create_chat_completion(messages=MESSAGES, max_tokens=12, temperature=0)
    assert set(out) == {"id", "object", "created", "model", "choices", "usage"}
    assert out["id"].startswith("chatcmpl-") and out["object"] == "chat.completion"
    (choice,) = out["choices"]
    assert set(choice) == {"index", "message", "logprobs", "finish_reason"}
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length") and choice["logprobs"] is None
    u = out["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and u["completion_tokens"] <= 12


def test_every_stream_chunk_has_the_chunk_shape(llm):
    plain = llm.create_chat_completion(messages=MESSAGES, max_tokens=12, temperature=0)
    chunks = list(llm.create_chat_completion(messages=MESSAGES, max_tokens=12, temperature=0, stream=True))
    assert len(chunks) >= 3
    for c in chunks:
        assert set(c) == {"id", "model", "created", "object", "choices"}
        assert c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"]
        assert c["id"].startswith("chatcmpl-")
        (choice,) = c["choices"]
        assert set(choice) == {"index", "delta", "logprobs", "finish_reason"} and choice["index"] == 0
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[0]["choices"][0]["finish_reason"] is None
    for c in chunks[1:-1]:
        assert set(c["choices"][0]["delta"]) == {"content"} and c["choices"][0]["finish_reason"] is None
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert content == plain["choices"][0]["message"]["content"]


def test_a_model_without_a_template_uses_plain(llm):
    assert llm.chat_format == "plain"
    text = kiln.ChatTemplate.by_name("plain").render(MESSAGES)
    assert "Tell me about a cat." in text and text.endswith("Assistant:")


def test_the_chat_prompt_is_the_rendered_template(llm, model_path):
    rendered = kiln.ChatTemplate.by_name("chatml").render(MESSAGES, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")
    with kiln.Llama(model_path, chat_format="chatml", verbose=False) as chatml:
        out = chatml.create_chat_completion(messages=MESSAGES, max_tokens=8, temperature=0)
        want = chatml.create_completion(rendered, max_tokens=8, temperature=0)
        assert out["choices"][0]["message"]["content"] == want["choices"][0]["text"]
        assert out["usage"]["prompt_tokens"] == want["usage"]["prompt_tokens"]


def test_chat_logprobs_come_in_the_chat_shape(llm):
    out = llm.create_chat_completion(messages=MESSAGES, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"]
    for item in content:
        assert set(item) == {"token", "bytes", "logprob", "top_logprobs"}
        assert all(set(t) == {"token", "logprob", "bytes"} for t in item["top_logprobs"])


def test_unknown_chat_format_and_tools_are_refused(model_path, llm):
    with pytest.raises(ValueError, match="chat_format 'alpaca'"):
        kiln.Llama(model_path, chat_format="alpaca", verbose=False)
    with pytest.raises(NotImplementedError, match="tools"):
        llm.create_chat_completion(messages=MESSAGES, tools=[{"type": "function"}])
