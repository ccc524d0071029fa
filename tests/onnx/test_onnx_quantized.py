"""Quantized ONNX models (Q/DQ INT8) as onnxruntime's own tools write them, run by Kiln against onnxruntime's
run of the same file: quantize_dynamic (DynamicQuantizeLinear, MatMulInteger, per tensor and per channel),
quantize_static in the QDQ format (QuantizeLinear/DequantizeLinear pairs around float operators) and in the
QOperator format for MatMul (QLinearMatMul between QuantizeLinear and DequantizeLinear), applied at test
time to the models exported from PyTorch (tests/onnx/torch_models), at both stored shapes.

Kiln computes the ONNX definitions: the quantized integers exactly (held as floats), the scales and zero points
as the operators define them (DynamicQuantizeLinear's min and max over the whole tensor), float arithmetic for
the rest. The reference is onnxruntime with its graph optimizations off, so that it too runs the operators as
the file writes them (with them on, it fuses a QDQ graph into QLinearAdd, QLinearSoftmax and friends, whose
integer approximations differ from the definitions by up to half the quantization error on these models:
1 - cos 8e-5 against 1.4e-4 for the encoder, measured; Kiln runs the definitions). The two agree to float
rounding
(1e-7 of the output's scale, often bit for bit) until a value lands within that rounding of a quantizer's .5
boundary and rounds the other way: one integer moves by one step, and under per-tensor dynamic quantization the
moved element can move the tensor's min or max, hence every scale after it. Such a flip is one quantization step,
an order below the quantization error itself, so the stated tolerance is relative to that error:

    1 - cos(kiln, ort) <= 0.1 * (1 - cos(ort, float))

(cos over all output elements; float = onnxruntime's run of the unquantized model, stored in the .npz), and a
cosine of at least 0.99 to onnxruntime in absolute terms. A wrong zero point, scale, axis or rounding rule
breaks the bound by orders of magnitude.

reduce_range=True (weights in 7 bits) for every model: onnxruntime's u8s8 kernels on CPUs without VNNI (this
project's AVX2 machines) add pairs of uint8 x int8 products in int16 with saturation (vpmaddubsw), which
overflows for full-range weights; onnxruntime documents reduce_range for exactly that. Kiln's integers are exact
either way (test_onnx_run.py's MatMulInteger case compares with numpy).
"""
import math
import pathlib

import numpy as np
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

import kiln_onnx_run as kr
import kiln_onnx_view as kv

HERE = pathlib.Path(__file__).resolve().parent / "torch_models"
MODELS = ["mlp-torchscript", "encoder-dynamo", "gpt2-torchscript", "bert-torchscript", "bert-dynamo", "llama-dynamo"]
SCHEMES = ["dynamic", "dynamic-per-channel", "static-qdq", "static-qoperator"]


class Feeds(CalibrationDataReader):
    def __init__(self, feeds):
        self.it = iter(feeds)

    def get_next(self):
        return next(self.it, None)


def shapes(stem):
    data = np.load(HERE / f"{stem}.npz")
    out = []
    for i in (0, 1):
        feeds = {k.split(".", 1)[1]: data[k] for k in data.files if k.startswith(f"in{i}.")}
        want = [data[k] for k in sorted(data.files) if k.startswith(f"out{i}.")][0]
        out.append((feeds, want))
    return out


def quantize(stem, scheme, path):
    src = str(HERE / f"{stem}.onnx")
    if scheme.startswith("static"):
        # QOperator: quantized operators in place of float ones; MatMul only, since onnxruntime writes the
        # others (QLinearAdd, QGemm, QAttention, ...) in its own com.microsoft domain, which Kiln does not claim.
        qoperator = scheme.endswith("qoperator")
        quantize_static(src, str(path), Feeds([f for f, _ in shapes(stem)]),
                        quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
                        op_types_to_quantize=["MatMul"] if qoperator else None,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=True)
    else:
        quantize_dynamic(src, str(path), weight_type=QuantType.QInt8, reduce_range=True,
                         per_channel=scheme.endswith("per-channel"))


def cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("stem", MODELS)
def test_a_model_quantized_by_onnxruntime_runs_within_its_quantization_error_of_onnxruntime(stem, scheme, tmp_path):
    import onnxruntime as ort

    path = tmp_path / f"{stem}-{scheme}.onnx"
    quantize(stem, scheme, path)
    if scheme == "static-qoperator":
        import onnx

        ops = {n.op_type for n in onnx.load(str(path)).graph.node}
        float_ops = {n.op_type for n in onnx.load(str(HERE / f"{stem}.onnx")).graph.node}
        assert ("QLinearMatMul" in ops) == ("MatMul" in float_ops), sorted(ops)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    with kr.Session(path.read_bytes()) as s:
        for feeds, float_out in shapes(stem):
            want = ref.run(None, feeds)[0]
            got = s.run(feeds)[0]
            assert got.shape == want.shape and got.dtype == want.dtype
            quant_err = 1 - cosine(want, float_out)
            ours = 1 - cosine(got, want)
            assert ours <= 0.1 * quant_err and ours <= 0.01, (
                f"1 - cos(kiln, ort) = {ours:.3g}, the quantization's own 1 - cos(ort, float) = {quant_err:.3g}")
            assert math.isfinite(ours)


