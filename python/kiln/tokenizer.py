"""The streaming detokenizer (kiln_detok): feed token ids one at a time, get back the bytes that are
complete. A UTF-8 character split across byte-fallback tokens is held back until it completes, so every
piece decodes as UTF-8 on its own; flush() emits what is still held (incomplete UTF-8 becomes U+FFFD).
Tokenizing and whole-sequence detokenizing are methods of Model (Model.tokenize, Model.detokenize).
"""

from __future__ import annotations

from ctypes import byref
from typing import Any, Optional

from . import _lib
from ._handle import Handle
from ._lib import check, lib
from .model import Model


class Detokenizer(Handle):
    _kind = "detokenizer"

    """Streaming detokenizer over a model's vocabulary.

    Args:
        model: the Model whose vocabulary is used (kept alive by the detokenizer).
        strip_leading_space: drop the space the tokenizer prefixed to the first word; set it when the
            stream starts at the beginning of a sequence (SentencePiece and WordPiece vocabularies).
    """

    def __init__(self, model: Model, strip_leading_space: bool = False) -> None:
        self._handle: Optional[int] = None
        self.model = model
        handle = _lib.detok_p()
        check(lib.kiln_detok_create(model.vocab_handle, bool(strip_leading_space), byref(handle)), "detok")
        self._handle = handle.value

    def _destroy(self, handle: int) -> None:
        lib.kiln_detok_destroy(handle)

    def _h(self) -> int:
        if self._handle is None:
            raise ValueError("the detokenizer is closed")
        self.model.handle  # the vocabulary lives in the model: raises once it is closed
        return self._handle

    def push(self, token: int) -> bytes:
        """Append a token; return the bytes that are now complete (possibly b"")."""
        out = _lib.kiln_str()
        check(lib.kiln_detok_push(self._h(), int(token), byref(out)), "detokenize")
        return _lib.str_bytes(out)

    def flush(self) -> bytes:
        """Return whatever is held back (incomplete UTF-8 becomes U+FFFD)."""
        out = _lib.kiln_str()
        check(lib.kiln_detok_flush(self._h(), byref(out)), "detokenize")
        return _lib.str_bytes(out)
