"""Speculative decoding for kiln.Llama, named as llama-cpp-python's llama_cpp.llama_speculative.

A draft model guesses the next tokens from the tokens so far; Llama(..., draft_model=...) verifies the
guesses in one batch of the model and keeps each while the sampler returns it
(kiln_sampler_sample_draft: the same distribution as plain sampling; at temperature 0 the same tokens).

LlamaPromptLookupDecoding guesses by prompt lookup: what followed the latest earlier occurrence of the
last max_ngram_size .. 1 tokens (kiln_spec_lookup in the library, longest n-gram first).
"""

from __future__ import annotations

import abc
from ctypes import POINTER, c_int32
from typing import Any

import numpy as np

from ._lib import lib


class LlamaDraftModel(abc.ABC):
    """Anything that maps the token ids so far (a numpy intc array) to guessed next ids."""

    @abc.abstractmethod
    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        raise NotImplementedError()


class LlamaPromptLookupDecoding(LlamaDraftModel):
    """Prompt lookup: up to num_pred_tokens guesses, matching n-grams of max_ngram_size down to 1."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10):
        if max_ngram_size < 1 or max_ngram_size > 16:
            raise ValueError(f"max_ngram_size {max_ngram_size} must lie in 1 .. 16")
        if num_pred_tokens < 1 or num_pred_tokens > 64:
            raise ValueError(f"num_pred_tokens {num_pred_tokens} must lie in 1 .. 64")
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        ids = np.ascontiguousarray(input_ids, dtype=np.int32)
        out = np.zeros(self.num_pred_tokens, dtype=np.int32)
        n = lib.kiln_spec_lookup(ids.ctypes.data_as(POINTER(c_int32)), int(ids.shape[0]), 1, self.max_ngram_size,
                                 self.num_pred_tokens, out.ctypes.data_as(POINTER(c_int32)))
        return out[: max(0, int(n))].astype(np.intc)
