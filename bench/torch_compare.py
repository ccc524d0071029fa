#!/usr/bin/env python3
"""
torch_compare.py - Kiln's ONNX sessions against PyTorch eager, torch.compile and onnxruntime on the same models,
weights, inputs and threads, in one process (issue 22, part 6; docs/performance.md, "ONNX models"). By hand
only: torch is never installed by the project's scripts nor run in CI. In a venv with torch, transformers,
onnx, onnxruntime and numpy (the one bench/make_hf_onnx.py runs in):

    KILN_LIBRARY=build/libkiln.so /work/torchvenv/bin/python bench/torch_compare.py \\
        --models mlp,encoder,bert,gpt2 --file gpt2=DIR/gpt2-small.onnx --file bert=DIR/bert-base.onnx \\
        --batch 1 --seq 32,128,512 --threads 1,2 --reps 3

The models are bench/onnx_compare.py's, each written the way a PyTorch user writes it:
  mlp      nn.Linear, F.gelu (exact), nn.Linear, with the ONNX file's weights
  encoder  the post-norm BERT-base layer of onnx_compare.py: three nn.Linear, the heads split by view/transpose,
           F.scaled_dot_product_attention, the output nn.Linear, F.layer_norm twice, the mlp; the ONNX file's
           weights
  gpt2, bert  transformers' GPT2Model and BertModel (no pooler) built as bench/make_hf_onnx.py builds them
           (torch.manual_seed(0), default configs), so their weights are the exported file's; attention is
           transformers' default ("sdpa", PyTorch's fused attention: the fastest PyTorch form, where the file
           was exported from the "eager" form, which computes the same function)
Before timing, every engine's output is compared with onnxruntime's (max |x - ort| / max |ort| <= --tol; the run
stops otherwise), which is also what shows that the PyTorch models hold the file's weights. torch.compile is
the default inductor backend with dynamic=False, compiled in the warm-up of each shape (its compile time is not
timed; --no-compile leaves it out). Timing as onnx_compare.py: --reps rounds that rotate the engines' order,
each sample the mean over runs lasting >= --min-sample seconds after 0.1 s idle; medians; ratios
engine_ms / kiln_ms (> 1: Kiln is faster). torch runs under torch.inference_mode() with
torch.set_num_threads(threads); onnxruntime as in onnx_compare.py.
"""
import argparse
import os
import statistics
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_compare as oc  # noqa: E402  (also puts python/ on the path for kiln)
import kiln  # noqa: E402

D, FF, HEADS = oc.D, oc.FF, oc.HEADS


def weights_of(blob):
    """The float weights of an onnx_compare.py model, in the order its Builder made them."""
    model = onnx.load_from_string(blob)
    return [torch.from_numpy(numpy_helper.to_array(i).copy()) for i in model.graph.initializer
            if i.name.startswith("w_")]


def linear(w, b):
    lin = torch.nn.Linear(w.shape[0], w.shape[1])
    with torch.no_grad():
        lin.weight.copy_(w.T)  # ONNX MatMul weights are [in, out]
        lin.bias.copy_(b)
    return lin


