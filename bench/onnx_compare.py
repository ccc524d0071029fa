#!/usr/bin/env python3
"""
onnx_compare.py - Kiln's ONNX sessions against onnxruntime on the same models, inputs and threads, in one
run (issue 22, part 6; docs/performance.md, "ONNX models").

    python3 bench/onnx_compare.py                          # the default grid (below)
    python3 bench/onnx_compare.py --models mlp --batch 1 --seq 32 --threads 1 --reps 5
    python3 bench/onnx_compare.py --json results.json      # also write every sample
    python3 bench/onnx_compare.py --models gpt2 --file gpt2=DIR/gpt2-small.onnx   # an exported model
    python3 bench/onnx_compare.py --weights q8_0           # also Kiln's INT8 weights: speed and cosine to float
    python3 bench/onnx_compare.py --cpu avx2                # Kiln at the AVX2 level, on an AVX-512 machine too

Models, built here with onnx.helper (random weights from a fixed seed, float32, opset 17, batch and
sequence as dynamic dims, so one file serves every configuration and each side compiles per shape):
  mlp      BERT-base's feed-forward: MatMul 768->3072 + bias, GELU (the Erf form torch.onnx writes),
           MatMul 3072->768 + bias
  encoder  one BERT-base encoder layer, post-norm, 12 heads of 64, no attention mask: Q/K/V MatMul + bias,
           Reshape/Transpose to heads, MatMul Q.K^T, Div by 8, Softmax, MatMul with V, Transpose/Reshape
           back, output MatMul + bias, residual Add, LayerNormalization, the mlp above, residual Add,
           LayerNormalization
  NAME     with --file NAME=PATH: a model exported from PyTorch with int64 input_ids and attention_mask
           inputs (bench/make_hf_onnx.py makes GPT-2 small and BERT-base, by hand with torch), fed token ids
           in [0, 1000) and a mask of ones
Before timing, each configuration's outputs are compared (max |kiln - ort| over max |ort|; the run stops
when it is over --tol). Timing: after --warmup runs of each, --reps rounds that alternate the two
engines (the order flips every round), each sample the mean over enough runs to last >= --min-sample
seconds, taken after 0.1 s idle (sample_ms says why); the medians are reported, and the ratio ort_ms /
kiln_ms (> 1: Kiln is faster).
onnxruntime runs with intra_op_num_threads = inter_op_num_threads... = the threads given,
graph_optimization_level ORT_ENABLE_ALL, sequential execution; Kiln with the same thread count. The CPU
(model name and flags that matter) and both versions are printed with the table.

Needs the pinned onnx and onnxruntime (scripts/test-onnx.sh's venv: BUILD/venv-onnx/bin/python) and the
kiln Python package (python/) with KILN_LIBRARY naming the build's libkiln.so when not installed.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kiln  # noqa: E402

D, FF, HEADS = 768, 3072, 12


class Builder:
    """Nodes and initializers of one graph, with fresh names."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def weight(self, shape, scale):
        name = self.name("w")
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32),
                                                  name))
        return name

    def const(self, values, dtype=np.int64):
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def op(self, op_type, inputs, **attrs):
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def linear(self, x, n_in, n_out):
        return self.op("Add", [self.op("MatMul", [x, self.weight((n_in, n_out), n_in ** -0.5)]),
                               self.weight((n_out,), 0.02)])

    def gelu(self, x):  # x * 0.5 * (1 + erf(x / sqrt(2))), as torch.onnx exports nn.GELU()
        e = self.op("Erf", [self.op("Div", [x, self.const(np.sqrt(2.0), np.float32)])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [e, self.const(1.0, np.float32)])]),
                               self.const(0.5, np.float32)])

    def mlp(self, x):
        return self.linear(self.gelu(self.linear(x, D, FF)), FF, D)

    def layer_norm(self, x):
        return self.op("LayerNormalization", [x, self.weight((D,), 0.02), self.weight((D,), 0.02)], axis=-1,
                       epsilon=1e-12)

    def heads(self, x):  # [B, S, D] -> [B, H, S, D/H]
        return self.op("Transpose", [self.op("Reshape", [x, self.const([0, 0, HEADS, D // HEADS])])],
                       perm=[0, 2, 1, 3])

    def encoder(self, x):
        q, k, v = (self.heads(self.linear(x, D, D)) for _ in range(3))
        kt = self.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = self.op("Div", [self.op("MatMul", [q, kt]), self.const(8.0, np.float32)])
        ctx = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])
        merged = self.op("Reshape", [self.op("Transpose", [ctx], perm=[0, 2, 1, 3]), self.const([0, 0, D])])
        h = self.layer_norm(self.op("Add", [x, self.linear(merged, D, D)]))
        return self.layer_norm(self.op("Add", [h, self.mlp(h)]))


def make_model(kind):
    b = Builder(seed=22)
    y = b.mlp("x") if kind == "mlp" else b.encoder("x")
    b.nodes.append(helper.make_node("Identity", [y], ["y"]))
    graph = helper.make_graph(b.nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", D])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        name = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
        flags = next(line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags"))
        fam = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("cpu family"))
        mod = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model\t"))
        isa = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile") if f in flags]
        return f"{name} (family {fam} model {mod}; {', '.join(isa)}; {os.cpu_count()} logical CPUs)"
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def ort_session(blob, threads):
    """onnxruntime as the comparisons run it: `threads` intra-op threads, sequential, every graph optimization."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])


def make_feed(exported, batch, seq):
    """The inputs of one configuration: token ids in [0, 1000) and a mask of ones for an exported HF model,
    else x [batch, seq, D] of normal floats; from a seed of the shape, so every engine gets the same."""
    rng = np.random.default_rng(batch * 1000 + seq)
    if exported:
        return {"input_ids": rng.integers(0, 1000, (batch, seq), dtype=np.int64),
                "attention_mask": np.ones((batch, seq), np.int64)}
    return {"x": rng.standard_normal((batch, seq, D)).astype(np.float32)}


SETTLE_S = 0.1  # idle time before each sample (see sample_ms)


def sample_ms(run, min_seconds):
    """Mean milliseconds per run over enough runs to last min_seconds, after SETTLE_S of idling: the two
    engines share this process, and onnxruntime's pool threads spin for a while after each of its runs
    (session.intra_op.allow_spinning, on by default), so a Kiln run that starts right after onnxruntime's
    finds a core taken (measured on BERT-base at 2 threads on 2 cores: 371 ms right after an onnxruntime
    run, 337 ms after another Kiln run or after 50 ms idle, 343 ms with onnxruntime's spinning off, which
    itself moved onnxruntime by 2%). Kiln's threads sleep after a few microseconds, so the settling costs
    onnxruntime nothing; it only keeps each engine's sample from paying for the other's threads."""
    time.sleep(SETTLE_S)
    n, t0 = 0, time.perf_counter()
    while True:
        run()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return elapsed * 1e3 / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,encoder")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--seq", default="32,128,512")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5, help="alternating rounds (medians over these)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--min-sample", type=float, default=0.3, help="seconds each sample lasts at least")
    ap.add_argument("--tol", type=float, default=1e-4, help="max |kiln - ort| / max |ort| allowed")
    ap.add_argument("--json", help="write every sample here")
    ap.add_argument("--weights", choices=["float", "q8_0"], default="float",
                    help="q8_0: also time Kiln with its INT8 weights (kiln.weights), against Kiln's float")
    ap.add_argument("--file", action="append", default=[], metavar="NAME=PATH",
                    help="an exported model with input_ids and attention_mask, run as model NAME")
    ap.add_argument("--cpu", metavar="LEVEL",
                    help="Kiln's CPU kernel level (ref, avx2, avx512, amx, neon; default: the best here), to "
                         "measure a level on a machine that has a higher one (onnxruntime picks its own)")
    a = ap.parse_args()
    level = kiln.set_cpu_level(a.cpu)
    files = dict(f.split("=", 1) for f in a.file)
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    print(f"CPU: {cpu_name()}")
    print(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}, numpy {np.__version__}; kiln {kiln.__file__}, "
          f"CPU level {level}")
    print(f"{a.reps} alternating rounds, samples >= {a.min_sample} s, medians; ratio = ort / kiln (> 1: Kiln faster)")
    print()
    q8 = a.weights == "q8_0"
    if q8:
        print("| model | batch | seq | threads | kiln ms | ort ms | ratio | max rel err | kiln int8 ms | int8 speed-up | "
              "int8 cosine |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
    else:
        print("| model | batch | seq | threads | kiln ms | ort ms | ratio | max rel err |")
        print("|---|---|---|---|---|---|---|---|")
    records = []
    for kind in a.models.split(","):
        blob = open(files[kind], "rb").read() if kind in files else make_model(kind)
        for threads in ints(a.threads):
            ref = ort_session(blob, threads)
            ko = kiln.SessionOptions()
            ko.intra_op_num_threads = threads
            ks = kiln.InferenceSession(blob, ko)
            if q8:
                ko.add_session_config_entry("kiln.weights", "q8_0")
                kq = kiln.InferenceSession(blob, ko)
            for batch in ints(a.batch):
                for seq in ints(a.seq):
                    feed = make_feed(kind in files, batch, seq)
                    want = ref.run(None, feed)[0]
                    got = ks.run(None, feed)[0]
                    err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
                    if not err <= a.tol:
                        sys.exit(f"{kind} batch {batch} seq {seq}: Kiln's output differs from onnxruntime's by "
                                 f"{err:.3g} of its scale (--tol {a.tol})")
                    runs = [lambda: ks.run(None, feed), lambda: ref.run(None, feed)]  # noqa: E731
                    if q8:
                        gq = kq.run(None, feed)[0].astype(np.float64).ravel()
                        w64 = want.astype(np.float64).ravel()
                        cos = float(gq @ w64 / np.linalg.norm(gq) / np.linalg.norm(w64))
                        runs.append(lambda: kq.run(None, feed))  # noqa: E731
                    for _ in range(a.warmup):
                        for run in runs:
                            run()
                    ms = [[] for _ in runs]
                    for r in range(a.reps):  # each round in another order: rotated, and reversed every other
                        order = list(range(len(runs)))[r % len(runs):] + list(range(len(runs)))[:r % len(runs)]
                        for which in (order if r % 2 == 0 else order[::-1]):
                            ms[which].append(sample_ms(runs[which], a.min_sample))
                    km, om = statistics.median(ms[0]), statistics.median(ms[1])
                    line = f"| {kind} | {batch} | {seq} | {threads} | {km:.2f} | {om:.2f} | {om / km:.2f} | {err:.1e} |"
                    rec = {"model": kind, "batch": batch, "seq": seq, "threads": threads, "kiln_ms": ms[0],
                           "ort_ms": ms[1], "ratio": om / km, "max_rel_err": err}
                    if q8:
                        qm = statistics.median(ms[2])
                        line += f" {qm:.2f} | {km / qm:.2f} | {cos:.5f} |"
                        rec.update({"kiln_int8_ms": ms[2], "int8_speedup": km / qm, "int8_cosine": cos})
                    print(line, flush=True)
                    records.append(rec)
            ks.close() if hasattr(ks, "close") else None
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_name(), "onnxruntime": ort.__version__, "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
