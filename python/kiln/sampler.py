"""Token sampling (kiln_sampler): repeat penalty, top-k, top-p, min-p, temperature and the draw, in
llama.cpp's order (docs/tokenizer.md). temperature <= 0 is greedy: the argmax, lowest id on ties."""

from __future__ import annotations

from ctypes import POINTER, byref, c_float, c_int32
from typing import Any, Optional

import numpy as np

from . import _lib
from ._handle import Handle
from ._lib import check, lib


class Sampler(Handle):
    _kind = "sampler"

    """Chooses the next token from a row of logits.

    Args:
        n_vocab: the vocabulary size (the length of every logits row).
        temperature: <= 0 for greedy.
        top_k: keep the k most likely tokens; <= 0 = off.
        top_p: nucleus sampling; >= 1 = off.
        min_p: drop tokens below min_p times the top probability; <= 0 = off.
        repeat_penalty: 1 = off.
        repeat_last_n: how many accepted tokens the penalty looks at.
        seed: the random seed (the same seed and the same logits give the same tokens).
    """

    def __init__(
        self,
        n_vocab: int,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        repeat_penalty: float = 1.0,
        repeat_last_n: int = 64,
        seed: int = 0,
    ) -> None:
        self._handle: Optional[int] = None
        self._matcher: Any = None
        self.n_vocab = int(n_vocab)
        p = lib.kiln_sampler_params_default()
        p.temperature = float(temperature)
        p.top_k = int(top_k)
        p.top_p = float(top_p)
        p.min_p = float(min_p)
        p.repeat_penalty = float(repeat_penalty)
        p.repeat_last_n = int(repeat_last_n)
        p.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        handle = _lib.sampler_p()
        check(lib.kiln_sampler_create(self.n_vocab, byref(p), byref(handle)), "sampler")
        self._handle = handle.value

    def _destroy(self, handle: int) -> None:
        lib.kiln_sampler_destroy(handle)

    def _h(self) -> int:
        if self._handle is None:
            raise ValueError("the sampler is closed")
        return self._handle

    def sample(self, logits: Any) -> int:
        """The next token for a row of n_vocab logits (a float32 numpy array such as Context.decode
        returns, or anything numpy turns into one; it is not modified)."""
        row = np.ascontiguousarray(logits, dtype=np.float32)
        if row.ndim != 1 or row.shape[0] != self.n_vocab:
            raise ValueError(f"logits must be {self.n_vocab} floats, not shape {row.shape}")
        out = c_int32()
        check(lib.kiln_sampler_sample(self._h(), row.ctypes.data_as(POINTER(c_float)), byref(out)), "sample")
        return int(out.value)

    def sample_draft(self, logits: Any, draft: int) -> int:
        """As sample(), and distributed the same, but returning draft whenever it can (with the
        probability the distribution gives it; greedy: exactly when it is the argmax). Speculative
        decoding keeps a guessed token when this returns it (kiln_sampler_sample_draft)."""
        row = np.ascontiguousarray(logits, dtype=np.float32)
        if row.ndim != 1 or row.shape[0] != self.n_vocab:
            raise ValueError(f"logits must be {self.n_vocab} floats, not shape {row.shape}")
        out = c_int32()
        check(lib.kiln_sampler_sample_draft(self._h(), row.ctypes.data_as(POINTER(c_float)), int(draft), byref(out)),
              "sample")
        return int(out.value)

    def set_grammar(self, matcher: Any) -> None:
        """Constrain sampling by a kiln.grammar.GrammarMatcher (None removes it): sample() then picks only
        tokens the grammar allows and advances the matcher by the token it returns."""
        self._matcher = matcher  # the C sampler borrows it
        check(lib.kiln_sampler_set_grammar(self._h(), matcher.handle if matcher is not None else None), "sampler")

    def accept(self, token: int) -> None:
        """Record a token (of the prompt, or sampled) in the history the repeat penalty looks at."""
        lib.kiln_sampler_accept(self._h(), int(token))

