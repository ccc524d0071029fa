"""The low level: libkiln.so loaded with ctypes, the public structs of include/kiln.h mirrored field by
field, and a prototype (argtypes and restype) for every function the binding calls.

ctypes rather than a compiled extension: the binding needs no compiler and no Python headers, the one
native file is libkiln.so itself (built by CMake), and the same package works on every CPython >= 3.9
without a build per interpreter. ctypes releases the GIL for the length of each C call, so a
long decode does not stop other Python threads.

The library is looked for next to this file (where `pip install ./python` puts it); the environment
variable KILN_LIBRARY names another file instead (a development build's libkiln.so, say).

check(status) turns a negative kiln_status into the exception of its class (kiln.errors), with the
message of kiln_last_error() read on the same thread right after the call, before any other Kiln call
can replace it.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int8,
    c_int32,
    c_int64,
    c_size_t,
    c_uint64,
    c_void_p,
)
from typing import Any, Optional

from .errors import KilnError, error_for

# --- Types of include/kiln.h -------------------------------------------------------------------------

c_status = c_int  # kiln_status (an enum: int)
c_enum = c_int  # kiln_type, kiln_pooling, kiln_gguf_type

KILN_OK = 0
KILN_E_INVALID_ARG = -1
KILN_E_RANGE = -8
KILN_E_NOT_FOUND = -7
KILN_SEQ_MAX = 64

KILN_TYPE_F32 = 0
KILN_TYPE_F16 = 1
KILN_TYPE_Q8_0 = 8

KILN_POOLING_UNSPECIFIED = -1
KILN_POOLING_NONE = 0
KILN_POOLING_MEAN = 1
KILN_POOLING_CLS = 2
KILN_POOLING_LAST = 3

KILN_TOKEN_CONTROL = 3

KILN_GPU_LAYERS_NONE = -1  # kiln_model_params.gpu_layers
KILN_GPU_LAYERS_AUTO = -2

progress_fn = CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)  # kiln_progress_fn
abort_fn = CFUNCTYPE(c_bool, c_void_p)  # kiln_abort_fn
log_fn = CFUNCTYPE(None, c_void_p, c_char_p)  # kiln_log_fn


class kiln_str(Structure):
    # data is not NUL-terminated: read it with ctypes.string_at(data, len).
    _fields_ = [("data", c_void_p), ("len", c_size_t)]


class kiln_model_params(Structure):
    _fields_ = [
        ("n_threads", c_int32),
        ("devices", c_char_p),
        ("progress", progress_fn),
        ("progress_user", c_void_p),
        ("gpu_layers", c_int32),  # 0 = every layer; KILN_GPU_LAYERS_NONE / _AUTO
    ]


class kiln_ctx_params(Structure):
    _fields_ = [
        ("n_ctx", c_int32),
        ("n_batch", c_int32),
        ("n_seq_max", c_int32),
        ("passes", c_char_p),
        ("no_fuse", c_bool),
        ("check_passes", c_bool),
        ("kv_type", c_enum),
        ("abort_fn", abort_fn),
        ("abort_user", c_void_p),
        ("log", log_fn),
        ("log_user", c_void_p),
        ("embeddings", c_bool),
        ("pooling", c_enum),
    ]


class kiln_batch(Structure):
    _fields_ = [
        ("n_tokens", c_int32),
        ("capacity", c_int32),
        ("token", POINTER(c_int32)),
        ("pos", POINTER(c_int32)),
        ("seq_id", POINTER(c_int32)),
        ("logits", POINTER(c_int8)),
    ]


class kiln_sampler_params(Structure):
    _fields_ = [
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repeat_penalty", c_float),
        ("repeat_last_n", c_int32),
        ("seed", c_uint64),
    ]


class kiln_chat_message(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


# Opaque handles are plain pointers.
model_p = c_void_p
ctx_p = c_void_p
vocab_p = c_void_p
gguf_p = c_void_p
sampler_p = c_void_p
detok_p = c_void_p
template_p = c_void_p
grammar_p = c_void_p
grammar_vocab_p = c_void_p
matcher_p = c_void_p

# --- Prototypes ----------------------------------------------------------------------------------------

# name: (restype, [argtypes])
_PROTOTYPES = {
    "kiln_status_name": (c_char_p, [c_status]),
    "kiln_last_error": (c_char_p, []),
    "kiln_default_threads": (c_int32, []),
    "kiln_set_cpu_level": (c_status, [c_char_p]),
    "kiln_get_cpu_level": (c_char_p, []),
    # Models
    "kiln_model_params_default": (kiln_model_params, []),
    "kiln_model_load_ex": (c_status, [c_char_p, POINTER(kiln_model_params), POINTER(model_p)]),
    "kiln_model_destroy": (None, [model_p]),
    "kiln_model_gguf": (gguf_p, [model_p]),
    "kiln_model_vocab": (vocab_p, [model_p]),
    "kiln_model_backends": (c_char_p, [model_p]),
    "kiln_model_n_ctx_train": (c_int32, [model_p]),
    "kiln_model_n_vocab": (c_int32, [model_p]),
    "kiln_model_n_embd": (c_int32, [model_p]),
    "kiln_model_arch": (c_char_p, [model_p]),
    "kiln_model_pooling": (c_enum, [model_p]),
    "kiln_model_is_causal": (c_bool, [model_p]),
    "kiln_model_weight_bytes": (c_uint64, [model_p]),
    "kiln_model_n_threads": (c_int32, [model_p]),
    # GGUF metadata (for Llama.metadata)
    "kiln_gguf_kv_count": (c_int64, [gguf_p]),
    "kiln_gguf_kv_key": (c_char_p, [gguf_p, c_int64]),
    "kiln_gguf_kv_type": (c_enum, [gguf_p, c_int64]),
    "kiln_gguf_get_str": (c_status, [gguf_p, c_char_p, POINTER(kiln_str)]),
    "kiln_gguf_get_int": (c_status, [gguf_p, c_char_p, POINTER(c_int64)]),
    "kiln_gguf_get_float": (c_status, [gguf_p, c_char_p, POINTER(c_double)]),
    "kiln_gguf_get_bool": (c_status, [gguf_p, c_char_p, POINTER(c_bool)]),
    # Contexts
    "kiln_ctx_params_default": (kiln_ctx_params, []),
    "kiln_ctx_create": (c_status, [model_p, POINTER(kiln_ctx_params), POINTER(ctx_p)]),
    "kiln_ctx_destroy": (None, [ctx_p]),
    "kiln_ctx_decode_batch": (c_status, [ctx_p, POINTER(kiln_batch)]),
    "kiln_ctx_decode": (c_status, [ctx_p, POINTER(c_int32), c_int32, POINTER(POINTER(c_float))]),
    "kiln_ctx_logits": (POINTER(c_float), [ctx_p, c_int32]),
    "kiln_ctx_embeddings_seq": (POINTER(c_float), [ctx_p, c_int32]),
    "kiln_ctx_n_past": (c_int32, [ctx_p]),
    "kiln_ctx_n_ctx": (c_int32, [ctx_p]),
    "kiln_ctx_n_batch": (c_int32, [ctx_p]),
    "kiln_ctx_n_seq_max": (c_int32, [ctx_p]),
    "kiln_ctx_reset": (None, [ctx_p]),
    # KV cache
    "kiln_kv_seq_rm": (c_status, [ctx_p, c_int32, c_int32, c_int32]),
    "kiln_kv_seq_cp": (c_status, [ctx_p, c_int32, c_int32, c_int32, c_int32]),
    "kiln_kv_seq_keep": (c_status, [ctx_p, c_int32]),
    "kiln_kv_seq_pos_max": (c_int32, [ctx_p, c_int32]),
    "kiln_kv_n_used": (c_int32, [ctx_p]),
    # KV state of one sequence
    "kiln_ctx_state_size": (c_status, [ctx_p, c_int32, c_int32, POINTER(c_size_t)]),
    "kiln_ctx_state_get": (c_status, [ctx_p, c_int32, POINTER(c_int32), c_int32, c_void_p, c_size_t]),
    "kiln_ctx_state_set": (
        c_status,
        [ctx_p, c_int32, c_void_p, c_size_t, POINTER(c_int32), c_int32, POINTER(c_int32)],
    ),
    # Batches
    "kiln_batch_init": (c_status, [c_int32, POINTER(kiln_batch)]),
    "kiln_batch_free": (None, [POINTER(kiln_batch)]),
    "kiln_batch_add": (c_status, [POINTER(kiln_batch), c_int32, c_int32, c_int32, c_bool]),
    "kiln_batch_clear": (None, [POINTER(kiln_batch)]),
    # Vocabulary, tokenizer, detokenizer
    "kiln_vocab_n_tokens": (c_int32, [vocab_p]),
    "kiln_vocab_bos": (c_int32, [vocab_p]),
    "kiln_vocab_eos": (c_int32, [vocab_p]),
    "kiln_vocab_add_bos": (c_bool, [vocab_p]),
    "kiln_vocab_add_eos": (c_bool, [vocab_p]),
    "kiln_vocab_token_text": (kiln_str, [vocab_p, c_int32]),
    "kiln_vocab_find_token": (c_int32, [vocab_p, c_char_p, c_size_t]),
    "kiln_vocab_token_attr": (c_int32, [vocab_p, c_int32]),
    "kiln_tokenize_special": (
        c_status,
        [vocab_p, c_char_p, c_size_t, c_bool, c_bool, POINTER(c_int32), c_size_t, POINTER(c_size_t)],
    ),
    "kiln_detokenize": (
        c_status,
        [vocab_p, POINTER(c_int32), c_size_t, c_bool, c_char_p, c_size_t, POINTER(c_size_t)],
    ),
    "kiln_detok_create": (c_status, [vocab_p, c_bool, POINTER(detok_p)]),
    "kiln_detok_destroy": (None, [detok_p]),
    "kiln_detok_push": (c_status, [detok_p, c_int32, POINTER(kiln_str)]),
    "kiln_detok_flush": (c_status, [detok_p, POINTER(kiln_str)]),
    # Chat templates
    "kiln_chat_template_by_name": (template_p, [c_char_p]),
    "kiln_chat_template_names": (c_char_p, []),
    "kiln_chat_template_name": (c_char_p, [template_p]),
    "kiln_chat_template_end_of_turn": (c_char_p, [template_p]),
    "kiln_chat_template_detect": (c_status, [gguf_p, POINTER(template_p)]),
    "kiln_chat_render": (
        c_status,
        [template_p, POINTER(kiln_chat_message), c_size_t, c_bool, c_char_p, c_size_t, POINTER(c_size_t)],
    ),
    # Sampling
    "kiln_sampler_params_default": (kiln_sampler_params, []),
    "kiln_sampler_create": (c_status, [c_int32, POINTER(kiln_sampler_params), POINTER(sampler_p)]),
    "kiln_sampler_destroy": (None, [sampler_p]),
    "kiln_sampler_sample": (c_status, [sampler_p, POINTER(c_float), POINTER(c_int32)]),
    "kiln_sampler_sample_draft": (c_status, [sampler_p, POINTER(c_float), c_int32, POINTER(c_int32)]),
    "kiln_spec_lookup": (c_int32, [POINTER(c_int32), c_int32, c_int32, c_int32, c_int32, POINTER(c_int32)]),
    "kiln_spec_check_draft": (c_status, [model_p, model_p]),
    "kiln_sampler_accept": (None, [sampler_p, c_int32]),
    "kiln_sampler_set_grammar": (c_status, [sampler_p, matcher_p]),
    # Grammars
    "kiln_free": (None, [c_void_p]),
    "kiln_grammar_parse": (c_status, [c_char_p, c_size_t, POINTER(grammar_p)]),
    "kiln_grammar_destroy": (None, [grammar_p]),
    "kiln_json_schema_to_gbnf": (c_status, [c_char_p, c_size_t, POINTER(c_void_p), POINTER(c_size_t)]),
    "kiln_grammar_vocab_create": (c_status, [vocab_p, POINTER(c_int32), c_int32, POINTER(grammar_vocab_p)]),
    "kiln_grammar_vocab_destroy": (None, [grammar_vocab_p]),
    "kiln_grammar_matcher_create": (c_status, [grammar_p, grammar_vocab_p, POINTER(matcher_p)]),
    "kiln_grammar_matcher_destroy": (None, [matcher_p]),
    "kiln_grammar_matcher_accept_text": (c_status, [matcher_p, c_char_p, c_size_t]),
    "kiln_grammar_matcher_can_end": (c_bool, [matcher_p]),
    "kiln_grammar_matcher_is_done": (c_bool, [matcher_p]),
}


def _library_path() -> str:
    override = os.environ.get("KILN_LIBRARY")
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libkiln.so")


def _load() -> Any:
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"kiln: cannot load the Kiln library '{path}': {e}. Install the package with "
            "`pip install ./python` from the repository (it builds libkiln.so), or set KILN_LIBRARY "
            "to a built libkiln.so."
        ) from e
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


#: The loaded library, with every prototype in _PROTOTYPES set.
lib = _load()
LIBRARY_PATH = _library_path()


def status_name(status: int) -> str:
    """kiln_status_name: "KILN_E_FORMAT" for -4."""
    return lib.kiln_status_name(status).decode("ascii", "replace")


def last_error() -> str:
    """kiln_last_error(): the message of this thread's most recent failing call."""
    msg = lib.kiln_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def error(status: int, context: Optional[str] = None) -> KilnError:
    """The exception for status, with kiln_last_error()'s message (prefixed by context when given)."""
    msg = last_error()
    if context:
        msg = f"{context}: {msg}" if msg else context
    return error_for(status, msg, status_name(status))


def check(status: int, context: Optional[str] = None) -> None:
    """Raise the exception of a failing kiln_status; do nothing for KILN_OK."""
    if status != KILN_OK:
        raise error(status, context)


def encode(text: Any, what: str = "text") -> bytes:
    """str (as UTF-8) or bytes-like to bytes; anything else is a TypeError naming what it was for."""
    if isinstance(text, str):
        return text.encode("utf-8")
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    raise TypeError(f"{what} must be str or bytes, not {type(text).__name__}")


def str_bytes(s: kiln_str) -> bytes:
    """The bytes of a kiln_str (not NUL-terminated)."""
    return ctypes.string_at(s.data, s.len) if s.len else b""
