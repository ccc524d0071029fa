#!/usr/bin/env python3
"""Kiln against llama.cpp on the same GGUF files, in the same session, alternating runs.

usage: bench/compare.py [--kiln build/kiln] [-p 512] [-n 128] [-r 3] [-t 2] [--cpu LEVEL] MODEL.gguf...

For every model and every repetition it runs `kiln bench -r 1 -o json` (which warms up first) and then
the same two tests through llama.cpp (the llama-cpp-python package, built from source on this machine):
prompt processing = P random tokens decoded as one batch into an empty cache, generation = N tokens decoded
one at a time from an empty cache. It prints mean +- sd of tokens/s for both engines and their ratio, the
llama.cpp version and its build's CPU features. See bench/README.md for setup.
"""
import argparse
import json
import random
import statistics
import subprocess
import sys
import time


def kiln_once(kiln, model, p, n, t, cpu, bandwidth):
    cmd = [kiln, "bench", "-m", model, "-p", str(p), "-n", str(n), "-t", str(t), "-r", "1", "-o", "json"]
    if cpu:
        cmd += ["--cpu", cpu]
    if not bandwidth:
        cmd.append("--no-bandwidth")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


class LlamaCpp:
    def __init__(self, model, p, n, t):
        import llama_cpp

        self.llm = llama_cpp.Llama(model_path=model, n_ctx=max(p, n) + 8, n_batch=max(p, 1), n_ubatch=max(p, 1),
                                   n_threads=t, n_threads_batch=t, verbose=False)
        rng = random.Random(12345)
        vocab = self.llm.n_vocab()
        self.tokens = [rng.randrange(vocab) for _ in range(max(p, n))]
        self.p, self.n = p, n
        self.run()  # warm-up

    def run(self):
        res = {}
        if self.p:
            self.llm.reset()
            t0 = time.perf_counter()
            self.llm.eval(self.tokens[: self.p])
            res["pp"] = self.p / (time.perf_counter() - t0)
        if self.n:
            self.llm.reset()
            t0 = time.perf_counter()
            for tok in self.tokens[: self.n]:
                self.llm.eval([tok])
            res["tg"] = self.n / (time.perf_counter() - t0)
        return res


def stats(xs):
    return (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0) if xs else (0.0, 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--cpu", default=None, help="force Kiln's kernel level (ref, avx2, avx512, amx)")
    a = ap.parse_args()

    import llama_cpp

    print(f"llama.cpp: llama-cpp-python {llama_cpp.__version__}")
    print("llama.cpp system info:", llama_cpp.llama_print_system_info().decode().strip())
    rows, bandwidth = [], None
    for model in a.models:
        kp, kt, lp, lt, share = [], [], [], [], []
        ref = LlamaCpp(model, a.p, a.n, a.t)
        for rep in range(a.r):
            k = kiln_once(a.kiln, model, a.p, a.n, a.t, a.cpu, bandwidth is None)
            if bandwidth is None:
                bandwidth = k.get("read_bandwidth_gbs")
            if "pp" in k:
                kp.append(k["pp"]["mean"])
            if "tg" in k:
                kt.append(k["tg"]["mean"])
                share.append(k["tg"]["decode_gbs"] / bandwidth if bandwidth else 0)
            l = ref.run()
            if "pp" in l:
                lp.append(l["pp"])
            if "tg" in l:
                lt.append(l["tg"])
            print(f"  {model} rep {rep + 1}: kiln {k.get('pp', {}).get('mean', 0):.1f} / {k.get('tg', {}).get('mean', 0):.2f}"
                  f"  llama.cpp {l.get('pp', 0):.1f} / {l.get('tg', 0):.2f}", file=sys.stderr)
        del ref
        for name, ks, ls in (("pp%d" % a.p, kp, lp), ("tg%d" % a.n, kt, lt)):
            if ks and ls:
                (km, ksd), (lm, lsd) = stats(ks), stats(ls)
                extra = f"{100 * statistics.mean(share):.0f}%" if name.startswith("tg") and share else ""
                rows.append((model.split("/")[-1], name, km, ksd, lm, lsd, km / lm, extra))
    print(f"\nread bandwidth measured by kiln bench: {bandwidth:.1f} GB/s; {a.t} threads; {a.r} alternating runs\n")
    print("| model | test | kiln t/s | llama.cpp t/s | kiln / llama.cpp | kiln decode share of bandwidth |")
    print("|---|---|---|---|---|---|")
    for m, name, km, ksd, lm, lsd, ratio, extra in rows:
        print(f"| {m} | {name} | {km:.2f} ± {ksd:.2f} | {lm:.2f} ± {lsd:.2f} | {ratio:.2f} | {extra} |")


if __name__ == "__main__":
    main()