class MLP(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.up, self.down = linear(w[0], w[1]), linear(w[2], w[3])

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Encoder(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.q, self.k, self.v, self.o = (linear(w[i], w[i + 1]) for i in (0, 2, 4, 6))
        self.ln1 = (w[8], w[9])
        self.mlp = MLP(w[10:14])
        self.ln2 = (w[14], w[15])

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (lin(x).view(b, s, HEADS, D // HEADS).transpose(1, 2) for lin in (self.q, self.k, self.v))
        ctx = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, D)
        h = F.layer_norm(x + self.o(ctx), (D,), *self.ln1, eps=1e-12)
        return F.layer_norm(h + self.mlp(h), (D,), *self.ln2, eps=1e-12)


class HF(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def torch_model(kind, blob):
    if kind == "mlp":
        return MLP(weights_of(blob))
    if kind == "encoder":
        return Encoder(weights_of(blob))
    import transformers

    torch.manual_seed(0)  # as bench/make_hf_onnx.py: GPT-2 first, then BERT, from the same seed
    gpt2 = transformers.GPT2Model(transformers.GPT2Config())
    bert = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=False)
    return HF({"gpt2": gpt2, "bert": bert}[kind])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,encoder")
    ap.add_argument("--batch", default="1")
    ap.add_argument("--seq", default="32,128,512")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--min-sample", type=float, default=0.3)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--file", action="append", default=[], metavar="NAME=PATH",
                    help="gpt2=PATH, bert=PATH: the files bench/make_hf_onnx.py wrote")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    a = ap.parse_args()
    files = dict(f.split("=", 1) for f in a.file)
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    for attr in ("cache_size_limit", "recompile_limit"):  # one compile per shape, never a silent eager fallback
        if hasattr(torch._dynamo.config, attr):
            setattr(torch._dynamo.config, attr, 256)
    names = ["kiln", "ort", "torch"] + ([] if a.no_compile else ["compile"])
    print(f"CPU: {oc.cpu_name()}")
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}, numpy "
          f"{np.__version__}; kiln {kiln.__file__}, CPU level {kiln.set_cpu_level(None)}")
    print(f"{a.reps} rotating rounds, samples >= {a.min_sample} s, medians; ratios = engine ms / kiln ms (> 1: Kiln "
          f"faster)\n")
    print("| model | batch | seq | threads | " + " | ".join(f"{n} ms" for n in names) + " | " +
          " | ".join(f"{n} / kiln" for n in names[1:]) + " | max rel err (kiln, torch) |")
    print("|---" * (4 + 2 * len(names) - 1 + 1) + "|")
    for kind in a.models.split(","):
        if kind in ("gpt2", "bert") and kind not in files:
            sys.exit(f"{kind}: give --file {kind}=PATH (bench/make_hf_onnx.py writes it)")
        blob = open(files[kind], "rb").read() if kind in files else oc.make_model(kind)
        tm = torch_model(kind, blob).eval()
        for threads in ints(a.threads):
            torch.set_num_threads(threads)
            ref = oc.ort_session(blob, threads)
            ko = kiln.SessionOptions()
            ko.intra_op_num_threads = threads
            ks = kiln.InferenceSession(blob, ko)
            for batch in ints(a.batch):
                for seq in ints(a.seq):
                    feed = oc.make_feed(kind in files, batch, seq)
                    targs = [torch.from_numpy(v) for v in feed.values()]
                    compiled = None if a.no_compile else torch.compile(tm, dynamic=False)

                    def run_torch(m=tm):
                        with torch.inference_mode():
                            return m(*targs)

                    runs = {"kiln": lambda: ks.run(None, feed), "ort": lambda: ref.run(None, feed), "torch": run_torch}
                    if compiled is not None:
                        runs["compile"] = lambda: run_torch(compiled)
                    want = ref.run(None, feed)[0]
                    scale = max(float(np.max(np.abs(want))), 1e-30)
                    errs = {}
                    for n in names:
                        got = runs[n]()
                        got = got[0] if n in ("kiln", "ort") else got.detach().numpy()
                        errs[n] = float(np.max(np.abs(got - want)) / scale)
                        if not errs[n] <= a.tol:
                            sys.exit(f"{kind} batch {batch} seq {seq}: {n}'s output differs from onnxruntime's by "
                                     f"{errs[n]:.3g} of its scale (--tol {a.tol})")
                    for _ in range(a.warmup):
                        for n in names:
                            runs[n]()
                    ms = {n: [] for n in names}
                    for r in range(a.reps):
                        order = names[r % len(names):] + names[:r % len(names)]
                        for n in (order if r % 2 == 0 else order[::-1]):
                            ms[n].append(oc.sample_ms(runs[n], a.min_sample))
                    med = {n: statistics.median(ms[n]) for n in names}
                    print(f"| {kind} | {batch} | {seq} | {threads} | " + " | ".join(f"{med[n]:.2f}" for n in names) +
                          " | " + " | ".join(f"{med[n] / med['kiln']:.2f}" for n in names[1:]) +
                          f" | {errs['kiln']:.1e}, {errs['torch']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
