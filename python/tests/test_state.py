"""Llama.save_state/load_state (llama-cpp-python's names) and Context.state_get/state_set over Kiln's KV
state format (kiln_ctx_state_*): a restored Llama continues exactly as the one that saved, and a state
of another model or a corrupt one is refused by name."""

from __future__ import annotations

import pytest

import kiln

PROMPT = "Once upon a time, there was a little girl named Lily."


def test_a_loaded_state_continues_like_the_saved_llama(model_path):
    a = kiln.Llama(model_path, n_ctx=256, verbose=False)
    b = kiln.Llama(model_path, n_ctx=256, verbose=False)
    first = a("Once upon a time,", max_tokens=8, temperature=0)["choices"][0]["text"]
    state = a.save_state()
    assert state.n_tokens == len(state.input_ids) > 8 and state.llama_state[:8] == b"KILNKVST"
    assert state.llama_state_size == len(state.llama_state)
    b.load_state(state)
    assert b.ctx.n_past == state.n_tokens
    prompt = "Once upon a time," + first + " The"
    want = a(prompt, max_tokens=16, temperature=0)["choices"][0]["text"]
    got = b(prompt, max_tokens=16, temperature=0)["choices"][0]["text"]
    assert got == want
    a.close()
    b.close()


def test_a_state_of_another_model_or_a_corrupt_one_is_refused_by_name(model_path):
    llm = kiln.Llama(model_path, n_ctx=64, verbose=False)
    llm("Once", max_tokens=2, temperature=0)
    state = llm.save_state()
    bad = kiln.LlamaState(state.input_ids, state.scores, state.n_tokens, state.llama_state[:-1],
                          state.llama_state_size - 1, state.seed)
    with pytest.raises(kiln.FormatError, match="truncated or trailing"):
        llm.load_state(bad)
    assert llm.ctx.kv_n_used() == 0
    other = kiln.Model(str(model_path).replace("models/stories260K.gguf", "tests/data/arch/llama3.gguf"))
    with other.context(n_ctx=64) as ctx:
        with pytest.raises(kiln.InvalidArgumentError, match="saved from another model"):
            ctx.state_set(0, state.llama_state)
    other.close()
    llm.close()
