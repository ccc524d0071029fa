"""ONNX models run by Kiln (kiln_onnx_session, through kiln_onnx_run's ctypes binding) against onnxruntime's
run of the same model on the same inputs.

Tolerances, derived: every float32 result is compared with assert_allclose(rtol=tol, atol=tol). A dot
product of K terms summed in another order than onnxruntime's (Kiln's kernels block K, onnxruntime's MLAS
too, differently) differs by about eps32 * sqrt(K) relative to the magnitude of its terms (random-walk
rounding, eps32 = 6e-8); the models here chain two or three such products through functions whose libm
results differ by a few ulps, so tol = 1e-5 * sqrt(K) with K the largest inner dimension of the model (64:
8e-5), which is an order above the expected error and two below what a wrong index or a missed term gives.

The backend node tests (onnx's own cases with their inputs and expected outputs) are run for every
operator Kiln claims to run, at the tolerances each case states (onnx's defaults: rtol 1e-3, atol 1e-7).
"""
import collections
import math
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import kiln_onnx_run as kr
import kiln_onnx_view as kv

RNG = np.random.default_rng(22)


def tol(k):
    return 1e-5 * math.sqrt(k)


def make(nodes, inputs, outputs, inits=(), opset=17, name="g"):
    graph = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], producer_name="test_onnx_run")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def w(name, *shape, scale=0.5):
    return nh.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def reference(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def check_against_ort(model, feeds, k, session=None):
    ref = reference(model, feeds)
    own = session is None
    s = session or kr.Session(model)
    try:
        got = s.run(feeds)
    finally:
        if own:
            s.close()
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=tol(k), atol=tol(k))


def mlp(opset):
    """x [batch, 16] -> Gemm(transB) -> Relu -> MatMul + Add -> Tanh -> Gemm(alpha, beta) -> Sigmoid, Gelu,
    Softmax: the operators of an exported MLP head."""
    nodes = [
        h.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1),
        h.make_node("Relu", ["h1"], ["r1"]),
        h.make_node("MatMul", ["r1", "w2"], ["m2"]),
        h.make_node("Add", ["m2", "b2"], ["a2"]),
        h.make_node("Tanh", ["a2"], ["t2"]),
        h.make_node("Gemm", ["t2", "w3", "b3"], ["h3"], alpha=0.5, beta=2.0),
        h.make_node("Sigmoid", ["h3"], ["s3"]),
        h.make_node("Softmax", ["s3"], ["y"], axis=-1),
    ]
    inits = [w("w1", 64, 16), w("b1", 64), w("w2", 64, 32), w("b2", 32), w("w3", 32, 10), w("b3", 1, 10)]
    if opset >= 20:
        nodes[-2:] = [h.make_node("Gelu", ["h3"], ["s3"]), h.make_node("Softmax", ["s3"], ["y"], axis=-1)]
    return make(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["batch", 16])],
                [h.make_tensor_value_info("y", T.FLOAT, ["batch", 10])], inits, opset=opset)


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_an_mlp_matches_onnxruntime_at_every_batch_size_compiling_each_once(opset):
    model = mlp(opset)
    with kr.Session(model) as s:
        for batch in (1, 3, 5, 3, 1):
            check_against_ort(model, {"x": RNG.standard_normal((batch, 16)).astype(np.float32)}, 64, s)
        assert s.runs() == 5
        assert s.compiles() == 3  # batch 1, 3 and 5; the repeats ran their plans


