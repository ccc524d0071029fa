#!/usr/bin/env python3
"""Kiln against llama.cpp on the same GGUF files, in the same session, alternating runs.

usage: bench/compare.py [--kiln build/kiln] [--llama-bench PATH] [-p 512] [-n 128] [-r 7] [-t 2] [--cpu LEVEL]
                        MODEL.gguf...
       bench/compare.py --python [same options] MODEL.gguf...
       bench/compare.py --spec lookup|draft --prompt-file F [--draft D.gguf] [--draft-max 8] [-n 128] [-r 5]
                        [-t 2] [--llama-lookup PATH] [--llama-speculative PATH] MODEL.gguf...
       bench/compare.py --batched [--llama-batched-bench PATH] [-npp 128] [-ntg 128] [-npl 1,2,4,8,16]
                        [-b 512] [-r 1] [-t 2] [--cpu LEVEL] MODEL.gguf...

By default, for every model and every repetition it runs `kiln bench -r 1 -o json` and llama.cpp's own
`llama-bench -r 1 -o json` (each warms up first, each loads the model itself), the two in alternating order
(kiln first on odd repetitions, llama-bench first on even ones, so that a drift in the machine's load
favours neither). prompt processing = P random tokens decoded as one batch into an empty cache, generation
= N tokens decoded one at a time. It prints, per model and test, the median tokens/s of both engines with
their spread (min-max over the R runs), the ratio of the medians and the range of the per-repetition
ratios, the decode bandwidth of both engines as a share of the read bandwidth kiln bench's probe found in
the same repetition (median of the per-run shares), and the 1-minute load average seen at the runs. The
probe runs on every repetition (about 2 s), right before Kiln's runs: on a shared host the memory bandwidth
can move by half within a minute, so a share against one probe at the start says more about the drift
than about the engine. llama.cpp's decode bandwidth is its tokens/s times the bytes Kiln reads per token
(the same file's weights). The header names
the CPU (/proc/cpuinfo's model name), the llama-bench build and the load average at the start. R defaults
to 7; a ratio on a noisy machine needs that many. The header also records the instruction-set options the
llama.cpp build was configured with (GGML_NATIVE, GGML_AVX2, GGML_AVX512..., read from the CMakeCache.txt
of the build that holds llama-bench) and Kiln's kernel level: `--cpu avx2` forces Kiln to the AVX2 level
and, paired with a llama.cpp configured for AVX2 only (bench/README.md), measures the AVX2 ratio on any
x86 machine, an AVX-512 one included; it warns when that llama.cpp build may use AVX-512. llama-bench is built from the llama.cpp sources vendored
in llama-cpp-python (bench/README.md); --llama-bench PATH or $LLAMA_BENCH names it.

With --python it measures llama.cpp through the llama-cpp-python package instead (built from source on
this machine; the model loaded once, the same two tests timed around Llama.eval).

With --batched it runs `kiln batched-bench --json` and llama.cpp's `llama-batched-bench --output-format
jsonl` instead, on the same file with the same -npp/-ntg/-npl lists, n_batch (-b, also llama.cpp's -ub)
and threads, alternating the engines R times, and prints per case the S_PP and S_TG (tokens/s over all
sequences) of both and the ratio kiln / llama.cpp. llama-batched-bench is built from the llama.cpp sources
vendored in llama-cpp-python (bench/README.md); --llama-args passes more options to it (e.g. "-kvu").

With --spec lookup|draft it compares speculative decoding: `kiln bench --lookup | --model-draft` against
llama.cpp's llama-lookup | llama-speculative on the same files and prompt (bench/compare_spec.py).
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


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def llama_build_flags(exe):
    """The ggml instruction-set options llama.cpp was configured with, from the CMakeCache.txt of the build
    that holds exe (build/bin/llama-bench -> build/CMakeCache.txt), as "NAME=VALUE" strings; [] if absent."""
    cache = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(exe))), "CMakeCache.txt")
    names = ("GGML_NATIVE", "GGML_AVX", "GGML_AVX2", "GGML_AVX_VNNI", "GGML_FMA", "GGML_F16C", "GGML_BMI2",
             "GGML_AVX512", "GGML_AVX512_VNNI", "GGML_AVX512_BF16", "GGML_AMX_INT8", "CMAKE_C_COMPILER")
    flags = {}
    try:
        with open(cache) as f:
            for line in f:
                name, _, value = line.strip().partition("=")
                name = name.split(":", 1)[0]
                if name in names:
                    flags[name] = value
    except OSError:
        return []
    return [f"{n}={flags[n]}" for n in names if n in flags]


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def check_level(a, flags):
    """With --cpu avx2, say whether llama.cpp is held to the same level: a native build on a CPU with AVX-512
    would compare Kiln's AVX2 kernels against llama.cpp's AVX-512 ones."""
    if a.cpu != "avx2":
        return
    native = "GGML_NATIVE=ON" in flags or not flags
    if any(f.startswith("GGML_AVX512") and f.endswith("=ON") for f in flags) or \
            (native and any(f.startswith("avx512") for f in cpu_flags())):
        print("WARNING: --cpu avx2, but this llama.cpp build may use AVX-512 here (configure it with "
              "-DGGML_NATIVE=OFF -DGGML_AVX2=ON ...: bench/README.md); the ratios are not AVX2 against AVX2")


def load1():
    return os.getloadavg()[0]


def llama_bench_once(a, model):
    cmd = [a.llama_bench, "-m", model, "-p", str(a.p), "-n", str(a.n), "-t", str(a.t), "-r", "1", "-o", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res = {}
    for row in json.loads(out):
        if row["n_prompt"] and not row["n_gen"]:
            res["pp"] = row["avg_ts"]
        elif row["n_gen"] and not row["n_prompt"]:
            res["tg"] = row["avg_ts"]
    return res


def spread(xs):
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def field(a):
    """Kiln against llama-bench: medians over a.r alternating runs, with the spread and the load."""
    exe = shutil.which(a.llama_bench) or a.llama_bench
    if not os.access(exe, os.X_OK):
        sys.exit(f"compare.py: llama-bench not found at '{a.llama_bench}' (see bench/README.md for how to build "
                 "it; pass --llama-bench PATH or set $LLAMA_BENCH)")
    a.llama_bench = exe
    out = subprocess.run([exe, "--version"], capture_output=True, text=True)
    version = next((l for l in (out.stdout + out.stderr).splitlines() if l.startswith("version:")), "version: ?")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; load average at start "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"llama.cpp: llama-bench {version[len('version:'):].strip()} ({exe})")
    flags = llama_build_flags(exe)
    print("llama.cpp build: " + (" ".join(flags) if flags else "no CMakeCache.txt beside the build (flags unknown)"))
    print(f"Kiln kernel level: {a.cpu or 'the best this CPU has'}")
    check_level(a, flags)
    print(f"{a.t} threads; {a.r} alternating runs per model; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    rows, probes, hows = [], [], []
    for model in a.models:
        got = {"pp": ([], []), "tg": ([], [])}  # test -> (kiln runs, llama.cpp runs), paired by repetition
        decode, kshare, lshare, loads = [], [], [], []
        for rep in range(a.r):
            order = ("kiln", "llama") if rep % 2 == 0 else ("llama", "kiln")
            res = {}
            for engine in order:
                loads.append(load1())
                if engine == "kiln":
                    res[engine] = kiln_once(a.kiln, model, a.p, a.n, a.t, a.cpu, a.n > 0)
                else:
                    res[engine] = llama_bench_once(a, model)
            k, l = res["kiln"], res["llama"]
            probe = k.get("read_bandwidth_gbs", 0)
            if probe:
                probes.append(probe)
                hows.append(k.get("read_bandwidth_pattern", ""))
            for test in ("pp", "tg"):
                if test in k and test in l:
                    got[test][0].append(k[test]["mean"])
                    got[test][1].append(l[test])
            if "tg" in k:
                decode.append(k["tg"]["decode_gbs"])
                if probe:
                    kshare.append(k["tg"]["decode_gbs"] / probe)
                    if "tg" in l:
                        lshare.append(l["tg"] * k["bytes_per_token"] / 1e9 / probe)
            print(f"  {model} rep {rep + 1} ({'/'.join(order)}, load {loads[-1]:.2f}): kiln "
                  f"{k.get('pp', {}).get('mean', 0):.1f} / {k.get('tg', {}).get('mean', 0):.2f}  llama.cpp "
                  f"{l.get('pp', 0):.1f} / {l.get('tg', 0):.2f}", file=sys.stderr)
        for test, n in (("pp", a.p), ("tg", a.n)):
            ks, ls = got[test]
            if not ks:
                continue
            ratios = [x / y for x, y in zip(ks, ls)]
            dec = lsh = ""
            if test == "tg" and decode:
                dec = f"{statistics.median(decode):.1f}"
                if kshare:
                    dec += f" ({100 * statistics.median(kshare):.0f}%, {100 * min(kshare):.0f}-{100 * max(kshare):.0f})"
                if lshare:
                    lsh = f"{100 * statistics.median(lshare):.0f}% ({100 * min(lshare):.0f}-{100 * max(lshare):.0f})"
            rows.append((model.split("/")[-1], f"{test}{n}", spread(ks), spread(ls),
                         statistics.median(ks) / statistics.median(ls), min(ratios), max(ratios), dec, lsh,
                         f"{min(loads):.2f}-{max(loads):.2f}"))
    if probes:
        common = max(set(hows), key=hows.count)
        print(f"read bandwidth found by kiln bench's probe, per repetition: median {statistics.median(probes):.1f} "
              f"GB/s ({min(probes):.1f}-{max(probes):.1f}); most often best: {common}\n")
    print("| model | test | kiln t/s median (min-max) | llama.cpp t/s median (min-max) | kiln / llama.cpp "
          "(per-run range) | kiln decode GB/s (share of the run's probe, range) | llama.cpp share of the run's "
          "probe (range) | load avg |")
    print("|---|---|---|---|---|---|---|---|")
    for m, name, ks, ls, ratio, rlo, rhi, dec, lsh, loads in rows:
        print(f"| {m} | {name} | {ks} | {ls} | {ratio:.2f} ({rlo:.2f}-{rhi:.2f}) | {dec} | {lsh} | {loads} |")


def stats(xs):
    return (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0) if xs else (0.0, 0.0)


def python_binding(a):
    """Kiln against llama.cpp through llama-cpp-python: mean +- sd over a.r alternating runs."""
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



def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=None, help="repetitions (default 7; 3 with --python; 1 with --batched)")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--cpu", default=None, help="force Kiln's kernel level (ref, avx2, avx512, amx); with avx2, "
                    "pair it with a llama.cpp built for AVX2 only (bench/README.md), which the header records")
    ap.add_argument("--llama-bench", default=os.environ.get("LLAMA_BENCH", "llama-bench"),
                    help="the llama-bench executable (default: $LLAMA_BENCH, else on PATH)")
    ap.add_argument("--python", action="store_true", help="llama.cpp through llama-cpp-python, not llama-bench")
    ap.add_argument("--batched", action="store_true", help="kiln batched-bench against llama-batched-bench")
    ap.add_argument("--llama-batched-bench", default=os.environ.get("LLAMA_BATCHED_BENCH", "llama-batched-bench"),
                    help="the llama-batched-bench executable (default: $LLAMA_BATCHED_BENCH, else on PATH)")
    ap.add_argument("--llama-args", default="", help="more options for llama-batched-bench, e.g. '-kvu'")
    ap.add_argument("-npp", default="128", help="--batched: prompt tokens per sequence, a list")
    ap.add_argument("-ntg", default="128", help="--batched: generated tokens per sequence, a list")
    ap.add_argument("-npl", default="1,2,4,8,16", help="--batched: parallel sequences, a list")
    ap.add_argument("-b", type=int, default=512, help="--batched: n_batch (and llama.cpp's n_ubatch)")
    ap.add_argument("--spec", choices=["lookup", "draft"], help="speculative decoding (bench/compare_spec.py)")
    ap.add_argument("--prompt-file", help="--spec: the prompt")
    ap.add_argument("--draft", help="--spec draft: the draft model")
    ap.add_argument("--draft-max", type=int, default=8, help="--spec: most guesses per step")
    ap.add_argument("--llama-lookup", default=os.environ.get("LLAMA_LOOKUP", "llama-lookup"))
    ap.add_argument("--llama-speculative", default=os.environ.get("LLAMA_SPECULATIVE", "llama-speculative"))
    a = ap.parse_args()
    if a.r is None:
        a.r = 1 if a.batched else 3 if a.python else 7
    if a.batched:
        return batched(a)
    if a.spec:
        if not a.prompt_file or (a.spec == "draft") != bool(a.draft):
            ap.error("--spec needs --prompt-file, and --draft exactly with --spec draft")
        from compare_spec import speculative
        return speculative(a, cpu_model, load1)
    return python_binding(a) if a.python else field(a)

if __name__ == "__main__":
    main()
