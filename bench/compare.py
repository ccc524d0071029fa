#!/usr/bin/env python3
"""Kiln against llama.cpp on the same GGUF files, in the same session, alternating runs.

usage: bench/compare.py [--kiln build/kiln] [-p 512] [-n 128] [-r 3] [-t 2] [--cpu LEVEL] MODEL.gguf...
       bench/compare.py --batched [--llama-batched-bench PATH] [-npp 128] [-ntg 128] [-npl 1,2,4,8,16]
                        [-b 512] [-r 1] [-t 2] [--cpu LEVEL] MODEL.gguf...

For every model and every repetition it runs `kiln bench -r 1 -o json` (which warms up first) and then
the same two tests through llama.cpp (the llama-cpp-python package, built from source on this machine):
prompt processing = P random tokens decoded as one batch into an empty cache, generation = N tokens decoded
one at a time from an empty cache. It prints mean +- sd of tokens/s for both engines and their ratio, the
llama.cpp version and its build's CPU features. See bench/README.md for setup.

With --batched it runs `kiln batched-bench --json` and llama.cpp's `llama-batched-bench --output-format
jsonl` instead, on the same file with the same -npp/-ntg/-npl lists, n_batch (-b, also llama.cpp's -ub)
and threads, alternating the engines R times, and prints per case the S_PP and S_TG (tokens/s over all
sequences) of both and the ratio kiln / llama.cpp. llama-batched-bench is built from the llama.cpp sources
vendored in llama-cpp-python (bench/README.md); --llama-args passes more options to it (e.g. "-kvu").
"""
import argparse
import json
import os
import random
import shlex
import shutil
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


def jsonl(text):
    """The JSON objects of the lines of text that are one (llama.cpp also logs plain lines)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            rows.append(json.loads(line))
    return rows


def batched_kiln(a, model):
    cmd = [a.kiln, "batched-bench", "-m", model, "-npp", a.npp, "-ntg", a.ntg, "-npl", a.npl, "-b", str(a.b),
           "-t", str(a.t), "--json"]
    if a.cpu:
        cmd += ["--cpu", a.cpu]
    return jsonl(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def batched_llama(a, model):
    ints = lambda s: [int(x) for x in s.split(",")]
    n_ctx = max(pl * (pp + tg) for pp in ints(a.npp) for tg in ints(a.ntg) for pl in ints(a.npl))
    cmd = [a.llama_batched_bench, "-m", model, "-c", str(n_ctx), "-b", str(a.b), "-ub", str(a.b), "-npp", a.npp,
           "-ntg", a.ntg, "-npl", a.npl, "-t", str(a.t), "-tb", str(a.t), "--output-format", "jsonl"]
    cmd += shlex.split(a.llama_args)
    return jsonl(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def batched(a):
    exe = shutil.which(a.llama_batched_bench) or a.llama_batched_bench
    if not os.access(exe, os.X_OK):
        sys.exit(f"compare.py: llama-batched-bench not found at '{a.llama_batched_bench}' (see bench/README.md "
                 "for how to build it; pass --llama-batched-bench PATH)")
    a.llama_batched_bench = exe
    out = subprocess.run([exe, "--version"], capture_output=True, text=True)
    version = next((l for l in (out.stdout + out.stderr).splitlines() if l.startswith("version:")), "version: ?")
    print(f"llama.cpp: llama-batched-bench {version[len('version:'):].strip()} ({exe})")
    print(f"cases: -npp {a.npp} -ntg {a.ntg} -npl {a.npl}; n_batch {a.b}; {a.t} threads; {a.r} alternating runs"
          + (f"; llama.cpp also {a.llama_args}" if a.llama_args else "") + "\n")
    print("| model | PP | TG | B | kiln S_PP t/s | llama.cpp S_PP t/s | S_PP kiln / llama.cpp "
          "| kiln S_TG t/s | llama.cpp S_TG t/s | S_TG kiln / llama.cpp |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model in a.models:
        got = {}  # (pp, tg, pl) -> {"kiln": {"pp": [...], "tg": [...]}, "llama": ...}
        for rep in range(a.r):
            for engine, run in (("kiln", batched_kiln), ("llama", batched_llama)):
                for row in run(a, model):
                    case = got.setdefault((row["pp"], row["tg"], row["pl"]), {"kiln": {}, "llama": {}})
                    case[engine].setdefault("pp", []).append(row["speed_pp"])
                    case[engine].setdefault("tg", []).append(row["speed_tg"])
                    print(f"  {model} rep {rep + 1} {engine}: PP {row['pp']} TG {row['tg']} B {row['pl']}: "
                          f"S_PP {row['speed_pp']:.1f} S_TG {row['speed_tg']:.2f}", file=sys.stderr)
        for (pp, tg, pl), case in sorted(got.items()):
            k, l = case["kiln"], case["llama"]
            if not k or not l:
                continue
            kpp, lpp = statistics.mean(k["pp"]), statistics.mean(l["pp"])
            ktg, ltg = statistics.mean(k["tg"]), statistics.mean(l["tg"])
            print(f"| {model.split('/')[-1]} | {pp} | {tg} | {pl} | {kpp:.2f} | {lpp:.2f} | {kpp / lpp:.2f} "
                  f"| {ktg:.2f} | {ltg:.2f} | {ktg / ltg:.2f} |")


def stats(xs):
    return (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0) if xs else (0.0, 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=None, help="repetitions (default 3; 1 with --batched)")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--cpu", default=None, help="force Kiln's kernel level (ref, avx2, avx512, amx)")
    ap.add_argument("--batched", action="store_true", help="kiln batched-bench against llama-batched-bench")
    ap.add_argument("--llama-batched-bench", default=os.environ.get("LLAMA_BATCHED_BENCH", "llama-batched-bench"),
                    help="the llama-batched-bench executable (default: $LLAMA_BATCHED_BENCH, else on PATH)")
    ap.add_argument("--llama-args", default="", help="more options for llama-batched-bench, e.g. '-kvu'")
    ap.add_argument("-npp", default="128", help="--batched: prompt tokens per sequence, a list")
    ap.add_argument("-ntg", default="128", help="--batched: generated tokens per sequence, a list")
    ap.add_argument("-npl", default="1,2,4,8,16", help="--batched: parallel sequences, a list")
    ap.add_argument("-b", type=int, default=512, help="--batched: n_batch (and llama.cpp's n_ubatch)")
    a = ap.parse_args()
    if a.r is None:
        a.r = 1 if a.batched else 3
    if a.batched:
        return batched(a)

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