def test_matmul_integer_is_exact_with_full_range_weights_and_zero_points():
    """(A - a_zero_point) . (B - b_zero_point) against numpy's int64 product, per tensor and per column."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (64, 24)).astype(np.int8)
    bz = rng.integers(-5, 6, 24).astype(np.int8)
    node = h.make_node("MatMulInteger", ["a", "w", "az", "bz"], ["y"])
    graph = h.make_graph([node], "mmi", [h.make_tensor_value_info("a", T.UINT8, ["m", 64]),
                                         h.make_tensor_value_info("az", T.UINT8, [])],
                         [h.make_tensor_value_info("y", T.INT32, ["m", 24])], [nh.from_array(w, "w"), nh.from_array(bz, "bz")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    a = rng.integers(0, 256, (5, 64)).astype(np.uint8)
    az = np.array(131, np.uint8)
    with kr.Session(model) as s:
        (y,) = s.run({"a": a, "az": az})
    ref = (a.astype(np.int64) - 131) @ (w.astype(np.int64) - bz.astype(np.int64))
    assert y.dtype == np.int32 and np.array_equal(y, ref)


def qlinear_matmul_model(a_type, y_type, per_row, per_column, m=6):
    """QLinearMatMul with every parameter a graph input (so one model serves every case)."""
    from onnx import TensorProto as T
    from onnx import helper as h

    k, n = 48, 20
    ta = T.UINT8 if a_type == np.uint8 else T.INT8
    ty = T.UINT8 if y_type == np.uint8 else T.INT8
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    types = [ta, T.FLOAT, ta, T.INT8, T.FLOAT, T.INT8, T.FLOAT, ty]
    shapes_ = [[m, k], [m] if per_row else [], [m] if per_row else [], [k, n], [n] if per_column else [],
               [n] if per_column else [], [m] if per_row else [], [m] if per_row else []]
    node = h.make_node("QLinearMatMul", names, ["y"])
    graph = h.make_graph([node], "qlmm", [h.make_tensor_value_info(a, t, s) for a, t, s in zip(names, types, shapes_)],
                         [h.make_tensor_value_info("y", ty, [m, n])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
    model.ir_version = 10
    return model, shapes_


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("a_type,y_type", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
def test_qlinear_matmul_equals_the_onnx_reference(a_type, y_type, per_column):
    """Against onnx's reference evaluator, per tensor and per column of B, saturating at both ends of the
    output type. The reference takes the exact int32 product times the float32 multiplier
    a_scale * b_scale / y_scale in float64; Kiln holds the product exactly (|sums| < 2^24 here) and multiplies
    in float32, which rounds the result by at most 2^-24 of it (< 2^-16 for |y| < 256): an element moves by
    one step only when the exact value lies that close to a .5, so all but a few in a thousand are equal and
    none is more than one step off."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(7)
    model, shapes_ = qlinear_matmul_model(a_type, y_type, False, per_column)
    lo_a, hi_a = np.iinfo(a_type).min, np.iinfo(a_type).max + 1
    lo_y, hi_y = np.iinfo(y_type).min, np.iinfo(y_type).max + 1
    same = total = 0
    for trial in range(4):
        feeds = {
            "a": rng.integers(lo_a, hi_a, shapes_[0]).astype(a_type),
            "as": rng.uniform(0.005, 0.03, shapes_[1]).astype(np.float32),
            "az": rng.integers(lo_a, hi_a, shapes_[2]).astype(a_type),
            "b": rng.integers(-128, 128, shapes_[3]).astype(np.int8),
            "bs": rng.uniform(0.005, 0.03, shapes_[4]).astype(np.float32),
            "bz": rng.integers(-4, 5, shapes_[5]).astype(np.int8),
            # the first trials saturate (a small y_scale), the last stay mostly inside the range
            "ys": rng.uniform(0.04, 0.08, shapes_[6]).astype(np.float32) * (1 if trial < 2 else 100),
            "yz": rng.integers(lo_y // 2, hi_y // 2, shapes_[7]).astype(y_type),
        }
        (want,) = ReferenceEvaluator(model).run(None, feeds)
        with kr.Session(model) as s:
            (got,) = s.run(feeds)
        assert got.dtype == want.dtype and got.shape == want.shape
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1
        same += int((diff == 0).sum())
        total += diff.size
        if trial < 2:
            assert (want == lo_y).any() and (want == hi_y - 1).any()  # both ends saturated
    assert same >= 0.995 * total


def test_qlinear_matmul_refuses_per_row_parameters_by_name():
    """Per-row a_scale (which the spec names, and neither the ONNX reference nor onnxruntime runs) is a named
    refusal, not a wrong answer."""
    model, shapes_ = qlinear_matmul_model(np.uint8, np.uint8, True, False)
    feeds = {"a": np.zeros(shapes_[0], np.uint8), "as": np.ones(shapes_[1], np.float32),
             "az": np.zeros(shapes_[2], np.uint8), "b": np.zeros(shapes_[3], np.int8),
             "bs": np.ones(shapes_[4], np.float32), "bz": np.zeros(shapes_[5], np.int8),
             "ys": np.ones(shapes_[6], np.float32), "yz": np.zeros(shapes_[7], np.uint8)}
    with pytest.raises(kv.KilnError, match="per-tensor parameters for A and y"):
        with kr.Session(model) as s:
            s.run(feeds)