def encoder(k_twice=False):
    """x [batch, seq, 16] -> LayerNormalization -> self-attention over 2 heads of 8 (Reshape with 0 and -1,
    Transpose (k_twice: K's as two, [0,2,1,3] then [0,1,3,2], as q @ k.transpose(-2, -1) exports), MatMul
    of two activations, Div by sqrt(8), Softmax on the last axis) -> residual Add ->
    the erf form of GELU written out (Div, Erf, Add, Mul) -> Sub of a bias (smaller operand second) and Div
    of a constant by the activation (smaller operand first)."""
    nodes = [
        h.make_node("LayerNormalization", ["x", "ln_s", "ln_b"], ["ln"], axis=-1, epsilon=1e-5),
        h.make_node("MatMul", ["ln", "wq"], ["q"]),
        h.make_node("MatMul", ["ln", "wk"], ["k"]),
        h.make_node("MatMul", ["ln", "wv"], ["v"]),
        h.make_node("Reshape", ["q", "heads"], ["q4"]),
        h.make_node("Reshape", ["k", "heads"], ["k4"]),
        h.make_node("Reshape", ["v", "heads"], ["v4"]),
        h.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        *([h.make_node("Transpose", ["k4"], ["kh"], perm=[0, 2, 1, 3]),
           h.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2])] if k_twice else
          [h.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1])]),
        h.make_node("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
        h.make_node("MatMul", ["qt", "kt"], ["scores"]),
        h.make_node("Div", ["scores", "sqrt_d"], ["scaled"]),
        h.make_node("Softmax", ["scaled"], ["p"], axis=-1),
        h.make_node("MatMul", ["p", "vt"], ["ctx"]),
        h.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["ctx_t", "merge"], ["attn"]),
        h.make_node("MatMul", ["attn", "wo"], ["o"]),
        h.make_node("Add", ["x", "o"], ["res"]),
        h.make_node("Div", ["res", "sqrt2"], ["g0"]),
        h.make_node("Erf", ["g0"], ["g1"]),
        h.make_node("Add", ["g1", "one"], ["g2"]),
        h.make_node("Mul", ["res", "g2"], ["g3"]),
        h.make_node("Mul", ["g3", "half"], ["g4"]),
        h.make_node("Sub", ["g4", "bias"], ["g5"]),
        h.make_node("Exp", ["g5"], ["g6"]),
        h.make_node("Div", ["bias", "g6"], ["y"]),
    ]
    inits = [
        nh.from_array(np.ones(16, np.float32) + RNG.standard_normal(16).astype(np.float32) * 0.1, "ln_s"),
        w("ln_b", 16, scale=0.1), w("wq", 16, 16), w("wk", 16, 16), w("wv", 16, 16), w("wo", 16, 16),
        nh.from_array(np.array([0, 0, 2, 8], np.int64), "heads"),
        nh.from_array(np.array([0, 0, -1], np.int64), "merge"),
        nh.from_array(np.array(math.sqrt(8), np.float32), "sqrt_d"),
        nh.from_array(np.array(math.sqrt(2), np.float32), "sqrt2"),
        nh.from_array(np.array(1, np.float32), "one"), nh.from_array(np.array(0.5, np.float32), "half"),
        nh.from_array(np.abs(RNG.standard_normal(16)).astype(np.float32) + 0.5, "bias"),
    ]
    return make(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", 16])],
                [h.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", 16])], inits, opset=17)


def test_an_attention_block_matches_onnxruntime_over_dynamic_batch_and_sequence():
    model = encoder()
    with kr.Session(model) as s:
        for batch, seq in ((1, 5), (2, 7), (1, 5), (3, 1)):
            check_against_ort(model, {"x": RNG.standard_normal((batch, seq, 16)).astype(np.float32)}, 16, s)
        assert s.compiles() == 3


def test_layer_normalization_over_two_axes_flatten_squeeze_and_unsqueeze():
    nodes = [
        h.make_node("LayerNormalization", ["x", "s", "b"], ["ln"], axis=-2),
        h.make_node("Unsqueeze", ["ln", "ax0"], ["u"]),
        h.make_node("Squeeze", ["u", "ax0"], ["q"]),
        h.make_node("Flatten", ["q"], ["f"], axis=1),
        h.make_node("Neg", ["f"], ["n"]),
        h.make_node("Sqrt", ["sq"], ["r"]),
        h.make_node("Mul", ["n", "r"], ["y0"]),
        h.make_node("Reciprocal", ["sq"], ["rc"]),
        h.make_node("Log", ["sq"], ["lg"]),
        h.make_node("Add", ["rc", "lg"], ["z"]),
        h.make_node("Mul", ["y0", "z"], ["y"]),
    ]
    inits = [w("s", 6, 4), w("b", 6, 4), nh.from_array(np.array([0], np.int64), "ax0"),
             nh.from_array(np.abs(RNG.standard_normal(24)).astype(np.float32) + 0.5, "sq")]
    model = make(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["batch", 6, 4])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["batch", 24])], inits)
    for batch in (1, 4):
        check_against_ort(model, {"x": RNG.standard_normal((batch, 6, 4)).astype(np.float32)}, 24)


