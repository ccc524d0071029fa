"""Kiln's own lower layer: Model (the shared engine: weights, backends, thread pool, vocabulary),
Context (one user's KV cache and outputs), Batch (tokens with positions and sequence ids), as in
include/kiln.h and docs/runtime.md.

Lifetimes follow the C API. A Context keeps its Model alive; Model.close() first closes the contexts
still open on it, since the C model must outlive them. Every object has close() and works as a context
manager; the garbage collector closes what was not closed.

Outputs without copies: Context.decode, Context.logits and Context.embeddings return numpy arrays that
are views of the context's own output buffer (np.ctypeslib.as_array over the pointer the C call returned,
made read-only). Such a view is valid only until the next decode on the same context, which overwrites
or moves that memory; keep a result past that with ``.copy()``.

Thread safety is the C API's: a Model may be shared by contexts used from different threads (their
computations take turns on the model's backends); a Context, a Batch, a Sampler and a Detokenizer are used
by one thread at a time.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from ctypes import POINTER, byref, c_float, c_int32
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from . import _lib
from ._handle import Handle
from ._lib import check, lib

if TYPE_CHECKING:
    from .chat import ChatTemplate

_KV_TYPES = {"f32": _lib.KILN_TYPE_F32, "f16": _lib.KILN_TYPE_F16, "q8_0": _lib.KILN_TYPE_Q8_0}
_POOLINGS = {
    None: _lib.KILN_POOLING_UNSPECIFIED,
    "none": _lib.KILN_POOLING_NONE,
    "mean": _lib.KILN_POOLING_MEAN,
    "cls": _lib.KILN_POOLING_CLS,
    "last": _lib.KILN_POOLING_LAST,
}
_POOLING_NAMES = {v: k for k, v in _POOLINGS.items() if k is not None}


def default_threads() -> int:
    """kiln_default_threads(): the number of physical cores."""
    return int(lib.kiln_default_threads())


def set_cpu_level(level: Optional[str] = None) -> str:
    """kiln_set_cpu_level: the process-wide CPU kernel level, "ref", "avx2", "avx512", "amx" or "neon" (a
    level this CPU lacks falls back down its chain), or None / "auto" for the best one here; applies from the
    next computation on. Returns the level chosen. An unknown name raises InvalidArgumentError."""
    _lib.check(lib.kiln_set_cpu_level(None if level is None else _lib.encode(level, "level")))
    return cpu_level()


def cpu_level() -> str:
    """kiln_get_cpu_level: the name of the active CPU kernel level."""
    return lib.kiln_get_cpu_level().decode()


def _float_view(ptr: Any, n: int) -> np.ndarray:
    """A read-only float32 numpy view of n floats at a C pointer (no copy)."""
    arr = np.ctypeslib.as_array(ptr, shape=(n,))
    arr.flags.writeable = False
    return arr


class Model(Handle):
    _kind = "model"

    """A loaded GGUF model: kiln_model_load_ex.

    Args:
        path: the GGUF file.
        n_threads: CPU thread pool size; 0 or None = the physical cores.
        devices: backends in priority order, comma-separated ("cpu" by default; see kiln.h).
        progress: called as progress(done, total) while weights are prepared, or None.

    Raises:
        KilnError: a subclass naming what was wrong (KilnIOError for a missing file, FormatError for a
            malformed one, UnsupportedError for an architecture Kiln does not run).
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        n_threads: Optional[int] = None,
        devices: Optional[str] = None,
        progress: Optional[Callable[[int, int], None]] = None,
        gpu_layers: int = 0,
    ) -> None:
        self._handle: Optional[int] = None
        self._contexts: "weakref.WeakSet[Context]" = weakref.WeakSet()
        self.path = os.fspath(path)
        params = lib.kiln_model_params_default()
        params.n_threads = int(n_threads or 0)
        params.devices = devices.encode("utf-8") if devices else None
        params.gpu_layers = int(gpu_layers)
        if progress is not None:
            self._progress_cb = _lib.progress_fn(lambda _user, done, total: progress(int(done), int(total)))
            params.progress = self._progress_cb
        handle = _lib.model_p()
        check(lib.kiln_model_load_ex(os.fsencode(self.path), byref(params), byref(handle)))
        self._handle = handle.value
        self._vocab = lib.kiln_model_vocab(self._handle)

    @property
    def backends(self) -> str:
        """What runs the model, e.g. "vulkan:0 (llvmpipe ...),cpu" (kiln_model_backends)."""
        return (lib.kiln_model_backends(self.handle) or b"").decode("utf-8", "replace")

    # -- lifetime --------------------------------------------------------------------------------------

    def close(self) -> None:
        """Destroy the model, after closing every context still open on it. Idempotent."""
        for ctx in list(self._contexts):
            ctx.close()
        super().close()

    def _destroy(self, handle: int) -> None:
        lib.kiln_model_destroy(handle)

    # -- facts -----------------------------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return int(lib.kiln_model_n_vocab(self.handle))

    @property
    def n_ctx_train(self) -> int:
        """The context length the model was trained with."""
        return int(lib.kiln_model_n_ctx_train(self.handle))

    @property
    def n_embd(self) -> int:
        """The width of the hidden states, and so of sentence embeddings."""
        return int(lib.kiln_model_n_embd(self.handle))

    @property
    def arch(self) -> str:
        return lib.kiln_model_arch(self.handle).decode("utf-8")

    @property
    def pooling(self) -> str:
        """The file's pooling: "none", "mean", "cls" or "last"."""
        return _POOLING_NAMES.get(int(lib.kiln_model_pooling(self.handle)), "none")

    @property
    def is_causal(self) -> bool:
        """False for an encoder (BERT), whose contexts return embeddings, not logits."""
        return bool(lib.kiln_model_is_causal(self.handle))

    @property
    def n_threads(self) -> int:
        return int(lib.kiln_model_n_threads(self.handle))

    @property
    def weight_bytes(self) -> int:
        return int(lib.kiln_model_weight_bytes(self.handle))

    def metadata(self) -> Dict[str, str]:
        """The file's scalar metadata (strings, numbers, booleans) as strings, keyed by GGUF key;
        arrays are left out."""
        gguf = lib.kiln_model_gguf(self.handle)
        out: Dict[str, str] = {}
        for i in range(int(lib.kiln_gguf_kv_count(gguf))):
            key = lib.kiln_gguf_kv_key(gguf, i)
            value = _gguf_scalar(gguf, key, int(lib.kiln_gguf_kv_type(gguf, i)))
            if value is not None:
                out[key.decode("utf-8", "replace")] = value
        return out

    # -- vocabulary ------------------------------------------------------------------------------------

    @property
    def vocab_handle(self) -> int:
        """The kiln_vocab pointer, borrowed from the model."""
        self.handle  # raises once closed
        return self._vocab

    @property
    def bos(self) -> int:
        """The BOS token id, or -1."""
        return int(lib.kiln_vocab_bos(self.vocab_handle))

    @property
    def eos(self) -> int:
        """The EOS token id, or -1."""
        return int(lib.kiln_vocab_eos(self.vocab_handle))

    @property
    def add_bos(self) -> bool:
        """Whether sequences start with BOS."""
        return bool(lib.kiln_vocab_add_bos(self.vocab_handle))

    @property
    def add_eos(self) -> bool:
        """Whether whole sequences end with EOS (WordPiece: [CLS] ... [SEP])."""
        return bool(lib.kiln_vocab_add_eos(self.vocab_handle))

    def token_text(self, token: int) -> bytes:
        """The raw text of a token as stored in the vocabulary (b"" for an id outside it)."""
        if not 0 <= token < self.n_vocab:
            return b""
        return _lib.str_bytes(lib.kiln_vocab_token_text(self.vocab_handle, token))

    def token_attr(self, token: int) -> int:
        """The token's kiln_token_attr (1 normal, 2 unknown, 3 control, ...); 0 outside the vocabulary."""
        return int(lib.kiln_vocab_token_attr(self.vocab_handle, token))

    def find_token(self, text: Union[str, bytes]) -> int:
        """The id whose text is exactly text (such as "<|im_end|>"), or -1."""
        b = _lib.encode(text)
        return int(lib.kiln_vocab_find_token(self.vocab_handle, b, len(b)))

    def tokenize(self, text: Union[str, bytes], add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids of text (str is encoded as UTF-8).

        Args:
            add_bos: start with BOS when the vocabulary adds one.
            special: also turn the texts of control tokens (such as "<|im_end|>") into those tokens, as
                chat templates need; without it they are tokenized as plain text.
        """
        data = _lib.encode(text)
        n = ctypes.c_size_t(0)
        cap = len(data) + 2
        for _ in range(2):
            ids = (c_int32 * cap)()
            status = lib.kiln_tokenize_special(
                self.vocab_handle, data, len(data), add_bos, special, ids, cap, byref(n)
            )
            if status == _lib.KILN_E_RANGE and n.value > cap:
                cap = n.value
                continue
            check(status, "tokenize")
            return list(ids[: n.value])
        raise _lib.error(_lib.KILN_E_RANGE, "tokenize")

    def detokenize(self, tokens: Sequence[int], strip_leading_space: bool = False) -> bytes:
        """The text of a token sequence: control tokens print nothing, byte tokens join into UTF-8
        characters and bytes that never form one become U+FFFD. strip_leading_space drops the space the
        tokenizer prefixed to the first word (SentencePiece, WordPiece)."""
        ids = _int32_array(tokens)
        n = ctypes.c_size_t(0)
        cap = 8 * len(ids) + 16
        for _ in range(2):
            buf = ctypes.create_string_buffer(cap)
            status = lib.kiln_detokenize(self.vocab_handle, ids, len(ids), strip_leading_space, buf, cap, byref(n))
            if status == _lib.KILN_E_RANGE and n.value + 1 > cap:
                cap = n.value + 1
                continue
            check(status, "detokenize")
            return buf.raw[: n.value]
        raise _lib.error(_lib.KILN_E_RANGE, "detokenize")

    def chat_template(self) -> Optional["ChatTemplate"]:
        """The chat template recognized from the file's tokenizer.chat_template; None when the file has
        none. Raises UnsupportedError for a template Kiln does not know."""
        from .chat import ChatTemplate

        return ChatTemplate.detect(self)

    def context(self, **params: Any) -> "Context":
        """A new Context on this model (the keyword arguments of Context)."""
        return Context(self, **params)


def _gguf_scalar(gguf: int, key: bytes, kv_type: int) -> Optional[str]:
    if kv_type == 8:  # STRING
        s = _lib.kiln_str()
        if lib.kiln_gguf_get_str(gguf, key, byref(s)) == 0:
            return _lib.str_bytes(s).decode("utf-8", "replace")
    elif kv_type in (0, 1, 2, 3, 4, 5, 10, 11):  # integers
        v = ctypes.c_int64()
        if lib.kiln_gguf_get_int(gguf, key, byref(v)) == 0:
            return str(v.value)
    elif kv_type in (6, 12):  # FLOAT32, FLOAT64
        f = ctypes.c_double()
        if lib.kiln_gguf_get_float(gguf, key, byref(f)) == 0:
            return repr(f.value)
    elif kv_type == 7:  # BOOL
        b = ctypes.c_bool()
        if lib.kiln_gguf_get_bool(gguf, key, byref(b)) == 0:
            return "true" if b.value else "false"
    return None


def _int32_array(tokens: Iterable[int]) -> Any:
    """A ctypes int32 array of token ids (from a list, a tuple or a numpy array)."""
    if isinstance(tokens, np.ndarray):
        tokens = tokens.tolist()
    seq = list(tokens)
    return (c_int32 * len(seq))(*seq)


class Batch:
    """A batch of tokens, each of one sequence at one position (kiln_batch).

    Args:
        capacity: the most tokens it holds (1 .. 2^24).
    """

    def __init__(self, capacity: int) -> None:
        self._batch: Optional[_lib.kiln_batch] = None
        b = _lib.kiln_batch()
        check(lib.kiln_batch_init(int(capacity), byref(b)), "batch")
        self._batch = b

    def close(self) -> None:
        """Free the arrays. Idempotent."""
        if self._batch is not None:
            lib.kiln_batch_free(byref(self._batch))
            self._batch = None

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    @property
    def struct(self) -> _lib.kiln_batch:
        if self._batch is None:
            raise ValueError("the batch is closed")
        return self._batch

    @property
    def capacity(self) -> int:
        return int(self.struct.capacity)

    @property
    def n_tokens(self) -> int:
        return int(self.struct.n_tokens)

    def __len__(self) -> int:
        return self.n_tokens

    def add(self, token: int, pos: int, seq_id: int = 0, logits: bool = False) -> None:
        """Append a token; RangeError when the batch is full."""
        check(lib.kiln_batch_add(byref(self.struct), int(token), int(pos), int(seq_id), bool(logits)), "batch")

    def add_sequence(self, tokens: Sequence[int], seq_id: int = 0, pos0: int = 0, logits: str = "last") -> None:
        """Append tokens of one sequence at positions pos0, pos0 + 1, ...; logits is "last" (keep the
        last token's logits), "all" or "none"."""
        n = len(tokens)
        for i, t in enumerate(tokens):
            want = logits == "all" or (logits == "last" and i == n - 1)
            self.add(t, pos0 + i, seq_id, want)

    def clear(self) -> None:
        """Empty the batch (n_tokens = 0)."""
        lib.kiln_batch_clear(byref(self.struct))


class Context(Handle):
    _kind = "context"

    """One user's state on a model: the KV cache (n_ctx cells shared by up to n_seq_max sequences),
    compiled plans and outputs (kiln_ctx_create).

    Args:
        model: the Model (kept alive by the context).
        n_ctx: KV-cache cells; 0 = the model's context length.
        n_batch: the most tokens one decode_batch takes; 0 = 512.
        n_seq_max: sequence ids 0 .. n_seq_max - 1 (at most 64); 0 = 1.
        kv_type: "f32" (default), "f16" or "q8_0".
        embeddings: return pooled sentence embeddings instead of logits (required for an encoder,
            refused for a decoder).
        pooling: for embeddings, None (the model's), "mean", "cls" or "last".
        passes: graph passes ("all", "none", or a list such as "cse,dce"); None = all.
        abort: called between graph nodes; returning True stops the computation with AbortedError.
        log: called with each runtime log line (str).
    """

    def __init__(
        self,
        model: Model,
        n_ctx: int = 0,
        n_batch: int = 0,
        n_seq_max: int = 0,
        kv_type: str = "f32",
        embeddings: bool = False,
        pooling: Optional[str] = None,
        passes: Optional[str] = None,
        abort: Optional[Callable[[], bool]] = None,
        log: Optional[Callable[[str], None]] = None,
    ) -> None:
        self._handle: Optional[int] = None
        self.model = model
        if kv_type not in _KV_TYPES:
            raise ValueError(f"kv_type '{kv_type}' is not one of {', '.join(_KV_TYPES)}")
        if pooling not in _POOLINGS:
            raise ValueError(f"pooling '{pooling}' is not one of mean, cls, last")
        p = lib.kiln_ctx_params_default()
        p.n_ctx, p.n_batch, p.n_seq_max = int(n_ctx), int(n_batch), int(n_seq_max)
        p.kv_type = _KV_TYPES[kv_type]
        p.embeddings = bool(embeddings)
        p.pooling = _POOLINGS[pooling]
        p.passes = passes.encode("ascii") if passes else None
        # The callbacks must outlive the context: they are kept on it.
        if abort is not None:
            self._abort_cb = _lib.abort_fn(lambda _user: bool(abort()))
            p.abort_fn = self._abort_cb
        if log is not None:
            self._log_cb = _lib.log_fn(lambda _user, line: log(line.decode("utf-8", "replace")))
            p.log = self._log_cb
        handle = _lib.ctx_p()
        check(lib.kiln_ctx_create(model.handle, byref(p), byref(handle)), "context")
        self._handle = handle.value
        self.embeddings_enabled = bool(embeddings)
        self._n_vocab = model.n_vocab
        self._n_embd = model.n_embd
        model._contexts.add(self)

    def _destroy(self, handle: int) -> None:
        lib.kiln_ctx_destroy(handle)

    @property
    def n_ctx(self) -> int:
        return int(lib.kiln_ctx_n_ctx(self.handle))

    @property
    def n_batch(self) -> int:
        return int(lib.kiln_ctx_n_batch(self.handle))

    @property
    def n_seq_max(self) -> int:
        return int(lib.kiln_ctx_n_seq_max(self.handle))

    @property
    def n_past(self) -> int:
        """Positions of sequence 0 in the cache (kiln_kv_seq_pos_max(0) + 1)."""
        return int(lib.kiln_ctx_n_past(self.handle))

    # -- computing -------------------------------------------------------------------------------------

    def decode(self, tokens: Sequence[int]) -> np.ndarray:
        """Append tokens to sequence 0 (split into batches of n_batch) and return the last one's logits:
        a read-only view of n_vocab floats, valid until the next decode on this context (``.copy()`` to
        keep it). Raises ContextFullError, changing nothing, when the tokens do not fit."""
        ids = _int32_array(tokens)
        out = POINTER(c_float)()
        check(lib.kiln_ctx_decode(self.handle, ids, len(ids), byref(out)), "decode")
        return _float_view(out, self._n_vocab)

    def decode_batch(self, batch: Batch) -> None:
        """Run a batch (kiln_ctx_decode_batch); read its outputs with logits() or embeddings()."""
        check(lib.kiln_ctx_decode_batch(self.handle, byref(batch.struct)), "decode")

    def logits(self, i: int = -1) -> np.ndarray:
        """The logits of token i of the last batch (negative i counts from the end of the tokens that
        asked for logits); a read-only view valid until the next decode. InvalidArgumentError when
        token i did not ask for logits."""
        ptr = lib.kiln_ctx_logits(self.handle, int(i))
        if not ptr:
            raise _lib.error(_lib.KILN_E_INVALID_ARG, "logits")
        return _float_view(ptr, self._n_vocab)

    def embeddings(self, seq: int = 0) -> np.ndarray:
        """The pooled, unit-length sentence embedding of sequence seq in the last batch of an embeddings
        context: a read-only view of n_embd floats, valid until the next decode."""
        ptr = lib.kiln_ctx_embeddings_seq(self.handle, int(seq))
        if not ptr:
            raise _lib.error(_lib.KILN_E_INVALID_ARG, "embeddings")
        return _float_view(ptr, self._n_embd)

    def reset(self) -> None:
        """Forget every sequence."""
        lib.kiln_ctx_reset(self.handle)

    # -- KV cache --------------------------------------------------------------------------------------

    def kv_seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        """Forget positions [p0, p1) of seq (every sequence when seq is -1); p0 < 0 means 0, p1 < 0 the
        end."""
        check(lib.kiln_kv_seq_rm(self.handle, seq, p0, p1), "kv_seq_rm")

    def kv_seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Make dst share src's cells at positions [p0, p1): no copy, no recomputation."""
        check(lib.kiln_kv_seq_cp(self.handle, src, dst, p0, p1), "kv_seq_cp")

    def kv_seq_keep(self, seq: int) -> None:
        """Forget every sequence but seq."""
        check(lib.kiln_kv_seq_keep(self.handle, seq), "kv_seq_keep")

    def kv_seq_pos_max(self, seq: int = 0) -> int:
        """The largest position of seq in the cache, or -1 when it holds none."""
        return int(lib.kiln_kv_seq_pos_max(self.handle, seq))

    def kv_n_used(self) -> int:
        """Cells in use by any sequence."""
        return int(lib.kiln_kv_n_used(self.handle))

    # -- KV state --------------------------------------------------------------------------------------

    def state_get(self, seq: int, tokens: Sequence[int]) -> bytes:
        """Sequence seq's KV state with its token history, as kiln_ctx_state_save writes it to a file."""
        ids = _int32_array(tokens)
        size = ctypes.c_size_t()
        check(lib.kiln_ctx_state_size(self.handle, seq, len(ids), byref(size)), "state_get")
        buf = ctypes.create_string_buffer(size.value)
        check(lib.kiln_ctx_state_get(self.handle, seq, ids, len(ids), buf, size.value), "state_get")
        return buf.raw

    def state_set(self, seq: int, state: bytes) -> List[int]:
        """Load a state from state_get (or a kiln_ctx_state_save file's bytes) into seq, replacing its
        cells, and return its token history. A state of another model or cache type, or a corrupt one,
        raises a named error and changes nothing."""
        cap = self.n_ctx
        ids = (c_int32 * cap)()
        n = c_int32()
        check(lib.kiln_ctx_state_set(self.handle, seq, state, len(state), ids, cap, byref(n)), "state_set")
        return list(ids[: n.value])

