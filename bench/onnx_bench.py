"""onnx_bench.py - an ONNX encoder block (the models of tests/onnx, scaled up) run by Kiln
(kiln.InferenceSession) and by onnxruntime (all graph optimizations, the same thread count) on the same
inputs; prints the median time per run of each and their ratio. A first step towards issue 22's benchmarks
(docs/onnx.md); run by hand in the ONNX tests' venv with the built library:

    KILN_LIBRARY=build/libkiln.so build/venv-onnx/bin/python bench/onnx_bench.py [--threads 1,2] [--reps 20]

The block: LayerNormalization, self-attention of H heads (Q, K, V and output projections as MatMul with
weights, Reshape/Transpose to heads, MatMul of two activations, Div by sqrt(d), Softmax), a residual Add,
then LayerNormalization, a Gemm-free FFN (MatMul, Add bias, Gelu exact, MatMul, Add bias) and a residual.
"""
import argparse
import math
import os
import pathlib
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
import kiln  # noqa: E402

RNG = np.random.default_rng(0)


def w(name, *shape):
    return nh.from_array((RNG.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32), name)


def encoder_block(d=256, heads=4, ffn=1024):
    hd = d // heads
    nodes = [
        h.make_node("LayerNormalization", ["x", "ln1_s", "ln1_b"], ["ln1"], axis=-1),
        h.make_node("MatMul", ["ln1", "wq"], ["q"]), h.make_node("MatMul", ["ln1", "wk"], ["k"]),
        h.make_node("MatMul", ["ln1", "wv"], ["v"]),
        h.make_node("Reshape", ["q", "heads"], ["q4"]), h.make_node("Reshape", ["k", "heads"], ["k4"]),
        h.make_node("Reshape", ["v", "heads"], ["v4"]),
        h.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        h.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        h.make_node("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
        h.make_node("MatMul", ["qt", "kt"], ["sc"]), h.make_node("Div", ["sc", "sqrt_d"], ["scs"]),
        h.make_node("Softmax", ["scs"], ["p"], axis=-1), h.make_node("MatMul", ["p", "vt"], ["ctx"]),
        h.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["ctx_t", "merge"], ["attn"]), h.make_node("MatMul", ["attn", "wo"], ["o"]),
        h.make_node("Add", ["x", "o"], ["r1"]),
        h.make_node("LayerNormalization", ["r1", "ln2_s", "ln2_b"], ["ln2"], axis=-1),
        h.make_node("MatMul", ["ln2", "w1"], ["f1"]), h.make_node("Add", ["f1", "b1"], ["f1b"]),
        h.make_node("Gelu", ["f1b"], ["g"]), h.make_node("MatMul", ["g", "w2"], ["f2"]),
        h.make_node("Add", ["f2", "b2"], ["f2b"]), h.make_node("Add", ["r1", "f2b"], ["y"]),
    ]
    inits = [nh.from_array(np.ones(d, np.float32), "ln1_s"), nh.from_array(np.zeros(d, np.float32), "ln1_b"),
             nh.from_array(np.ones(d, np.float32), "ln2_s"), nh.from_array(np.zeros(d, np.float32), "ln2_b"),
             w("wq", d, d), w("wk", d, d), w("wv", d, d), w("wo", d, d), w("w1", d, ffn), w("w2", ffn, d),
             nh.from_array(np.zeros(ffn, np.float32), "b1"), nh.from_array(np.zeros(d, np.float32), "b2"),
             nh.from_array(np.array([0, 0, heads, hd], np.int64), "heads"),
             nh.from_array(np.array([0, 0, -1], np.int64), "merge"),
             nh.from_array(np.array(math.sqrt(hd), np.float32), "sqrt_d")]
    graph = h.make_graph(nodes, "encoder_block", [h.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", d])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", d])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 20)])
    model.ir_version = 9
    return model.SerializeToString()


def median_seconds(fn, reps):
    fn()  # warm-up (compiles the shape)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--shapes", default="1x32,1x128,8x32,8x128")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    model = encoder_block()
    print("threads  batch x seq   kiln ms   onnxruntime ms   kiln/ort time   max |diff|")
    for threads in [int(t) for t in args.threads.split(",")]:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        ref = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        ko = kiln.SessionOptions()
        ko.intra_op_num_threads = threads
        mine = kiln.InferenceSession(model, ko)
        for shape in args.shapes.split(","):
            b, s = (int(v) for v in shape.split("x"))
            x = RNG.standard_normal((b, s, 256)).astype(np.float32)
            tk = median_seconds(lambda: mine.run(None, {"x": x}), args.reps)
            to = median_seconds(lambda: ref.run(None, {"x": x}), args.reps)
            diff = np.max(np.abs(mine.run(None, {"x": x})[0] - ref.run(None, {"x": x})[0]))
            print(f"{threads:7d}  {b:5d} x {s:<4d}  {tk * 1e3:8.2f}  {to * 1e3:15.2f}  {tk / to:14.2f}  {diff:10.2e}")
        mine.close()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