def shape_arithmetic():
    """What torch.onnx.export writes for x.view(b, t, 2, 8) and friends on a dynamic batch and sequence: the
    reshape targets computed from Shape, Gather, Unsqueeze, Concat, Slice, Mul and Div at run time."""
    i64 = lambda name, *v: nh.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        h.make_node("Gather", ["s", "one"], ["t"], axis=0),
        h.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        h.make_node("Unsqueeze", ["t", "ax0"], ["t1"]),
        h.make_node("Div", ["h16", "two"], ["half"]),
        h.make_node("Concat", ["b1", "t1", "two1", "half"], ["shape4"], axis=0),
        h.make_node("Reshape", ["x", "shape4"], ["x4"]),
        h.make_node("Mul", ["b", "t"], ["bt"]),
        h.make_node("Unsqueeze", ["bt", "ax0"], ["bt1"]),
        h.make_node("Shape", ["x"], ["last"], start=-1),
        h.make_node("Concat", ["bt1", "last"], ["flat_shape"], axis=0),
        h.make_node("Reshape", ["x4", "flat_shape"], ["flat"]),
        h.make_node("MatMul", ["flat", "w"], ["m"]),
        h.make_node("Slice", ["s", "zero1", "two1"], ["bt_dims"]),
        h.make_node("Concat", ["bt_dims", "minus1"], ["out_shape"], axis=0),
        h.make_node("Reshape", ["m", "out_shape"], ["y"]),
    ]
    inits = [i64("zero", 0), i64("one", 1), i64("ax0", 0), i64("two", 2), i64("two1", 2), i64("zero1", 0),
             i64("h16", 16), i64("minus1", -1), w("w", 16, 12)]
    for t_ in inits[:2] + inits[3:4]:
        t_.dims[:] = []  # scalars, as torch writes indices and divisors
    return make(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", 16])],
                [h.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", 12])], inits)


def test_shape_arithmetic_on_dynamic_dims_is_evaluated_per_shape():
    model = shape_arithmetic()
    with kr.Session(model) as s:
        for batch, seq in ((2, 3), (1, 7), (2, 3)):
            check_against_ort(model, {"x": RNG.standard_normal((batch, seq, 16)).astype(np.float32)}, 16, s)
        assert s.compiles() == 2


@pytest.mark.parametrize("opset", [14, 18])
def test_a_layer_norm_written_out_and_reductions_over_any_axes(opset):
    """LayerNorm as torch.onnx.export writes it below opset 17 (ReduceMean, Sub, Pow 2, Add eps, Sqrt, Div,
    Mul, Add), then ReduceSum over the batch and sequence axes without keepdims and a ReduceMean over
    axis 1 (axes an attribute below opset 18, an input from 18 on; ReduceSum's an input since 13)."""
    i64 = lambda name, *v: nh.from_array(np.array(v, np.int64), name)  # noqa: E731
    axes_attr = opset < 18
    mean = (lambda i, o, axes, **kw: h.make_node("ReduceMean", [i], [o], axes=axes, **kw)) if axes_attr else (
        lambda i, o, axes, **kw: h.make_node("ReduceMean", [i, f"ax_{o}"], [o], **kw))
    nodes = [
        mean("x", "mu", [-1]), h.make_node("Sub", ["x", "mu"], ["d"]),
        h.make_node("Pow", ["d", "two"], ["d2"]), mean("d2", "var", [-1]),
        h.make_node("Add", ["var", "eps"], ["ve"]), h.make_node("Sqrt", ["ve"], ["sd"]),
        h.make_node("Div", ["d", "sd"], ["n"]), h.make_node("Mul", ["n", "gamma"], ["ng"]),
        h.make_node("Add", ["ng", "beta"], ["ln"]),
        h.make_node("ReduceSum", ["ln", "ax01"], ["s"], keepdims=0),
        mean("ln", "m1", [1]),
        h.make_node("Pow", ["sd", "minus_half"], ["inv"]),
    ]
    inits = [nh.from_array(np.array(2.0, np.float32), "two"), nh.from_array(np.array(1e-5, np.float32), "eps"),
             nh.from_array(np.array(-0.5, np.float32), "minus_half"), w("gamma", 16), w("beta", 16),
             i64("ax01", 0, 1)]
    if not axes_attr:
        inits += [i64("ax_mu", -1), i64("ax_var", -1), i64("ax_m1", 1)]
    model = make(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", 16])],
                 [h.make_tensor_value_info("ln", T.FLOAT, ["batch", "seq", 16]), h.make_tensor_value_info("s", T.FLOAT, [16]),
                  h.make_tensor_value_info("m1", T.FLOAT, ["batch", 1, 16]),
                  h.make_tensor_value_info("inv", T.FLOAT, ["batch", "seq", 1])], inits, opset=opset)
    with kr.Session(model) as s:
        for batch, seq in ((2, 5), (3, 1)):
            check_against_ort(model, {"x": RNG.standard_normal((batch, seq, 16)).astype(np.float32)}, 16, s)


def test_run_errors_name_the_input_and_what_differs():
    model = mlp(17)
    x = np.zeros((2, 16), np.float32)
    with kr.Session(model) as s:
        with pytest.raises(kv.KilnError, match=r"input 'z' is not one the model takes"):
            s.run({"z": x})
        with pytest.raises(kv.KilnError, match=r"input 'x': dim 1 is 15, the model's is 16"):
            s.run({"x": np.zeros((2, 15), np.float32)})
        with pytest.raises(kv.KilnError, match=r"input 'x': rank 3 given, the model takes rank 2"):
            s.run({"x": np.zeros((1, 2, 16), np.float32)})
        with pytest.raises(kv.KilnError, match=r"0 inputs given, the model takes 1"):
            s.run({})
        assert s.runs() == 0 and s.compiles() == 0
        s.run({"x": x})
        assert s.compiles() == 1


def test_operands_that_broadcast_both_ways():
    """[3, 1] - [1, 4] and a MatMul whose batch dims [3, 1] and [1, 2] broadcast both ways."""
    nodes = [h.make_node("Sub", ["x", "y"], ["z"]), h.make_node("MatMul", ["a", "b"], ["m"])]
    model = make(nodes, [h.make_tensor_value_info("x", T.FLOAT, [3, 1]), h.make_tensor_value_info("y", T.FLOAT, [1, 4]),
                         h.make_tensor_value_info("a", T.FLOAT, [3, 1, 2, 5]),
                         h.make_tensor_value_info("b", T.FLOAT, [1, 2, 5, 4])],
                 [h.make_tensor_value_info("z", T.FLOAT, [3, 4]), h.make_tensor_value_info("m", T.FLOAT, [3, 2, 2, 4])])
    shapes = {"x": (3, 1), "y": (1, 4), "a": (3, 1, 2, 5), "b": (1, 2, 5, 4)}
    check_against_ort(model, {k: RNG.standard_normal(v).astype(np.float32) for k, v in shapes.items()}, 5)


def test_a_model_kiln_reads_but_does_not_run_is_refused_by_node_and_operator():
    nodes = [h.make_node("Greater", ["x", "x"], ["c"], name="cmp"), h.make_node("Where", ["c", "x", "x"], ["y"])]
    model = make(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])])
    with kr.Session(model) as s:
        with pytest.raises(kv.KilnError, match=r"node 0 'cmp' \(Greater, opset 17\): Kiln reads this operator but"):
            s.run({"x": np.zeros(2, np.float32)})
    model = make([h.make_node("Identity", ["x"], ["y"])], [h.make_tensor_value_info("x", T.FLOAT16, [2])],
                 [h.make_tensor_value_info("y", T.FLOAT16, [2])])
    with pytest.raises(kv.KilnError, match=r"Identity"):
        kr.Session(model)


