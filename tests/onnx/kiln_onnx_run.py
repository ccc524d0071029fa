"""kiln_onnx_run - an ONNX model run by Kiln's C API (include/kiln.h, "Running ONNX models"), through ctypes
on the build's libkiln.so, for the tests to compare with onnxruntime:

    with Session(model_bytes, n_threads=1) as s:
        outputs = s.run({"x": np.ones((2, 3), np.float32)})   # list of numpy arrays, in output order
        s.compiles(), s.runs()

Refusals raise kiln_onnx_view.KilnError with the status name and kiln_last_error()'s message.
"""
import ctypes

import numpy as np

import kiln_onnx_view as kv

MAX_RANK = 16


class Buffer(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int), ("rank", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_RANK), ("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class Params(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int32), ("devices", ctypes.c_char_p), ("n_plans", ctypes.c_int32),
                ("weights", ctypes.c_char_p)]


_ready = False


_TYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_}  # the ONNX element types a session feeds
_CODES = {np.dtype(t): c for c, t in _TYPES.items()}


def lib():
    global _ready
    L = kv.lib()
    if not _ready:
        L.kiln_onnx_session_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(Params), ctypes.POINTER(ctypes.c_void_p)]
        L.kiln_onnx_session_destroy.argtypes = [ctypes.c_void_p]
        L.kiln_onnx_session_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(Buffer), ctypes.c_int32]
        L.kiln_onnx_session_output.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_size_t,
                                               ctypes.POINTER(Buffer)]
        for f in ("runs", "compiles"):
            getattr(L, "kiln_onnx_session_" + f).restype = ctypes.c_int64
            getattr(L, "kiln_onnx_session_" + f).argtypes = [ctypes.c_void_p]
        L.kiln_onnx_input.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(kv.ValueInfo)]
        L.kiln_onnx_output.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(kv.ValueInfo)]
        _ready = True
    return L


def check(status):
    if status != 0:
        L = kv.lib()
        raise kv.KilnError(L.kiln_status_name(status).decode(), L.kiln_last_error().decode())


class Session:
    def __init__(self, model, n_threads=1, n_plans=0, weights=None, devices=None):
        L = lib()
        self._data = model if isinstance(model, bytes) else model.SerializeToString()
        self._model = ctypes.c_void_p()
        self._session = ctypes.c_void_p()
        check(L.kiln_onnx_load_memory(self._data, len(self._data), None, ctypes.byref(self._model)))
        try:
            check(L.kiln_onnx_session_create(self._model, ctypes.byref(Params(n_threads, devices and devices.encode(), n_plans,
                                                                weights and weights.encode())),
                                             ctypes.byref(self._session)))
        except kv.KilnError:
            L.kiln_onnx_destroy(self._model)
            self._model = ctypes.c_void_p()
            raise
        self.inputs = [self._info(L.kiln_onnx_input, i) for i in range(L.kiln_onnx_input_count(self._model))]
        self.outputs = [self._info(L.kiln_onnx_output, i) for i in range(L.kiln_onnx_output_count(self._model))]

    def _info(self, getter, i):
        v = kv.ValueInfo()
        check(getter(self._model, i, ctypes.byref(v)))
        return v.name.decode()

    def run(self, feeds, names=None):
        """feeds: name -> array (int64, int32 and bool arrays as they are, anything else made float32;
        C-contiguous); names: override the buffer names (tests). Outputs come back in their ONNX types."""
        arrays = {k: np.require(v, v.dtype if np.asarray(v).dtype in _CODES else np.float32, "C")
                  for k, v in feeds.items()}
        bufs = (Buffer * max(1, len(arrays)))()
        for b, (name, a) in zip(bufs, arrays.items()):
            b.name = name.encode()
            b.type = _CODES[a.dtype]
            b.rank = a.ndim
            for j, d in enumerate(a.shape):
                b.shape[j] = d
            b.data = a.ctypes.data
            b.size = a.nbytes
        check(lib().kiln_onnx_session_run(self._session, bufs, len(arrays)))
        results = []
        for i in range(len(self.outputs)):
            info = Buffer()
            check(lib().kiln_onnx_session_output(self._session, i, None, 0, ctypes.byref(info)))
            out = np.empty(tuple(info.shape[j] for j in range(info.rank)), _TYPES[info.type])
            check(lib().kiln_onnx_session_output(self._session, i, out.ctypes.data, out.nbytes, ctypes.byref(info)))
            results.append(out)
        return results

    def runs(self):
        return lib().kiln_onnx_session_runs(self._session)

    def compiles(self):
        return lib().kiln_onnx_session_compiles(self._session)

    def close(self):
        if self._session:
            lib().kiln_onnx_session_destroy(self._session)
            self._session = ctypes.c_void_p()
        if self._model:
            lib().kiln_onnx_destroy(self._model)
            self._model = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
