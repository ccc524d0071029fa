"""kiln_onnx_view - the C API's view of an ONNX model (include/kiln.h, "ONNX models"), through ctypes on
the build's libkiln.so, as plain Python values the tests compare with what the onnx package reports:

    view = load(path)             # or load_bytes(data, folder=None)
    view["inputs"] == [("x", 1, ["batch", 3])]      # name, element type, dims (int, symbol, None) or None
    view["initializers"]["W"] == (1, [3, 4], b"...")  # type, dims, raw little-endian bytes
    view["nodes"][0] == ("mm", "MatMul", ["x", "W"], ["y"], {"alpha": 1.0, ...})

A model Kiln refuses raises KilnError with the status name and kiln_last_error()'s message. With
KILN_ONNX_DUMP set to a folder, every model handed to Kiln is also written there (numbered), so that a
sanitizer build of fuzz_onnx can replay the whole suite's inputs: `fuzz_onnx -runs=0 FOLDER`.
"""
import ctypes
import itertools
import os
import pathlib


class KilnError(Exception):
    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Str(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Dim(ctypes.Structure):
    _fields_ = [("value", ctypes.c_int64), ("param", ctypes.c_char_p)]


class ValueInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int), ("rank", ctypes.c_int32),
                ("dims", ctypes.POINTER(Dim))]


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int), ("rank", ctypes.c_int32),
                ("dims", ctypes.POINTER(ctypes.c_int64)), ("n_elements", ctypes.c_uint64),
                ("data", ctypes.c_void_p), ("size", ctypes.c_uint64), ("external", ctypes.c_bool)]


class NodeInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("op_type", ctypes.c_char_p), ("n_inputs", ctypes.c_int32),
                ("n_outputs", ctypes.c_int32), ("n_attrs", ctypes.c_int32),
                ("inputs", ctypes.POINTER(ctypes.c_char_p)), ("outputs", ctypes.POINTER(ctypes.c_char_p))]


class AttrInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_int), ("i", ctypes.c_int64), ("f", ctypes.c_float),
                ("s", Str), ("n", ctypes.c_int64), ("ints", ctypes.POINTER(ctypes.c_int64)),
                ("floats", ctypes.POINTER(ctypes.c_float)), ("strings", ctypes.POINTER(Str)), ("t", TensorInfo)]


_lib = None


def lib():
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL(os.environ["KILN_LIB"])
        _lib.kiln_last_error.restype = ctypes.c_char_p
        _lib.kiln_status_name.restype = ctypes.c_char_p
        _lib.kiln_onnx_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        _lib.kiln_onnx_load_memory.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                               ctypes.POINTER(ctypes.c_void_p)]
        _lib.kiln_onnx_destroy.argtypes = [ctypes.c_void_p]
        for f in ("opset", "ir_version"):
            getattr(_lib, "kiln_onnx_" + f).restype = ctypes.c_int64
            getattr(_lib, "kiln_onnx_" + f).argtypes = [ctypes.c_void_p]
        _lib.kiln_onnx_producer.restype = ctypes.c_char_p
        _lib.kiln_onnx_producer.argtypes = [ctypes.c_void_p]
        for f in ("input_count", "output_count", "node_count", "initializer_count"):
            getattr(_lib, "kiln_onnx_" + f).argtypes = [ctypes.c_void_p]
        _lib.kiln_onnx_value.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ValueInfo)]
    return _lib


def _check(status):
    if status != 0:
        l = lib()
        raise KilnError(l.kiln_status_name(status).decode(), l.kiln_last_error().decode(errors="replace"))


def _dims(v):
    if v.rank < 0:
        return None
    out = []
    for d in range(v.rank):
        dim = v.dims[d]
        out.append(dim.value if dim.value >= 0 else (dim.param.decode() if dim.param else None))
    return out


def _tensor(t):
    data = ctypes.string_at(t.data, t.size) if t.size else b""
    return (t.type, [t.dims[d] for d in range(t.rank)], data)


def _attr(a):
    if a.type == 1:
        return a.f
    if a.type == 2:
        return a.i
    if a.type == 3:
        return ctypes.string_at(a.s.data, a.s.len) if a.s.len else b""
    if a.type == 4:
        return _tensor(a.t)
    if a.type == 6:
        return [a.floats[k] for k in range(a.n)]
    if a.type == 7:
        return [a.ints[k] for k in range(a.n)]
    if a.type == 8:
        return [ctypes.string_at(a.strings[k].data, a.strings[k].len) for k in range(a.n)]
    return None


def _view(handle):
    l = lib()
    v = {"opset": l.kiln_onnx_opset(handle), "ir_version": l.kiln_onnx_ir_version(handle),
         "producer": l.kiln_onnx_producer(handle).decode()}
    for kind, count, get in (("inputs", l.kiln_onnx_input_count, l.kiln_onnx_input),
                             ("outputs", l.kiln_onnx_output_count, l.kiln_onnx_output)):
        out = []
        for i in range(count(handle)):
            info = ValueInfo()
            _check(get(ctypes.c_void_p(handle), i, ctypes.byref(info)))
            out.append((info.name.decode(), info.type, _dims(info)))
        v[kind] = out
    v["initializers"] = {}
    for i in range(l.kiln_onnx_initializer_count(handle)):
        t = TensorInfo()
        _check(l.kiln_onnx_initializer(ctypes.c_void_p(handle), i, ctypes.byref(t)))
        v["initializers"][t.name.decode()] = _tensor(t) + (bool(t.external),)
    v["nodes"] = []
    for i in range(l.kiln_onnx_node_count(handle)):
        n = NodeInfo()
        _check(l.kiln_onnx_node(ctypes.c_void_p(handle), i, ctypes.byref(n)))
        attrs = {}
        for j in range(n.n_attrs):
            a = AttrInfo()
            _check(l.kiln_onnx_node_attr(ctypes.c_void_p(handle), i, j, ctypes.byref(a)))
            attrs[a.name.decode()] = _attr(a)
        v["nodes"].append((n.name.decode(), n.op_type.decode(), [n.inputs[k].decode() for k in range(n.n_inputs)],
                           [n.outputs[k].decode() for k in range(n.n_outputs)], attrs))

    def value(name):
        info = ValueInfo()
        _check(l.kiln_onnx_value(handle, name.encode(), ctypes.byref(info)))
        return (info.type, _dims(info))

    names = set()
    for node in v["nodes"]:
        names.update(o for o in node[3] if o)
    v["values"] = {name: value(name) for name in names}
    return v


def _with(loader):
    h = ctypes.c_void_p()
    _check(loader(h))
    try:
        return _view(h.value)
    finally:
        lib().kiln_onnx_destroy(h)


_dumped = itertools.count()


def _dump(data):
    folder = os.environ.get("KILN_ONNX_DUMP")
    if folder:
        pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(folder) / f"{os.getpid()}-{next(_dumped)}.onnx").write_bytes(data)


def load(path):
    _dump(pathlib.Path(path).read_bytes())
    return _with(lambda h: lib().kiln_onnx_load(str(path).encode(), ctypes.byref(h)))


def load_bytes(data, folder=None):
    _dump(data)
    return _with(lambda h: lib().kiln_onnx_load_memory(data, len(data), str(folder).encode() if folder else None,
                                                        ctypes.byref(h)))