def test_an_axis_outside_the_inputs_rank_is_refused_by_name():
    """Softmax's and LayerNormalization's axis against the input's rank, refused at load or when the graph is
    lowered (fuzz_onnx_run found a Softmax axis of 5760 that reached the lowering and indexed past Kiln's four
    dims). onnx's checker refuses these models too, so they are built unchecked."""
    x = h.make_tensor_value_info("x", T.FLOAT, [2, 3])
    y = h.make_tensor_value_info("y", T.FLOAT, [2, 3])
    cases = [(h.make_node("Softmax", ["x"], ["y"], axis=7, name="sm"), [], "axis 7 is out of range for rank 2"),
             (h.make_node("Softmax", ["x"], ["y"], axis=-3, name="sm"), [], "axis -3 is out of range for rank 2"),
             (h.make_node("LayerNormalization", ["x", "s"], ["y"], axis=2, name="ln"),
              [nh.from_array(np.ones(3, np.float32), "s")], "axis 2 is out of range for rank 2")]
    for node, inits, words in cases:
        graph = h.make_graph([node], "g", [x], [y], initializer=inits)
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], producer_name="test_onnx_run")
        model.ir_version = 8
        with pytest.raises(kv.KilnError, match=re.escape(words)):
            with kr.Session(model) as s:
                s.run({"x": np.zeros((2, 3), np.float32)})


def test_integer_and_bool_inputs_run_exactly_up_to_2_to_the_24_and_are_refused_by_name_beyond():
    """Integers and booleans computed at run time are held as floats (exact to 2^24); ids that only index
    constant tables are held as I32 and checked against the table's rows."""
    nodes = [h.make_node("Add", ["n", "n"], ["twice"]), h.make_node("Not", ["b"], ["nb"]),
             h.make_node("Gather", ["table", "ids"], ["rows"])]
    model = make(nodes, [h.make_tensor_value_info("n", T.INT64, [3]), h.make_tensor_value_info("b", T.BOOL, [3]),
                         h.make_tensor_value_info("ids", T.INT64, ["t"])],
                 [h.make_tensor_value_info("twice", T.INT64, [3]), h.make_tensor_value_info("nb", T.BOOL, [3]),
                  h.make_tensor_value_info("rows", T.FLOAT, ["t", 4])], [w("table", 5, 4)])
    feeds = {"n": np.array([-7, 0, 1 << 23], np.int64), "b": np.array([True, False, True]),
             "ids": np.array([4, 0, -1], np.int64)}
    ref = reference(model, feeds)
    with kr.Session(model) as s:
        got = s.run(feeds)
        for g, r in zip(got, ref):
            assert g.dtype == r.dtype and np.array_equal(g, r)
        with pytest.raises(kv.KilnError, match=r"input 'n': element 2 is 16777217; Kiln computes integer data exactly up to 2\^24"):
            s.run(dict(feeds, n=np.array([0, 0, (1 << 24) + 1], np.int64)))
        with pytest.raises(kv.KilnError, match=r"input 'ids': element 1 is 5, out of \[-5, 5\)"):
            s.run(dict(feeds, ids=np.array([0, 5], np.int64)))


