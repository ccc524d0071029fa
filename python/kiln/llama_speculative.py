"""Speculative decoding for kiln.Llama, named as llama-cpp-python's llama_cpp.llama_speculative.

A draft model guesses the next tokens from the tokens so far; Llama(..., draft_model=...) verifies the
guesses in one batch of the model and keeps each while the sampler returns it
(kiln_sampler_sample_draft: the same distribution as plain sampling; at temperature 0 the same tokens).

LlamaPromptLookupDecoding guesses by prompt lookup: what followed the latest earlier occurrence of the
last max_ngram_size .. 1 tokens (kiln_spec_lookup in the library, longest n-gram first).

LlamaModelDraft (Kiln's; llama-cpp-python has no draft-model class) guesses with a second, smaller GGUF
model of the same vocabulary: its greedy continuation, decoded in its own context, which it keeps between
calls so that each call decodes only the tokens that changed.
"""

from __future__ import annotations

import abc
from ctypes import POINTER, c_int32
import os
from typing import Any, List, Optional, Union

import numpy as np

from ._lib import check, lib
from .model import Model


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


class LlamaModelDraft(LlamaDraftModel):
    """A draft model: up to num_pred_tokens tokens of its greedy continuation of the ids so far (fewer at
    its end of sequence or its context's end).

    Args:
        model: a GGUF path, or a kiln.Model (borrowed) of the same vocabulary as the model it drafts for;
            kiln.Llama(draft_model=...) checks that (kiln_spec_check_draft) and refuses another.
        num_pred_tokens: guesses per call, 1 .. 64.
        n_ctx: the draft's KV cells; 0 = its model's context length.
        n_threads: CPU threads when a path is given (0 or None: the physical cores).
    """

    def __init__(self, model: Union[str, "os.PathLike[str]", Model], num_pred_tokens: int = 8, n_ctx: int = 0,
                 n_threads: Optional[int] = None):
        if num_pred_tokens < 1 or num_pred_tokens > 64:
            raise ValueError(f"num_pred_tokens {num_pred_tokens} must lie in 1 .. 64")
        self._owned = not isinstance(model, Model)
        self.model = Model(model, n_threads=n_threads) if self._owned else model
        self.num_pred_tokens = num_pred_tokens
        self.ctx = self.model.context(n_ctx=n_ctx)
        self._eos = self.model.eos
        self._tokens: List[int] = []  # what the draft's sequence 0 holds

    def check_vocabulary(self, target: Model) -> None:
        """Raise InvalidArgumentError (naming the first difference) unless this draft speaks target's
        vocabulary."""
        check(lib.kiln_spec_check_draft(target.handle, self.model.handle), "draft model")

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        ids = [int(t) for t in input_ids]
        keep = 0
        while keep < len(self._tokens) and keep < len(ids) - 1 and self._tokens[keep] == ids[keep]:
            keep += 1
        if keep < len(self._tokens):
            self.ctx.kv_seq_rm(0, keep, -1)
            del self._tokens[keep:]
        k = min(self.num_pred_tokens, self.ctx.n_ctx - len(ids))
        if k <= 0 or not ids:
            return np.zeros(0, dtype=np.intc)
        logits = self.ctx.decode(ids[keep:])
        self._tokens = ids
        out: List[int] = []
        while True:
            t = int(np.argmax(logits))  # the lowest id among equal maxima, as the target's greedy choice
            out.append(t)
            if len(out) == k or t == self._eos:
                break
            logits = self.ctx.decode([t])
            self._tokens.append(t)
        return np.asarray(out, dtype=np.intc)

    def close(self) -> None:
        """Free the draft's context (and its model when it loaded it). Idempotent."""
        self.ctx.close()
        if self._owned:
            self.model.close()
