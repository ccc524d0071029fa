#!/usr/bin/env python3
"""compare_llama_cpp.py - compare `kiln quantize` with llama.cpp's quantizer on the same model.

For each mix, quantize IN.gguf with llama.cpp (llama_cpp.llama_model_quantize, no importance matrix) and
with Kiln, then for every tensor report both chosen types and both RMSEs against the original values
(all dequantized with gguf.quants), and check that llama.cpp loads Kiln's file. Prints a table per mix
and a summary line: tensors whose type differs, and the largest per-tensor RMSE ratio Kiln / llama.cpp.

    pip install gguf numpy llama-cpp-python
    python3 tools/compare_llama_cpp.py --kiln build/kiln IN.gguf [--mixes Q4_K_M,Q8_0] [--workdir /tmp/x]

Exit status 1 when a type differs, an RMSE ratio exceeds 1.02, or llama.cpp fails to load a Kiln file.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, quants

MIXES = {"Q4_0": 2, "Q8_0": 7, "Q2_K": 10, "Q3_K_M": 12, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}


def tensors(path):
    """name -> (type name, float32 values) for every tensor of a GGUF file."""
    out = {}
    for t in GGUFReader(path).tensors:
        vals = quants.dequantize(t.data, t.tensor_type)
        out[t.name] = (t.tensor_type.name, np.asarray(vals, dtype=np.float32).ravel())
    return out


def llama_cpp_quantize(src, dst, ftype):
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p)
    if rc != 0:
        raise RuntimeError("llama_model_quantize failed with %d" % rc)


def llama_cpp_loads(path):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, verbose=False)
    out = llm("Once upon a time", max_tokens=8, temperature=0)
    return out["choices"][0]["text"]


def rmse(a, b):
    return float(np.sqrt(np.mean((a.astype(np.float64) - b) ** 2)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--mixes", default=",".join(MIXES))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--quiet", action="store_true", help="print only the summary line of each mix")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="kiln-quant-")
    os.makedirs(work, exist_ok=True)
    orig = tensors(args.model)
    failed = False
    for mix in args.mixes.split(","):
        ours, theirs = os.path.join(work, "kiln-%s.gguf" % mix), os.path.join(work, "llama-%s.gguf" % mix)
        subprocess.run([args.kiln, "quantize", args.model, ours, mix], check=True, stderr=subprocess.DEVNULL)
        llama_cpp_quantize(args.model, theirs, MIXES[mix])
        k, l = tensors(ours), tensors(theirs)
        type_diffs, worst = 0, (0.0, "")
        for name, (_, x) in orig.items():
            kt, kv = k[name]
            lt, lv = l[name]
            rk, rl = rmse(kv, x), rmse(lv, x)
            ratio = rk / rl if rl > 0 else (1.0 if rk == 0 else float("inf"))
            type_diffs += kt != lt
            if ratio > worst[0]:
                worst = (ratio, name)
            if not args.quiet:
                print("%-7s %-28s kiln %-7s llama.cpp %-7s rmse %.6g / %.6g = %.4f%s" % (
                    mix, name, kt, lt, rk, rl, ratio, "  TYPE DIFFERS" if kt != lt else ""))
        try:
            text = llama_cpp_loads(ours)
            load = "llama.cpp loads it: %r" % text
        except Exception as e:  # noqa: BLE001 - report any loader failure
            load, failed = "llama.cpp FAILED to load it: %s" % e, True
        print("%-7s %d tensors, %d with a different type, worst RMSE ratio %.4f (%s); %s" % (
            mix, len(orig), type_diffs, worst[0], worst[1], load))
        failed |= type_diffs > 0 or worst[0] > 1.02
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
