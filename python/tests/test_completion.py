"""Llama.create_completion / __call__: greedy text identical to `kiln run --temp 0`, the shape of the
OpenAI-style dicts and chunks, stop strings, max_tokens, seeds, echo and logprobs."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from conftest import run_cli

PROMPTS = ["Once upon a time", "Lily and Tom went to the park. They saw", "The cat"]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_text_is_kiln_run_stdout_minus_the_prompt(llm, cli, model_path, prompt):
    want = run_cli(cli, ["run", "-m", model_path, "-p", prompt, "-n", "48", "--temp", "0"])
    assert want.startswith(prompt.encode())
    got = llm(prompt, max_tokens=48, temperature=0)
    assert got["choices"][0]["text"].encode("utf-8") == want[len(prompt.encode()) :]


def test_greedy_from_an_empty_prompt_matches_kiln_run(llm, cli, model_path):
    want = run_cli(cli, ["run", "-m", model_path, "-n", "30", "--temp", "0"])
    assert llm("", max_tokens=30, temperature=0)["choices"][0]["text"].encode() == want


def test_a_fresh_llama_and_a_reused_prefix_give_the_same_greedy_text(llm, model_path):
    llm("Once upon a time, there was a dog", max_tokens=8, temperature=0)  # leaves a shared prefix cached
    reused = llm("Once upon a time", max_tokens=24, temperature=0)["choices"][0]["text"]
    with kiln.Llama(model_path, verbose=False) as fresh:
        assert fresh("Once upon a time", max_tokens=24, temperature=0)["choices"][0]["text"] == reused


def test_completion_dict_has_llama_cpp_pythons_shape(llm):
    out = llm.create_completion("Once upon a time", max_tokens=5, temperature=0)
    assert set(out) == {"id", "object", "created", "model", "choices", "usage"}
    assert out["id"].startswith("cmpl-") and out["object"] == "text_completion"
    assert isinstance(out["created"], int) and out["model"] == llm.model_path
    (choice,) = out["choices"]
    assert set(choice) == {"text", "index", "logprobs", "finish_reason"}
    assert choice["index"] == 0 and choice["logprobs"] is None and choice["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}


def test_stream_chunks_add_up_to_the_plain_completion(llm):
    plain = llm("Once upon a time", max_tokens=20, temperature=0)
    chunks = list(llm("Once upon a time", max_tokens=20, temperature=0, stream=True))
    for c in chunks:
        assert set(c) == {"id", "object", "created", "model", "choices"}
        assert c["object"] == "text_completion" and c["id"] == chunks[0]["id"]
        assert set(c["choices"][0]) == {"text", "index", "logprobs", "finish_reason"}
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0] == {"text": "", "index": 0, "logprobs": None, "finish_reason": "length"}
    assert "".join(c["choices"][0]["text"] for c in chunks) == plain["choices"][0]["text"]


def test_a_stop_string_ends_the_text_before_it(llm):
    full = llm("Once upon a time", max_tokens=40, temperature=0)["choices"][0]["text"]
    stop = " named"
    assert stop in full
    out = llm("Once upon a time", max_tokens=40, temperature=0, stop=[stop, "zzz"])
    assert out["choices"][0]["text"] == full[: full.index(stop)]
    assert out["choices"][0]["finish_reason"] == "stop"
    chunks = [c["choices"][0]["text"] for c in llm("Once upon a time", max_tokens=40, temperature=0, stop=stop, stream=True)]
    assert "".join(chunks) == full[: full.index(stop)]
    assert not any("named" in c or c.endswith(" nam") for c in chunks)


def test_max_tokens_none_runs_to_the_end_of_the_context(model_path):
    with kiln.Llama(model_path, n_ctx=32, verbose=False) as small:
        out = small("Once upon a time", max_tokens=None, temperature=0)
        assert out["usage"]["total_tokens"] <= 32
        with pytest.raises(ValueError, match="exceed context window of 32"):
            small("word " * 40, max_tokens=4)


def test_the_same_seed_gives_the_same_sampled_text(llm):
    a = llm("Once upon a time", max_tokens=30, temperature=1.0, seed=7)["choices"][0]["text"]
    b = llm("Once upon a time", max_tokens=30, temperature=1.0, seed=7)["choices"][0]["text"]
    c = [llm("Once upon a time", max_tokens=30, temperature=1.0, seed=s)["choices"][0]["text"] for s in (8, 9, 10)]
    assert a == b
    assert any(x != a for x in c)


def test_echo_prepends_the_prompt(llm):
    plain = llm("The cat", max_tokens=6, temperature=0)["choices"][0]["text"]
    assert llm("The cat", max_tokens=6, temperature=0, echo=True)["choices"][0]["text"] == "The cat" + plain


def test_logprobs_score_each_generated_token(llm):
    out = llm("Once upon a time", max_tokens=6, temperature=0, logprobs=3)
    lp = out["choices"][0]["logprobs"]
    assert set(lp) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert "".join(lp["tokens"]) == out["choices"][0]["text"]
    assert len(lp["token_logprobs"]) == 6 == out["usage"]["completion_tokens"]
    for tok, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert value <= 0 and top[tok] == value
        assert value == max(top.values())  # greedy picks the most likely token
        assert 3 <= len(top) <= 4
    assert lp["text_offset"][0] == len("Once upon a time")


def test_a_prompt_of_token_ids_is_taken_as_is(llm):
    ids = llm.tokenize(b"Once upon a time")
    assert llm(ids, max_tokens=10, temperature=0)["choices"][0]["text"] == \
        llm("Once upon a time", max_tokens=10, temperature=0)["choices"][0]["text"]


def test_logits_processor_and_logit_bias_change_the_choice(llm):
    base = llm("Once upon a time", max_tokens=1, temperature=0)["choices"][0]["text"]
    with llm.model.context(n_ctx=32) as ctx:
        banned = int(np.argmax(ctx.decode(llm.tokenize(b"Once upon a time"))))
    assert llm.detokenize([banned]) == base.encode()
    out = llm("Once upon a time", max_tokens=1, temperature=0, logit_bias={banned: -1000.0})
    assert out["choices"][0]["text"] != base

    def ban(ids, scores):
        scores = scores.copy()
        scores[banned] = -float("inf")
        return scores

    assert llm("Once upon a time", max_tokens=1, temperature=0, logits_processor=[ban])["choices"][0]["text"] \
        == out["choices"][0]["text"]


def test_unsupported_sampling_options_say_so(llm):
    with pytest.raises(NotImplementedError, match="mirostat_mode"):
        llm("Once", max_tokens=1, mirostat_mode=2)
    with pytest.raises(TypeError, match="grammar must be a LlamaGrammar or GBNF text"):
        llm("Once", max_tokens=1, grammar=object())


def test_an_abandoned_stream_leaves_the_llama_usable(llm):
    want = llm("The cat", max_tokens=12, temperature=0)["choices"][0]["text"]
    stream = llm("Once upon a time", max_tokens=30, temperature=0, stream=True)
    next(stream), next(stream)
    stream.close()
    assert llm("The cat", max_tokens=12, temperature=0)["choices"][0]["text"] == want
