"""The exceptions of the binding: one class per kiln_status, all under KilnError.

Every fallible C call returns a kiln_status; the binding turns a negative one into the exception of its
class, carrying the status (its number and its constant name, as kiln_status_name gives it) and the
message kiln_last_error() gave on the same thread right after the call, which names what was wrong.
Where a status has an obvious Python counterpart the class derives from it too, so that code written
against plain Python errors (``except ValueError``, ``except OSError``, ``except MemoryError``) still
catches it.
"""

from __future__ import annotations

from typing import Dict, Type


class KilnError(Exception):
    """A call into libkiln failed.

    Attributes:
        status: the kiln_status number (negative).
        status_name: its constant name, such as ``"KILN_E_FORMAT"``.
        message: what the library said was wrong (kiln_last_error()).
    """

    status: int = 0
    status_name: str = "KILN_E_UNKNOWN"

    def __init__(self, message: str, status: int = 0, status_name: str = "") -> None:
        super().__init__(message)
        self.message = message
        if status:
            self.status = status
        if status_name:
            self.status_name = status_name

    def __str__(self) -> str:
        return f"{self.message} ({self.status_name})" if self.message else self.status_name


class InvalidArgumentError(KilnError, ValueError):
    """KILN_E_INVALID_ARG: a caller passed an invalid argument."""

    status, status_name = -1, "KILN_E_INVALID_ARG"


class OutOfMemoryError(KilnError, MemoryError):
    """KILN_E_NOMEM: an allocation failed."""

    status, status_name = -2, "KILN_E_NOMEM"


class KilnIOError(KilnError, OSError):
    """KILN_E_IO: opening, reading, writing or mapping a file failed (a missing model file, say)."""

    status, status_name = -3, "KILN_E_IO"


class FormatError(KilnError, ValueError):
    """KILN_E_FORMAT: a file or blob is malformed."""

    status, status_name = -4, "KILN_E_FORMAT"


class UnsupportedError(KilnError):
    """KILN_E_UNSUPPORTED: well-formed, but not something Kiln can do (yet)."""

    status, status_name = -5, "KILN_E_UNSUPPORTED"


class ContextFullError(KilnError):
    """KILN_E_CONTEXT_FULL: the request does not fit in the KV cache."""

    status, status_name = -6, "KILN_E_CONTEXT_FULL"


class NotFoundError(KilnError, LookupError):
    """KILN_E_NOT_FOUND: a key, tensor or file is absent."""

    status, status_name = -7, "KILN_E_NOT_FOUND"


class RangeError(KilnError, ValueError):
    """KILN_E_RANGE: a value or buffer size is out of range."""

    status, status_name = -8, "KILN_E_RANGE"


class InternalError(KilnError):
    """KILN_E_INTERNAL: a bug in Kiln; please report it."""

    status, status_name = -9, "KILN_E_INTERNAL"


class AbortedError(KilnError):
    """KILN_E_ABORTED: the abort callback stopped the call."""

    status, status_name = -10, "KILN_E_ABORTED"


#: The class of each status, the one place that maps numbers to exceptions.
ERROR_CLASSES: Dict[int, Type[KilnError]] = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        OutOfMemoryError,
        KilnIOError,
        FormatError,
        UnsupportedError,
        ContextFullError,
        NotFoundError,
        RangeError,
        InternalError,
        AbortedError,
    )
}


def error_for(status: int, message: str, status_name: str) -> KilnError:
    """The exception for a failed call: its status's class, or KilnError for a number this binding
    does not know (a newer library)."""
    cls = ERROR_CLASSES.get(status, KilnError)
    return cls(message, status, status_name)
