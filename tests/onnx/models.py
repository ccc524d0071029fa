"""models - the ONNX models the tests make with onnx.helper, and the reference view of a model as the onnx
package reports it (names, element types, shapes after onnx's own shape inference, initializer bytes,
attributes), in the form kiln_onnx_view gives Kiln's."""
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def _dims(type_proto):
    t = type_proto.tensor_type
    if not t.HasField("shape"):
        return None
    out = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            out.append(d.dim_value)
        elif d.HasField("dim_param") and not d.dim_param.startswith("unk__"):
            out.append(d.dim_param)  # onnx names the dims it does not know unk__N: those are unknown
        else:
            out.append(None)
    return out


def _attr(a):
    v = h.get_attribute_value(a)
    if a.type == onnx.AttributeProto.FLOAT:
        return float(np.float32(v))
    if a.type == onnx.AttributeProto.FLOATS:
        return [float(np.float32(x)) for x in v]
    if a.type == onnx.AttributeProto.INTS:
        return list(v)
    if a.type == onnx.AttributeProto.TENSOR:
        arr = nh.to_array(v)
        return (v.data_type, list(v.dims), arr.tobytes())
    return v


def reference(model):
    """The onnx package's view of a model, shapes from onnx.shape_inference (strict mode)."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    init_names = {t.name for t in g.initializer}
    values = {}
    for vi in list(g.value_info) + list(g.output):
        values[vi.name] = (vi.type.tensor_type.elem_type, _dims(vi.type))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return {
        "opset": opset,
        "ir_version": model.ir_version,
        "producer": model.producer_name,
        "inputs": [(i.name, i.type.tensor_type.elem_type, _dims(i.type)) for i in g.input if i.name not in init_names],
        "outputs": [(o.name, o.type.tensor_type.elem_type, _dims(o.type)) for o in g.output],
        "initializers": {t.name: (t.data_type, list(t.dims), nh.to_array(t).tobytes()) for t in model.graph.initializer},
        "nodes": [(n.name, n.op_type, list(n.input), list(n.output), {a.name: _attr(a) for a in n.attribute})
                  for n in g.node],
        "values": values,
    }


def make(nodes, inputs, outputs, inits=(), opset=17, value_info=()):
    g = h.make_graph(nodes, "test", inputs, outputs, list(inits), value_info=list(value_info))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="kiln-tests")
    onnx.checker.check_model(m, full_check=True)
    return m


def f32(name, arr):
    return nh.from_array(np.asarray(arr, dtype=np.float32), name)


def i64(name, arr):
    return nh.from_array(np.asarray(arr, dtype=np.int64), name)


def vi(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def mlp(opset=13):
    """Gemm + Relu + Gemm, weights in the typed float_data field and in raw_data."""
    rng = np.random.default_rng(1)
    w1 = h.make_tensor("w1", T.FLOAT, [16, 8], rng.standard_normal(128).astype(np.float32).tolist(), raw=False)
    b1 = f32("b1", rng.standard_normal(16))
    w2 = f32("w2", rng.standard_normal((8, 16)))
    nodes = [h.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1, alpha=0.5, beta=2.0),
             h.make_node("Relu", ["h"], ["a"], name="act"),
             h.make_node("MatMul", ["a", "w2t"], ["y"], name="fc2"),
             h.make_node("Transpose", ["w2"], ["w2t"], name="t", perm=[1, 0])]
    return make([nodes[0], nodes[1], nodes[3], nodes[2]], [vi("x", T.FLOAT, ["batch", 8])],
                [vi("y", T.FLOAT, ["batch", 8])], [w1, b1, w2], opset=opset)


def attention_block(opset=17):
    """Self-attention with a causal mask, LayerNormalization, a dynamic reshape through Shape/Gather/Concat,
    and most of the claimed operators around it (static shapes: batch 2, sequence 5, width 8, 2 heads)."""
    rng = np.random.default_rng(2)
    B, S, D, H = 2, 5, 8, 2
    inits = [f32("wq", rng.standard_normal((D, D))), f32("wk", rng.standard_normal((D, D))),
             f32("wv", rng.standard_normal((D, D))), f32("gamma", np.ones(D)), f32("beta", np.zeros(D)),
             i64("heads", [0, 0, H, D // H]), f32("scale", [np.sqrt(D // H)]), i64("zero", [0]), i64("one", [1]),
             i64("axes0", [0]), f32("neg", [-1e9])]
    n = h.make_node
    nodes = [
        n("LayerNormalization", ["x", "gamma", "beta"], ["ln"], name="ln", axis=-1, epsilon=1e-5),
        n("MatMul", ["ln", "wq"], ["q0"], name="q"), n("MatMul", ["ln", "wk"], ["k0"], name="k"),
        n("MatMul", ["ln", "wv"], ["v0"], name="v"),
        n("Reshape", ["q0", "heads"], ["q1"], name="rq"), n("Reshape", ["k0", "heads"], ["k1"], name="rk"),
        n("Reshape", ["v0", "heads"], ["v1"], name="rv"),
        n("Transpose", ["q1"], ["q2"], perm=[0, 2, 1, 3], name="tq"),
        n("Transpose", ["k1"], ["k2"], perm=[0, 2, 3, 1], name="tk"),
        n("Transpose", ["v1"], ["v2"], perm=[0, 2, 1, 3], name="tv"),
        n("MatMul", ["q2", "k2"], ["s0"], name="qk"), n("Div", ["s0", "scale"], ["s1"], name="div"),
        n("Shape", ["x"], ["xs"], name="shape"), n("Gather", ["xs", "one"], ["seq"], axis=0, name="seq"),
        n("Concat", ["seq", "seq"], ["ss"], axis=0, name="cat"),
        n("ConstantOfShape", ["ss"], ["ones"], name="cos", value=h.make_tensor("v", T.FLOAT, [1], [1.0])),
        n("Trilu", ["ones"], ["tri"], upper=0, name="tril"),
        n("Cast", ["tri"], ["trib"], to=T.BOOL, name="cast"), n("Not", ["trib"], ["masked"], name="not"),
        n("Where", ["masked", "neg", "s1"], ["s2"], name="where"),
        n("Softmax", ["s2"], ["p"], axis=-1, name="softmax"),
        n("MatMul", ["p", "v2"], ["o0"], name="pv"), n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3], name="to"),
        n("Shape", ["o1"], ["os"], start=0, end=2, name="shape2"),
        n("Constant", [], ["minus1"], value_ints=[-1], name="const"),
        n("Concat", ["os", "minus1"], ["oshape"], axis=0, name="cat2"),
        n("Reshape", ["o1", "oshape"], ["o2"], name="ro"),
        n("Add", ["o2", "x"], ["r"], name="residual"),
        n("Unsqueeze", ["r", "axes0"], ["u"], name="unsq"), n("Squeeze", ["u", "axes0"], ["sq"], name="sq"),
        n("Split", ["sq", "ss"], ["sp0", "sp1"], axis=2, name="split"),
        n("Concat", ["sp1", "sp0"], ["y"], axis=2, name="cat3"),
    ]
    # Split's sizes here come from a Concat of Gathers: not a constant, so its dims are unknown to Kiln too.
    nodes[-2] = n("Split", ["sq"], ["sp0", "sp1"], axis=2, name="split", **({"num_outputs": 2} if opset >= 18 else {}))
    return make(nodes, [vi("x", T.FLOAT, [B, S, D])], [vi("y", T.FLOAT, [B, S, D])], inits, opset=opset)


def elementwise(opset=17):
    """The elementwise, comparison, reduction and indexing operators on a symbolic batch dimension."""
    n = h.make_node
    inits = [f32("two", [2.0]), i64("axes1", [1]), i64("starts", [1]), i64("ends", [-1]), i64("steps", [1]),
             i64("idx", [[0, 2], [1, 0]]), i64("eshape", [3, 1, 4]), i64("rstart", 0), i64("rlimit", 7),
             i64("rdelta", 2), i64("three", [3])]
    reduce_axes = {"axes": [1]} if opset < 18 else {}
    reduce_in = ["e"] if opset < 18 else ["e", "axes1"]
    nodes = [
        n("Sqrt", ["x"], ["a"]), n("Reciprocal", ["a"], ["b"]), n("Neg", ["b"], ["c"]), n("Exp", ["c"], ["d"]),
        n("Log", ["d"], ["e0"]), n("Tanh", ["e0"], ["e1"]), n("Erf", ["e1"], ["e2"]), n("Sigmoid", ["e2"], ["e3"]),
        n("Pow", ["e3", "two"], ["e4"]), n("Sub", ["e4", "x"], ["e5"]), n("Mul", ["e5", "x"], ["e"]),
        n("ReduceMean", reduce_in, ["rm"], keepdims=1, **reduce_axes),
        n("ReduceSum", ["e", "axes1"], ["rs"], keepdims=0),
        n("ReduceMax", reduce_in, ["rx"], keepdims=0, **reduce_axes),
        n("Greater", ["e", "rm"], ["g"]), n("Less", ["e", "rm"], ["l"]), n("GreaterOrEqual", ["e", "rm"], ["ge"]),
        n("Equal", ["e", "rm"], ["eq"]), n("And", ["g", "ge"], ["and"]), n("IsNaN", ["e"], ["nan"]),
        n("Slice", ["e", "starts", "ends", "axes1", "steps"], ["sl"]),
        n("GatherElements", ["e", "idx"], ["ge2"], axis=1), n("Flatten", ["e"], ["fl"], axis=1),
        n("Expand", ["rm", "eshape"], ["ex"]), n("Range", ["rstart", "rlimit", "rdelta"], ["rg"]),
        n("Mod", ["rg", "three"], ["md"], fmod=0), n("Identity", ["md"], ["id"]),
    ]
    outs = [vi(o, T.FLOAT, None) for o in ("e", "rm", "rs", "rx", "sl", "ge2", "fl", "ex")]
    outs += [vi(o, T.BOOL, None) for o in ("l", "eq", "and", "nan")]
    outs += [vi("id", T.INT64, None)]
    # onnx's checker wants a shape field on outputs: declare ranks-free shapes by inference afterwards.
    g = h.make_graph(nodes, "test", [vi("x", T.FLOAT, ["batch", 4])], outs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="kiln-tests")
    return m


def typed_initializers():
    """Initializers of every element type Kiln stores, each in its typed field (not raw_data)."""
    rng = np.random.default_rng(3)
    inits = []
    for name, dtype, onnx_type in (("f16", np.float16, T.FLOAT16), ("i8", np.int8, T.INT8), ("u8", np.uint8, T.UINT8),
                                   ("i16", np.int16, T.INT16), ("u16", np.uint16, T.UINT16), ("i32", np.int32, T.INT32),
                                   ("i64", np.int64, T.INT64), ("f64", np.float64, T.DOUBLE),
                                   ("u32", np.uint32, T.UINT32), ("u64", np.uint64, T.UINT64),
                                   ("f32", np.float32, T.FLOAT)):
        arr = (rng.standard_normal((3, 5)) * 100).astype(dtype)
        inits.append(nh.from_array(arr, name))
        t = h.make_tensor(name + "_typed", onnx_type, arr.shape, arr.flatten().tolist(), raw=False)
        inits.append(t)
    inits.append(nh.from_array(rng.standard_normal(7) > 0, "boolean"))
    inits.append(h.make_tensor("boolean_typed", T.BOOL, [7], [True, False, True, True, False, False, True]))
    inits.append(h.make_tensor("empty", T.FLOAT, [0, 3], []))
    inits.append(h.make_tensor("scalar", T.INT64, [], [-5], raw=False))
    nodes = [h.make_node("Identity", ["x"], ["y"], name="id")]
    return make(nodes, [vi("x", T.FLOAT, [1])], [vi("y", T.FLOAT, [1])], inits)
