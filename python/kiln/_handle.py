"""The lifetime every wrapper of a Kiln handle shares: close() destroys the C object once (idempotent),
the wrapper is a context manager, and garbage collection closes what the caller forgot. Subclasses name
what they wrap (_kind, for the "closed" error) and how to destroy it (_destroy)."""
from __future__ import annotations

from typing import Any, Optional


class Handle:
    _kind = "object"

    def __init__(self) -> None:
        self._handle: Optional[int] = None

    def _destroy(self, handle: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Destroy the C object. Idempotent."""
        if self._handle is not None:
            self._destroy(self._handle)
            self._handle = None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.close()

    @property
    def handle(self) -> int:
        """The C pointer (raises ValueError once closed)."""
        if self._handle is None:
            raise ValueError(f"the {self._kind} is closed")
        return self._handle
