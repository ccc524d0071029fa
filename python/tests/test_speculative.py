"""Speculative decoding in kiln.Llama with llama-cpp-python's names: Llama(..., draft_model=
LlamaPromptLookupDecoding(num_pred_tokens=N)) (llama_cpp.llama_speculative). At temperature 0 the text
is plain greedy decoding's, token for token, while fewer steps than tokens ran (guesses were kept); the
cache is left as a plain completion leaves it, so the next completion reuses it. Sampled output keeps
the sampler's distribution (checked statistically in tests/test_spec.c); here it is deterministic per
seed. The lookup itself is Kiln's kiln_spec_lookup: the continuation of the latest earlier occurrence of
the longest matching n-gram."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.llama_speculative import LlamaPromptLookupDecoding

REPEAT = ("Lily was sad and didn't know what to do. Lily was sad and didn't know what to do. "
          "Lily was sad and didn't know what to do.")


class Counting(LlamaPromptLookupDecoding):
    """Prompt lookup that counts its calls: one per target step."""

    calls = 0

    def __call__(self, input_ids, /, **kwargs):
        self.calls += 1
        return super().__call__(input_ids, **kwargs)


def test_lookup_guesses_what_followed_the_latest_occurrence_of_the_longest_ngram():
    look = LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=3)
    ids = np.array([5, 6, 7, 8, 5, 6, 9, 1, 5, 6], dtype=np.intc)
    assert list(look(ids)) == [9, 1, 5]  # [5, 6] last seen before at 4
    assert list(look(np.array([1, 2, 3], dtype=np.intc))) == []
    assert list(LlamaPromptLookupDecoding(1, 10)(np.array([4, 2, 4], dtype=np.intc))) == [2, 4]
    with pytest.raises(ValueError):
        LlamaPromptLookupDecoding(num_pred_tokens=0)


def test_greedy_text_is_plain_decodings_and_takes_fewer_steps_than_tokens(model_path):
    plain = kiln.Llama(model_path, n_ctx=512, verbose=False)
    draft = Counting(num_pred_tokens=8)
    spec = kiln.Llama(model_path, n_ctx=512, verbose=False, draft_model=draft)
    for prompt in (REPEAT, "Once upon a time", REPEAT + " She"):
        want = plain(prompt, max_tokens=64, temperature=0)
        draft.calls = 0
        got = spec(prompt, max_tokens=64, temperature=0)
        assert got["choices"][0]["text"] == want["choices"][0]["text"]
        assert got["usage"] == want["usage"]
        assert spec.ctx.n_past == plain.ctx.n_past  # the cache as a plain completion leaves it
    spec(REPEAT, max_tokens=64, temperature=0)
    draft.calls = 0
    out = spec(REPEAT, max_tokens=64, temperature=0)  # reuses the cached prompt
    assert out["choices"][0]["text"] == plain(REPEAT, max_tokens=64, temperature=0)["choices"][0]["text"]
    assert 0 < draft.calls < out["usage"]["completion_tokens"]
    plain.close()
    spec.close()


def test_sampled_text_is_deterministic_per_seed_and_streams(model_path):
    spec = kiln.Llama(model_path, n_ctx=512, verbose=False,
                      draft_model=LlamaPromptLookupDecoding(num_pred_tokens=4))
    a = spec(REPEAT, max_tokens=48, temperature=0.8, seed=11)["choices"][0]["text"]
    b = "".join(c["choices"][0]["text"] for c in spec(REPEAT, max_tokens=48, temperature=0.8, seed=11, stream=True))
    assert a == b and len(a) > 0
    spec.close()