# ---- The backend node tests of the operators Kiln runs ----

RUNS = set("""Add Sub Mul Div Relu Tanh Sigmoid Erf Sqrt Exp Log Neg Reciprocal Gelu Identity MatMul Gemm Softmax
LayerNormalization Transpose Reshape Flatten Squeeze Unsqueeze ReduceMean ReduceSum Pow Gather GatherElements GatherND
Slice Split Concat Expand Where And Or Xor Not Cast Shape ReduceMax QuantizeLinear DequantizeLinear
DynamicQuantizeLinear MatMulInteger""".split())

# The operators Kiln computes on the host when their inputs are known from shapes (onnx_host.c: masks,
# position ids, rotary tables). Their node tests run a second time with every fed input made an initializer,
# so that the whole case is computed on the host.
HOST = set("""Shape Identity Reshape Flatten Squeeze Unsqueeze Cast Concat Gather GatherElements GatherND Slice Expand
Where Range ConstantOfShape Transpose Trilu Equal Less LessOrEqual Greater GreaterOrEqual And Or Xor Not IsNaN Add Sub
Mul Div Mod Pow Max Min Neg Abs Relu Sqrt Reciprocal Exp Log Sin Cos Tanh Sigmoid Erf QuantizeLinear
DequantizeLinear""".split())

# Cases Kiln does not pass, with the reason (docs/onnx.md lists them too). By the refusal whole groups share:
# a parameter (axes, starts and ends, a shape, split sizes, Gather's indices into computed data) fed at run
# time, where Kiln needs it known from shapes; element types Kiln does not run (uint*, int8, int16, float16,
# double); Pow whose exponent is a tensor rather than a constant scalar; empty tensors.
KNOWN_REFUSALS = (r"computed from tensor values|not known from shapes|indices are computed at run time",
                  r"is (uint\d+|int8|int16|float16|double|bfloat16|string)\b",
                  r"\(Pow, .*the exponent is not a constant scalar", r"Kiln runs no empty tensors")
# By name: (mode, case) -> why.
KNOWN = {
    ("host", "test_gathernd_example_int32_batch_dim1"): "GatherND's batch_dims other than 0",
    ("host", "test_pow_types_int32_float32"): "an integer base with a float exponent",
    ("host", "test_pow_types_int64_float32"): "an integer base with a float exponent",
}


def node_cases(cache):
    """The node test cases of the operators Kiln runs or computes on the host, with their first data set,
    cached once per onnx version and operator list (folder node-cases: MODEL.onnx and MODEL.npz with in_i
    and out_i arrays, and the tolerances)."""
    folder = cache / "node-cases"
    stamp = folder / ".stamp"
    want = onnx.__version__ + " " + " ".join(sorted(RUNS | HOST))
    if not stamp.exists() or stamp.read_text() != want:
        import onnx.backend.test.case.node as node

        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.onnx"):
            old.unlink()
        for case in node.collect_testcases():
            ops = {n.op_type for n in case.model.graph.node}
            if not ops <= RUNS | HOST | {"Constant"} or not ops & (RUNS | HOST) or not case.data_sets:
                continue
            ins, outs = case.data_sets[0]
            arrays = {f"in_{i}": np.asarray(a) for i, a in enumerate(ins)}
            arrays.update({f"out_{i}": np.asarray(a) for i, a in enumerate(outs)})
            arrays["tol"] = np.array([case.rtol, case.atol])
            (folder / f"{case.name}.onnx").write_bytes(case.model.SerializeToString())
            np.savez(folder / f"{case.name}.npz", **arrays)
        stamp.write_text(want)
    return sorted(folder.glob("*.onnx"))


