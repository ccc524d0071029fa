"""Speculative decoding in kiln.Llama with llama-cpp-python's names: Llama(..., draft_model=
LlamaPromptLookupDecoding(num_pred_tokens=N)) (llama_cpp.llama_speculative), and Kiln's LlamaModelDraft
(a second GGUF model guessing greedily: the model itself, and a Q4_0 copy made by `kiln quantize`). At temperature 0 the text
is plain greedy decoding's, token for token, while fewer steps than tokens ran (guesses were kept); the
cache is left as a plain completion leaves it, so the next completion reuses it. Sampled output keeps
the sampler's distribution (checked statistically in tests/test_spec.c); here it is deterministic per
seed. The lookup itself is Kiln's kiln_spec_lookup: the continuation of the latest earlier occurrence of
the longest matching n-gram."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.llama_speculative import LlamaModelDraft, LlamaPromptLookupDecoding

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


class CountingModelDraft(LlamaModelDraft):
    """A draft model that counts its calls and the guesses it made."""

    calls = guessed = 0

    def __call__(self, input_ids, /, **kwargs):
        out = super().__call__(input_ids, **kwargs)
        self.calls += 1
        self.guessed += len(out)
        return out


def test_a_draft_model_gives_plain_greedy_text_and_its_own_guesses_are_kept(model_path, cli, tmp_path):
    q4 = tmp_path / "draft-q4_0.gguf"
    subprocess.run([cli, "quantize", model_path, str(q4), "Q4_0"], check=True, capture_output=True, timeout=120)
    plain = kiln.Llama(model_path, n_ctx=512, verbose=False)
    for path in (model_path, q4):
        draft = CountingModelDraft(path, num_pred_tokens=6)
        spec = kiln.Llama(model_path, n_ctx=512, verbose=False, draft_model=draft)
        for prompt in ("Once upon a time", "The little dog", REPEAT):
            want = plain(prompt, max_tokens=48, temperature=0)
            draft.calls = draft.guessed = 0
            got = spec(prompt, max_tokens=48, temperature=0)
            assert got["choices"][0]["text"] == want["choices"][0]["text"], (path, prompt)
            assert got["usage"] == want["usage"]
            assert draft.guessed > 0
            if path == model_path:  # the model guessing for itself: its guesses are kept
                assert 0 < draft.calls < got["usage"]["completion_tokens"]
        spec.close()
        draft.close()
    plain.close()


def test_a_draft_model_of_another_vocabulary_is_refused_by_name(model_path):
    other = LlamaModelDraft(str(Path(__file__).resolve().parents[2] / "tests" / "data" / "arch" / "llama3.gguf"))
    with pytest.raises(kiln.InvalidArgumentError, match="vocabulary"):
        kiln.Llama(model_path, n_ctx=512, verbose=False, draft_model=other)
    other.close()
    with pytest.raises(ValueError):
        LlamaModelDraft(model_path, num_pred_tokens=0)
