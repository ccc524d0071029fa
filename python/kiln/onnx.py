"""kiln.InferenceSession: ONNX models run by Kiln with onnxruntime's Python names, so that a script written
for onnxruntime runs after changing its import:

    import kiln as ort                     # was: import onnxruntime as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    (y,) = sess.run(None, {name: x})        # numpy arrays, in output order

Underneath: kiln_onnx_load and a kiln_onnx_session (include/kiln.h, docs/onnx.md "What runs"). Shapes
with dynamic dims (a symbolic batch) compile once per distinct shape and are kept. Inputs must have the
model's element type (float32, int64, int32 or bool), as onnxruntime requires, and outputs come back in
theirs; a model or input Kiln cannot run raises
the KilnError subclass of its status with the library's message (node and operator, or the input and what
differs). providers and provider options are accepted and ignored beyond the CPU; SessionOptions'
intra_op_num_threads sets Kiln's threads.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_size_t, c_void_p
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from . import _lib
from ._handle import Handle
from .errors import InvalidArgumentError

_MAX_RANK = 16  # KILN_MAX_ONNX_RANK

# kiln_onnx_type numbers (ONNX's TensorProto.DataType) and onnxruntime's type strings.
_TYPE_NAMES = {1: "tensor(float)", 2: "tensor(uint8)", 3: "tensor(int8)", 4: "tensor(uint16)", 5: "tensor(int16)",
               6: "tensor(int32)", 7: "tensor(int64)", 8: "tensor(string)", 9: "tensor(bool)",
               10: "tensor(float16)", 11: "tensor(double)", 12: "tensor(uint32)", 13: "tensor(uint64)",
               16: "tensor(bfloat16)"}
_DTYPES = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.int32): 6,
           np.dtype(np.int64): 7, np.dtype(np.bool_): 9, np.dtype(np.float16): 10, np.dtype(np.float64): 11}

_NUMPY = {code: dtype for dtype, code in _DTYPES.items()}  # outputs: float32, int64, int32, uint8, int8, bool


class _dim(Structure):
    _fields_ = [("value", c_int64), ("param", c_char_p)]


class _value_info(Structure):
    _fields_ = [("name", c_char_p), ("type", c_int), ("rank", c_int32), ("dims", POINTER(_dim))]


class _buffer(Structure):
    _fields_ = [("name", c_char_p), ("type", c_int), ("rank", c_int32), ("shape", c_int64 * _MAX_RANK),
                ("data", c_void_p), ("size", c_size_t)]


class _session_params(Structure):
    _fields_ = [("n_threads", c_int32), ("devices", c_char_p), ("n_plans", c_int32), ("weights", c_char_p)]


_PROTOTYPES = {
    "kiln_onnx_load": (c_int, [c_char_p, POINTER(c_void_p)]),
    "kiln_onnx_load_memory": (c_int, [c_char_p, c_size_t, c_char_p, POINTER(c_void_p)]),
    "kiln_onnx_destroy": (None, [c_void_p]),
    "kiln_onnx_input_count": (c_int32, [c_void_p]),
    "kiln_onnx_output_count": (c_int32, [c_void_p]),
    "kiln_onnx_input": (c_int, [c_void_p, c_int32, POINTER(_value_info)]),
    "kiln_onnx_output": (c_int, [c_void_p, c_int32, POINTER(_value_info)]),
    "kiln_onnx_producer": (c_char_p, [c_void_p]),
    "kiln_onnx_opset": (c_int64, [c_void_p]),
    "kiln_onnx_session_create": (c_int, [c_void_p, POINTER(_session_params), POINTER(c_void_p)]),
    "kiln_onnx_session_destroy": (None, [c_void_p]),
    "kiln_onnx_session_run": (c_int, [c_void_p, POINTER(_buffer), c_int32]),
    "kiln_onnx_session_output": (c_int, [c_void_p, c_int32, c_void_p, c_size_t, POINTER(_buffer)]),
}
for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    getattr(_lib.lib, _name).restype = _restype
    getattr(_lib.lib, _name).argtypes = _argtypes


class NodeArg:
    """An input or output as onnxruntime describes it: name, shape (ints, and the names of symbolic dims
    or None for unknown ones) and type ("tensor(float)")."""

    def __init__(self, name: str, shape: Optional[List[Union[int, str, None]]], type: str) -> None:
        self.name = name
        self.shape = shape
        self.type = type

    def __repr__(self) -> str:
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


class SessionOptions:
    """onnxruntime.SessionOptions: intra_op_num_threads (0 = Kiln's default, the physical cores) is used;
    the other fields are accepted for compatibility. Kiln's own settings go through onnxruntime's
    add_session_config_entry: "kiln.weights" = "q8_0" quantizes MatMul/Gemm weights to INT8 at load
    (kiln_onnx_session_params.weights)."""

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = None
        self.log_severity_level = 2
        self._config: Dict[str, str] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[key] = value

    def get_session_config_entry(self, key: str) -> str:
        return self._config[key]


def _node_arg(info: _value_info) -> NodeArg:
    shape: Optional[List[Union[int, str, None]]] = None
    if info.rank >= 0:
        shape = []
        for d in range(info.rank):
            dim = info.dims[d]
            shape.append(dim.value if dim.value >= 0 else (dim.param.decode() if dim.param else None))
    return NodeArg(info.name.decode(), shape, _TYPE_NAMES.get(info.type, f"tensor(type {info.type})"))


class _Model(Handle):
    _kind = "ONNX model"

    def _destroy(self, handle: int) -> None:
        _lib.lib.kiln_onnx_destroy(handle)


class InferenceSession(Handle):
    """An ONNX model loaded and compiled for Kiln (onnxruntime.InferenceSession's interface)."""

    _kind = "inference session"

    def __init__(self, path_or_bytes: Union[str, bytes, os.PathLike], sess_options: Optional[SessionOptions] = None,
                 providers: Optional[Sequence[Any]] = None, provider_options: Optional[Sequence[Any]] = None,
                 **kwargs: Any) -> None:
        super().__init__()
        self._model = _Model()
        self._bytes = None
        handle = c_void_p()
        if isinstance(path_or_bytes, (bytes, bytearray)):
            self._bytes = bytes(path_or_bytes)  # borrowed by the model: kept alive here
            _lib.check(_lib.lib.kiln_onnx_load_memory(self._bytes, len(self._bytes), None, ctypes.byref(handle)))
        else:
            path = os.fspath(path_or_bytes)
            _lib.check(_lib.lib.kiln_onnx_load(_lib.encode(path, "path"), ctypes.byref(handle)), path)
        self._model._handle = handle.value
        threads = sess_options.intra_op_num_threads if sess_options else 0
        config = getattr(sess_options, "_config", {}) if sess_options else {}
        weights = _lib.encode(config["kiln.weights"], "kiln.weights") if "kiln.weights" in config else None
        self._providers = ["CPUExecutionProvider"]
        session = c_void_p()
        _lib.check(_lib.lib.kiln_onnx_session_create(self._model.handle, ctypes.byref(_session_params(threads, None, 0, weights)),
                                                     ctypes.byref(session)))
        self._handle = session.value
        m = self._model.handle
        self._inputs = [self._arg(_lib.lib.kiln_onnx_input, m, i) for i in range(_lib.lib.kiln_onnx_input_count(m))]
        self._outputs = [self._arg(_lib.lib.kiln_onnx_output, m, i) for i in range(_lib.lib.kiln_onnx_output_count(m))]

    @staticmethod
    def _arg(getter: Any, model: int, i: int) -> NodeArg:
        info = _value_info()
        _lib.check(getter(model, i, ctypes.byref(info)))
        return _node_arg(info)

    def _destroy(self, handle: int) -> None:
        _lib.lib.kiln_onnx_session_destroy(handle)
        self._model.close()

    def get_inputs(self) -> List[NodeArg]:
        """The inputs a caller feeds (initializers excluded), in the model's order."""
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        return list(self._outputs)

    def get_providers(self) -> List[str]:
        return list(self._providers)

    def run(self, output_names: Optional[Sequence[str]], input_feed: Dict[str, Any],
            run_options: Any = None) -> List[np.ndarray]:
        """Run on input_feed (name -> array) and return the outputs named (None: all) as numpy arrays."""
        names = [o.name for o in self._outputs]
        wanted = list(output_names) if output_names else names
        for n in wanted:
            if n not in names:
                raise InvalidArgumentError(f"output '{n}' is not one the model has", _lib.KILN_E_INVALID_ARG,
                                           "KILN_E_INVALID_ARG")
        arrays = [(k, np.require(v, requirements="C")) for k, v in input_feed.items()]
        bufs = (_buffer * max(1, len(arrays)))()
        for b, (name, a) in zip(bufs, arrays):
            b.name = _lib.encode(name, "input name")
            b.type = _DTYPES.get(a.dtype, 0)
            if a.ndim > _MAX_RANK:
                raise ValueError(f"input '{name}' has {a.ndim} dims, over {_MAX_RANK}")
            b.rank = a.ndim
            for j, d in enumerate(a.shape):
                b.shape[j] = d
            b.data = a.ctypes.data
            b.size = a.nbytes
        _lib.check(_lib.lib.kiln_onnx_session_run(self.handle, bufs, len(arrays)))
        out = []
        for n in wanted:
            i = names.index(n)
            info = _buffer()
            _lib.check(_lib.lib.kiln_onnx_session_output(self.handle, i, None, 0, ctypes.byref(info)))
            y = np.empty(tuple(info.shape[j] for j in range(info.rank)), _NUMPY[info.type])
            _lib.check(_lib.lib.kiln_onnx_session_output(self.handle, i, y.ctypes.data, y.nbytes, ctypes.byref(info)))
            out.append(y)
        return out