def as_constants(model, feeds):
    """The model with its fed inputs made initializers: every node then computes on the host."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name not in feeds]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.extend(nh.from_array(np.asarray(a), name) for name, a in feeds.items())
    return m


def run_case(path, host):
    """None when Kiln's outputs match the case's, else why not. host: the fed inputs made initializers."""
    model = onnx.load(path)
    data = np.load(path.with_suffix(".npz"))
    rtol, atol = data["tol"]
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    feeds = {name: data[f"in_{i}"] for i, name in enumerate(names)}
    try:
        with kr.Session(as_constants(model, feeds) if host else model) as s:
            got = s.run({} if host else feeds)
    except kv.KilnError as e:
        return e.message
    for i, g in enumerate(got):
        ref = data[f"out_{i}"]
        if g.shape != ref.shape:
            return f"output {i}: shape {g.shape}, expected {ref.shape}"
        if ref.dtype.kind in "iub" and g.dtype != ref.dtype and not (ref.dtype == np.int32 and g.dtype == np.int32):
            return f"output {i}: type {g.dtype}, expected {ref.dtype}"
        if not np.allclose(g.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True):
            return f"output {i}: max error {np.max(np.abs(g.astype(np.float64) - ref)):.3g}"
    return None


def test_backend_node_tests_of_every_operator_kiln_runs(onnx_cache, capsys):
    results = {mode: (collections.defaultdict(list), collections.defaultdict(list)) for mode in ("run", "host")}
    refused_at_load = 0
    for path in node_cases(onnx_cache):
        model = onnx.load(path)
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        ops = {n.op_type for n in model.graph.node} - {"Constant"}
        op = next(n.op_type for n in model.graph.node if n.op_type != "Constant")
        try:
            kv.load(path)
        except kv.KilnError:
            refused_at_load += 1  # opsets 22-25 and types the reader refuses (test_onnx_node_tests.py counts them)
            continue
        assert 13 <= opset <= 21
        for mode, ok in (("run", ops <= RUNS), ("host", ops <= HOST)):
            if ok:
                why = run_case(path, mode == "host")
                passed, failed = results[mode]
                (failed if why else passed)[op].append((path.stem, why))
    unexpected = []
    with capsys.disabled():
        for mode, (passed, failed) in results.items():
            n_pass = sum(len(v) for v in passed.values())
            n_fail = sum(len(v) for v in failed.values())
            print(f"\nnode tests, {'fed inputs' if mode == 'run' else 'inputs as constants (computed on the host)'}: "
                  f"{n_pass} of {n_pass + n_fail} that load pass ({refused_at_load} cases refused at load)")
            for op in sorted(set(passed) | set(failed)):
                print(f"  {op}: {len(passed[op])}/{len(passed[op]) + len(failed[op])}"
                      + "".join(f"\n    {name}: {why}" for name, why in failed[op]))
            unexpected += [f"{mode} {name}: {why}" for cases in failed.values() for name, why in cases
                           if (mode, name) not in KNOWN and not any(re.search(p, why) for p in KNOWN_REFUSALS)]
    assert not unexpected, "\n".join(unexpected)


# ---- kiln onnx run ----

def test_the_cli_runs_a_model_on_npy_inputs_and_writes_npy_outputs(kiln_cli, tmp_path):
    import subprocess

    model = encoder()
    onnx.save(model, tmp_path / "enc.onnx")
    x = RNG.standard_normal((2, 5, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run([kiln_cli, "onnx", "run", str(tmp_path / "enc.onnx"), "--input", f"x={tmp_path / 'x.npy'}",
                        "--output-dir", str(tmp_path), "-t", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"y: [2, 5, 16] float -> {tmp_path}/y.npy" in r.stdout
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), reference(model, {"x": x})[0], rtol=tol(16), atol=tol(16))


def test_the_cli_reads_npz_inputs_and_writes_one_npz_of_outputs(kiln_cli, tmp_path):
    """An .npz names its inputs itself (member NAME.npy is input NAME), stored (numpy.savez) or deflated
    (savez_compressed), mixed with a .npy; --output writes every output into one archive numpy.load reads.
    The BERT export takes int64 ids and mask; its outputs are checked against onnxruntime's, committed beside
    it, at the tolerance test_onnx_torch_models.py derives (K = 64, depth 4)."""
    import pathlib
    import subprocess

    here = pathlib.Path(__file__).resolve().parent / "torch_models"
    ref = np.load(here / "bert-dynamo.npz")
    bert = str(here / "bert-dynamo.onnx")
    for save in (np.savez, np.savez_compressed):
        save(tmp_path / "in.npz", input_ids=ref["in1.input_ids"], attention_mask=ref["in1.attention_mask"])
        r = subprocess.run([kiln_cli, "onnx", "run", bert, "-i", str(tmp_path / "in.npz"), "--output",
                            str(tmp_path / "out.npz"), "-t", "2"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert f"1 outputs -> {tmp_path / 'out.npz'}" in r.stdout, r.stdout
        out = np.load(tmp_path / "out.npz")
        assert list(out.keys()) == ["last_hidden_state"]
        bound = 1e-5 * math.sqrt(64) * 4
        np.testing.assert_allclose(out["last_hidden_state"], ref["out1.last_hidden_state"], rtol=bound, atol=bound)
    # one input from the archive, the other from a .npy; every output type the session gives is written
    np.savez(tmp_path / "ids.npz", input_ids=ref["in0.input_ids"])
    np.save(tmp_path / "mask.npy", ref["in0.attention_mask"])
    r = subprocess.run([kiln_cli, "onnx", "run", bert, "-i", str(tmp_path / "ids.npz"), "-i",
                        f"attention_mask={tmp_path / 'mask.npy'}", "--output", str(tmp_path / "out0.npz")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    bound = 1e-5 * math.sqrt(64) * 4
    np.testing.assert_allclose(np.load(tmp_path / "out0.npz")["last_hidden_state"], ref["out0.last_hidden_state"],
                               rtol=bound, atol=bound)


def _zip_with(tmp_path, members):
    import zipfile

    path = tmp_path / "bad.npz"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


@pytest.mark.parametrize("case, message", [
    ("member_not_npy", "member 'notes.txt' is not NAME.npy"),
    ("member_not_numpy", "member 'x.npy': not a .npy file"),
    ("unknown_input", "input 'nope' is not one the model takes"),
    ("given_twice", "input 'x' is given twice"),
    ("truncated", "not a .npz (ZIP) archive"),
    ("crc", "member 'x.npy'"),
    ("named", "a .npz names its inputs itself"),
])
def test_the_cli_refuses_a_malformed_npz_by_name(kiln_cli, tmp_path, case, message):
    import io
    import subprocess

    onnx.save(mlp(17), tmp_path / "mlp.onnx")
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    good = io.BytesIO()
    np.save(good, x)
    arg = None
    if case == "member_not_npy":
        path = _zip_with(tmp_path, {"notes.txt": b"hello"})
    elif case == "member_not_numpy":
        path = _zip_with(tmp_path, {"x.npy": b"not numpy"})
    elif case == "unknown_input":
        path = _zip_with(tmp_path, {"x.npy": good.getvalue(), "nope.npy": good.getvalue()})
    elif case == "given_twice":
        path = _zip_with(tmp_path, {"x.npy": good.getvalue()})
        np.save(tmp_path / "x.npy", x)
        arg = ["-i", f"x={tmp_path / 'x.npy'}", "-i", str(path)]
    elif case == "truncated":
        np.savez(tmp_path / "t.npz", x=x)
        path = tmp_path / "t.npz"
        path.write_bytes(path.read_bytes()[:-30])
    elif case == "crc":
        np.savez(tmp_path / "c.npz", x=x)
        path = tmp_path / "c.npz"
        data = bytearray(path.read_bytes())
        data[data.index(b"NUMPY") + 100] ^= 0x01  # a data byte of the stored member: its CRC no longer matches
        path.write_bytes(bytes(data))
    else:
        np.savez(tmp_path / "n.npz", x=x)
        path = tmp_path / "n.npz"
        arg = ["-i", f"x={path}"]
    r = subprocess.run([kiln_cli, "onnx", "run", str(tmp_path / "mlp.onnx")] + (arg or ["-i", str(path)]),
                       capture_output=True, text=True)
    assert r.returncode in (1, 2), r.stdout + r.stderr
    assert message in r.stderr, r.stderr


def test_the_cli_benchmarks_a_model_at_the_shapes_dims_gives(kiln_cli):
    """kiln onnx bench: one compile for the shapes, then the timed runs' summary; a bad --dims or --weights is
    a usage error or a named failure."""
    import pathlib
    import re
    import subprocess

    bert = str(pathlib.Path(__file__).resolve().parent / "torch_models" / "bert-dynamo.onnx")
    r = subprocess.run([kiln_cli, "onnx", "bench", "--dims", "batch=2,seq=6", "-r", "3", "-t", "1", bert],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^first run \(compiles the plan\): [0-9.]+ ms$", r.stdout, re.M), r.stdout
    assert re.search(r"^3 runs: median [0-9.]+ ms, fastest [0-9.]+, slowest [0-9.]+; plans compiled: 1$", r.stdout,
                     re.M), r.stdout
    assert "input attention_mask int64 [2, 6]: all 0\n" in r.stdout, r.stdout  # the default: every key hidden
    r = subprocess.run([kiln_cli, "onnx", "bench", "--dims", "batch=1,seq=4", "--int-value", "1", "-r", "1", bert],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "input input_ids int64 [1, 4]: all 1\n" in r.stdout and "input attention_mask int64 [1, 4]: all 1\n" in r.stdout
    r = subprocess.run([kiln_cli, "onnx", "bench", "--int-value", "128", bert], capture_output=True, text=True)
    assert r.returncode == 2 and "--int-value" in r.stderr, r.stderr
    # --cpu forces a kernel level (ref: the scalar kernels, on every machine), and an unknown one is refused
    r = subprocess.run([kiln_cli, "onnx", "bench", "--cpu", "ref", "--dims", "batch=1,seq=4", "-r", "1", bert],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([kiln_cli, "onnx", "bench", "--cpu", "avx9", bert], capture_output=True, text=True)
    assert r.returncode == 2 and "--cpu avx9" in r.stderr, r.stderr
    r = subprocess.run([kiln_cli, "onnx", "bench", "--dims", "batch=two", bert], capture_output=True, text=True)
    assert r.returncode == 2 and "--dims 'batch=two': give NAME=N pairs" in r.stderr
    r = subprocess.run([kiln_cli, "onnx", "bench", "--weights", "int4", bert], capture_output=True, text=True)
    assert r.returncode == 1 and "weights 'int4': give \"float\" or \"q8_0\"" in r.stderr


@pytest.mark.parametrize("content, message", [
    (b"not numpy", "not a .npy file"),
    (b"\x93NUMPY\x01\x00\x40\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", "header of 64 bytes"),
    (b"\x93NUMPY\x01\x00\x10\x00{'descr': '>f4'}", "element type '>f4'"),
    (b"\x93NUMPY\x01\x00\x3c\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 16), }", "0 bytes of data, the shape needs 128"),
    (b"\x93NUMPY\x04\x00\x00\x00", "format version 4.0"),
])
def test_the_cli_refuses_a_malformed_npy_file_by_name(kiln_cli, tmp_path, content, message):
    import subprocess

    onnx.save(mlp(17), tmp_path / "mlp.onnx")
    (tmp_path / "x.npy").write_bytes(content)
    r = subprocess.run([kiln_cli, "onnx", "run", str(tmp_path / "mlp.onnx"), "-i", str(tmp_path / "x.npy")],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert message in r.stderr, r.stderr


# ---- kiln onnx inspect --before / --after ----

def test_inspect_shows_the_lowered_graph_before_and_after_the_passes(kiln_cli, tmp_path):
    """An MLP whose MatMul weights are initializers: as lowered, each weight is read transposed (a
    transpose and a copy); after the passes the copies are constants folded once and each product with
    its bias is one linear node. --dims binds the batch; a malformed --dims is a usage error."""
    import subprocess

    onnx.save(mlp(17), tmp_path / "mlp.onnx")
    sym = next(d.dim_param for d in mlp(17).graph.input[0].type.tensor_type.shape.dim if d.dim_param)

    def inspect(*args):
        return subprocess.run([kiln_cli, "onnx", "inspect", *args, str(tmp_path / "mlp.onnx")], capture_output=True,
                              text=True)

    before, after = inspect("--before"), inspect("--after", "--dims", f"{sym}=3")
    assert before.returncode == 0 and after.returncode == 0, before.stderr + after.stderr
    ops = lambda text: [line.split()[2] for line in text.splitlines() if line.startswith("#")]  # noqa: E731
    assert "transpose" in ops(before.stdout) and "matmul" in ops(before.stdout) and "linear" not in ops(before.stdout)
    assert "transpose" not in ops(after.stdout) and "matmul" not in ops(after.stdout) and "linear" in ops(after.stdout)
    assert ", 3, 1, 1]" in after.stdout  # the batch bound to 3
    bad = inspect("--after", "--dims", f"{sym}=zero")
    assert bad.returncode == 2 and "--dims" in bad.stderr, bad.stderr


@pytest.mark.parametrize("k_twice", [False, True])
def test_an_unmasked_attention_chain_runs_as_the_fused_attention_op(kiln_cli, tmp_path, k_twice):
    """encoder()'s chain has no mask Add (Softmax straight after the scaled MatMul): it lowers to the fused
    attention op over a session constant of zeros (every key visible) instead of materializing the scores,
    with K transposed once or twice, and still matches onnxruntime."""
    import subprocess

    model = encoder(k_twice)
    if k_twice:  # the other form runs in test_an_attention_block_matches_onnxruntime_over_dynamic_batch_and_sequence
        with kr.Session(model) as s:
            for batch, seq in ((1, 5), (2, 7)):
                check_against_ort(model, {"x": RNG.standard_normal((batch, seq, 16)).astype(np.float32)}, 16, s)
    onnx.save(model, tmp_path / "enc.onnx")
    r = subprocess.run([kiln_cli, "onnx", "inspect", "--after", "--dims", "batch=2,seq=9", str(tmp_path / "enc.onnx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ops = [line.split()[2] for line in r.stdout.splitlines() if line.startswith("#")]
    assert ops.count("attention") == 2, ops  # one per batch row
    assert "softmax" not in ops, ops
