#!/usr/bin/env python3
"""Sentence-embedding throughput: Kiln against sentence-transformers (PyTorch) and llama.cpp's
llama-embedding, on the same sentences, same machine, same thread count, runs alternating.

usage: /tmp/venv-ref/bin/python bench/embed_bench.py --st-model DIR --kiln-python /tmp/eb-venv/bin/python \\
           --llama-embedding PATH [-n 1024] [--batch 32] [-t 2] [-r 3] \\
           [--kiln-only FILE.gguf ...] FILE.gguf ...

Run it with a Python that has torch and sentence-transformers (the coordinator counts tokens with the
model's Hugging Face tokenizer); --kiln-python names a Python where `pip install ./python` put the kiln
package (default: the same one). Every FILE.gguf is run by Kiln and by llama-embedding; --kiln-only
files by Kiln alone. sentence-transformers runs the float32 model folder --st-model (the folder the GGUF
files were converted from).

What is timed (model load excluded for every engine; each engine is warmed up first):

  end-to-end   texts in memory -> unit-length vectors: tokenization, packing, forward pass, pooling,
               normalization, the vectors handed back.
                 sentence-transformers: model.encode(texts, batch_size=BATCH) (sorts by length, pads
                                        each batch of BATCH texts);
                 Kiln:                  kiln.Llama(embedding=True, n_ctx=512, n_batch=512).embed(texts)
                                        (packs whole texts into batches of <= 512 tokens, no padding);
                 llama.cpp:             llama-embedding -c 512 -b 512 -ub 512 -f FILE, the same packing;
                                        timed by its own log's timestamps, from the system_info line
                                        (printed once the model is loaded and warmed up, before the
                                        texts are tokenized) to the performance report after the last
                                        batch. No vectors are printed (--embd-output-format none).
  forward      only the model's forward passes over pre-tokenized batches (plus pooling and
               normalization, which are part of them):
                 sentence-transformers: model(features) per pre-tokenized batch, under inference_mode;
                 Kiln:                  ctx.decode_batch + copying out each embedding, per pre-filled
                                        batch;
                 llama.cpp:             its own "prompt eval time" (llama_perf_context_print: the sum of
                                        its decode calls).

Kiln's encoder context holds at most the model's 512 positions (n_ctx <= context_length), so a Kiln batch
is at most 512 tokens; llama-embedding is given the same limit so that both run identical batches (the
script checks this from llama-embedding's log). sentence-transformers runs batches of BATCH texts.

Before every run the script waits (sleep 30, at most --wait-budget seconds in total over the whole
benchmark) until the 1-minute load average is below --max-load; each run records the load it started at.
Each run also records how many cores the engine kept busy while timed (CPU time / wall time of the
timed part, end-to-end/forward; for llama.cpp, of its whole process): 2.00 with -t 2 means both threads
worked throughout, 1.00 that one did. At the end it prints the medians, the ratios Kiln / other, a
cosine check of Kiln's (and llama.cpp's) vectors against sentence-transformers' on a few sentences,
the CPU and the versions, as Markdown.
"""
import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

WORDS = """
the of and to in is was for that with as on by at from his her their this which are be have had not but
all were when there can an one who been more would will about if each so them some other time people
water city river house school family market country world music story garden window morning evening
night summer winter light small large early late new old young long short good great high little own
right left big hard open public local national human social political economic common final special
free full strong clear simple whole early recent modern quiet bright warm cold green blue red white
dark heavy careful sudden gentle brave curious patient friendly famous ancient distant narrow busy
walks runs reads writes builds opens closes carries watches finds keeps brings holds follows leaves
paints teaches studies plays sings cooks drives visits explains remembers changes answers waits
teacher doctor student farmer writer painter driver engineer child mother father brother sister
friend neighbor visitor traveler scientist worker player singer baker captain pilot nurse artist
road bridge forest mountain island valley village street station library museum hospital kitchen
table chair letter paper book picture train boat car bicycle apple bread coffee tea cake soup rice
dog cat horse bird fish tree flower stone wall door field hill lake sea shore sky cloud rain snow
wind fire road north south east west during after before under over between through across along
near behind above below around against without within because while although until since often
always never sometimes usually quickly slowly quietly carefully suddenly finally almost nearly very
rather quite again together already still perhaps even also just only
""".split()


def make_corpus(n, seed, min_words, max_words):
    """n sentences of min..max words from WORDS (random, seeded; speed depends only on the lengths)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))]
        if rng.random() < 0.3:  # a comma now and then
            k = rng.randrange(2, len(words) - 2)
            words[k] += ","
        out.append(" ".join(words).capitalize() + rng.choice([".", ".", ".", "!", "?"]))
    return out


CHECK_EXTRA = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome!",
    "Café, naïve résumé: accents are stripped by the uncased vocabulary.",
]


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def emit(obj):
    sys.stdout.write("\n" + json.dumps(obj) + "\n")
    sys.stdout.flush()


# -- workers (each engine runs in its own process: no thread pool of one engine spins beside another) --

def worker_kiln(a):
    import kiln
    from kiln.model import Batch

    texts = read_lines(a.corpus)
    t0 = time.perf_counter()
    llm = kiln.Llama(a.model, embedding=True, n_ctx=512, n_batch=512, n_threads=a.threads, verbose=False)
    load_s = time.perf_counter() - t0
    if a.check:
        emit({"vectors": llm.embed(texts)})
        return
    ids = [llm.tokenize(t.encode("utf-8"), add_bos=True) for t in texts]
    groups, cur = [], []
    for x in ids:  # the packing of Llama.embed and `kiln embed`
        if cur and (sum(map(len, cur)) + len(x) > llm.n_batch or len(cur) >= llm.ctx.n_seq_max):
            groups.append(cur)
            cur = []
        cur.append(x)
    groups.append(cur)
    llm.embed(texts[: len(groups[0])])  # warm-up: the first computation repacks the weights
    # end-to-end
    t0, c0 = time.perf_counter(), time.process_time()
    vecs = llm.embed(texts)
    e2e_s, e2e_cpu = time.perf_counter() - t0, time.process_time() - c0
    assert len(vecs) == len(texts)
    # forward only
    batches = []
    for g in groups:
        b = Batch(sum(map(len, g)))
        for s, x in enumerate(g):
            b.add_sequence(x, seq_id=s, logits="none")
        batches.append(b)
    ctx = llm.ctx
    ctx.decode_batch(batches[0])
    t0, c0 = time.perf_counter(), time.process_time()
    for b, g in zip(batches, groups):
        ctx.decode_batch(b)
        for s in range(len(g)):
            ctx.embeddings(s).copy()
    fwd_s, fwd_cpu = time.perf_counter() - t0, time.process_time() - c0
    emit({"load_s": load_s, "e2e_s": e2e_s, "fwd_s": fwd_s, "n_tokens": sum(map(len, ids)),
          "batches": [len(g) for g in groups], "e2e_cores": e2e_cpu / e2e_s, "fwd_cores": fwd_cpu / fwd_s})


def worker_torch(a):
    import torch
    import sentence_transformers
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(a.threads)
    texts = read_lines(a.corpus)
    t0 = time.perf_counter()
    m = SentenceTransformer(a.model, device="cpu")
    load_s = time.perf_counter() - t0
    if a.check:
        emit({"vectors": m.encode(texts, batch_size=a.batch, convert_to_numpy=True).tolist()})
        return
    m.encode(texts[: a.batch], batch_size=a.batch)  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    vecs = m.encode(texts, batch_size=a.batch, convert_to_numpy=True)
    e2e_s, e2e_cpu = time.perf_counter() - t0, time.process_time() - c0
    assert vecs.shape[0] == len(texts)
    # forward only: the batches encode() makes (sorted by length, BATCH texts each), tokenized beforehand
    order = sorted(range(len(texts)), key=lambda i: -m._input_length(texts[i]))
    feats = [m.preprocess([texts[i] for i in order[s: s + a.batch]]) for s in range(0, len(texts), a.batch)]
    padded = sum(int(f["input_ids"].numel()) for f in feats)
    real = sum(int(f["attention_mask"].sum()) for f in feats)
    with torch.inference_mode():
        m(feats[0])
        t0, c0 = time.perf_counter(), time.process_time()
        for f in feats:
            m(f)["sentence_embedding"].cpu()
        fwd_s, fwd_cpu = time.perf_counter() - t0, time.process_time() - c0
    emit({"load_s": load_s, "e2e_s": e2e_s, "fwd_s": fwd_s, "n_tokens": real, "n_tokens_padded": padded,
          "batches": [int(f["input_ids"].shape[0]) for f in feats],
          "e2e_cores": e2e_cpu / e2e_s, "fwd_cores": fwd_cpu / fwd_s,
          "torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__,
          "transformers": transformers.__version__, "torch_threads": torch.get_num_threads()})


def run_worker(python, engine, model, corpus, a, check=False):
    cmd = [python, os.path.abspath(__file__), "--worker", engine, "--worker-model", model, "--worker-corpus",
           corpus, "-t", str(a.threads), "--batch", str(a.batch)] + (["--worker-check"] if check else [])
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"embed_bench: {engine} worker failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# -- llama.cpp ---------------------------------------------------------------------------------------

def llama_cmd(a, model, corpus, fmt="none"):
    return [a.llama_embedding, "-m", model, "-f", corpus, "-t", str(a.threads), "-tb", str(a.threads),
            "-c", "512", "-b", "512", "-ub", "512", "--embd-output-format", fmt, "--perf", "-lv", "4"]


def _stamp(log, marker):
    """Seconds of llama.cpp's log timestamp (M.ss.mmm.uuu) on the first line containing marker."""
    m = re.search(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) \S+ [^\n]*" + re.escape(marker), log, re.M)
    if not m:
        sys.exit(f"embed_bench: no '{marker}' line in llama-embedding's log")
    mi, s, ms, us = map(int, m.groups())
    return mi * 60 + s + ms / 1e3 + us / 1e6


def run_llama(a, model, corpus):
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(llama_cmd(a, model, corpus), capture_output=True, text=True)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"embed_bench: llama-embedding failed ({p.returncode}):\n{p.stderr[-3000:]}")
    log = p.stdout + p.stderr
    m = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", log)
    batches = [int(x) for x in re.findall(r"batch_decode: n_tokens = \d+, n_seq = (\d+)", log)]
    # end-to-end: from the line printed after the model is loaded and warmed up (system_info), before
    # the texts are tokenized, to the performance report printed after the last batch
    e2e = _stamp(log, "llama_perf_context_print:") - _stamp(log, "system_info:")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"wall_s": wall, "e2e_s": e2e, "fwd_s": float(m.group(1)) / 1e3, "n_tokens": int(m.group(2)),
            "batches": batches, "process_cores": cpu / wall}


def llama_vectors(a, model, corpus):
    p = subprocess.run(llama_cmd(a, model, corpus, "raw"), capture_output=True, text=True, check=True)
    return [[float(x) for x in line.split()] for line in p.stdout.splitlines() if line.strip()]


# -- coordinator -------------------------------------------------------------------------------------

class Quiet:
    """Waits for the 1-minute load average to fall below max_load, within a total budget."""

    def __init__(self, max_load, budget):
        self.max_load, self.budget, self.waited = max_load, budget, 0.0

    def wait(self):
        while os.getloadavg()[0] >= self.max_load and self.waited < self.budget:
            print(f"  load {os.getloadavg()[0]:.2f} >= {self.max_load}: waiting 30 s "
                  f"({self.waited:.0f}/{self.budget:.0f} s of the budget used)", file=sys.stderr)
            time.sleep(30)
            self.waited += 30
        return os.getloadavg()[0]


def cosine(u, v):
    dot = sum(x * y for x, y in zip(u, v))
    nu = sum(x * x for x in u) ** 0.5
    nv = sum(y * y for y in v) ** 0.5
    return dot / (nu * nv)


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, shell=True).stdout.strip()
    except OSError:
        return ""


def cores(r):
    """CPU time / wall time of the timed part (threads busy on average; llama.cpp: its whole process)."""
    if "fwd_cores" in r:
        return f"{r['e2e_cores']:.2f}/{r['fwd_cores']:.2f}"
    return f"{r.get('process_cores', 0):.2f}"


def fmt_rate(xs):
    med = statistics.median(xs)
    return f"{med:,.0f} ({min(xs):,.0f}-{max(xs):,.0f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="GGUF files run by Kiln and llama.cpp")
    ap.add_argument("--kiln-only", action="append", default=[], help="GGUF file run by Kiln alone")
    ap.add_argument("--st-model", help="sentence-transformers model folder (float32)")
    ap.add_argument("--kiln-python", default=sys.executable)
    ap.add_argument("--llama-embedding", default=os.environ.get("LLAMA_EMBEDDING"))
    ap.add_argument("-n", type=int, default=1024, help="sentences (default 1024)")
    ap.add_argument("--min-words", type=int, default=10)
    ap.add_argument("--max-words", type=int, default=30)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--batch", type=int, default=32, help="sentence-transformers batch size (default 32)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--max-load", type=float, default=1.5)
    ap.add_argument("--wait-budget", type=float, default=1200)
    ap.add_argument("--worker", choices=["kiln", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--worker-model", help=argparse.SUPPRESS)
    ap.add_argument("--worker-corpus", help=argparse.SUPPRESS)
    ap.add_argument("--worker-check", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        a.model, a.corpus, a.check = a.worker_model, a.worker_corpus, a.worker_check
        return worker_kiln(a) if a.worker == "kiln" else worker_torch(a)
    if not a.st_model or not a.llama_embedding or not (a.models or a.kiln_only):
        ap.error("needs --st-model, --llama-embedding and at least one GGUF file")

    from transformers import AutoTokenizer  # the coordinator's Python is the sentence-transformers one

    tok = AutoTokenizer.from_pretrained(a.st_model)
    texts = make_corpus(a.n, a.seed, a.min_words, a.max_words)
    n_tok = [len(tok(t)["input_ids"]) for t in texts]
    tmp = tempfile.mkdtemp(prefix="embed_bench.")
    corpus, check = (os.path.join(tmp, f) for f in ("corpus.txt", "check.txt"))
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(texts))
    check_texts = texts[:4] + CHECK_EXTRA
    with open(check, "w", encoding="utf-8") as f:
        f.write("\n".join(check_texts))

    cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
    ncpu = os.cpu_count()
    llama_ver = sh(f"'{a.llama_embedding}' --version 2>&1 | grep -i version")
    kiln_commit = sh(f"git -C '{os.path.dirname(os.path.abspath(__file__))}' rev-parse --short HEAD")
    print(f"corpus: {a.n} sentences, {a.min_words}-{a.max_words} words (seed {a.seed}), "
          f"{sum(n_tok)} tokens with [CLS]/[SEP] (Hugging Face tokenizer), {min(n_tok)}-{max(n_tok)} per "
          f"sentence, mean {sum(n_tok) / len(n_tok):.1f}", file=sys.stderr)

    configs = [("st", "F32 (torch)", a.st_model)]
    for m in a.models:
        configs += [("kiln", os.path.basename(m), m), ("llama", os.path.basename(m), m)]
    configs += [("kiln", os.path.basename(m), m) for m in a.kiln_only]
    quiet = Quiet(a.max_load, a.wait_budget)
    res = {c[:2]: [] for c in configs}
    info = {}
    for rep in range(a.reps):
        order = configs[rep % len(configs):] + configs[: rep % len(configs)]  # rotate the start each round
        for eng, label, path in order:
            load = quiet.wait()
            if eng == "st":
                r = run_worker(sys.executable, "torch", path, corpus, a)
                info = {k: r[k] for k in ("torch", "sentence_transformers", "transformers", "torch_threads")}
            elif eng == "kiln":
                r = run_worker(a.kiln_python, "kiln", path, corpus, a)
            else:
                r = run_llama(a, path, corpus)
            r["load_avg"] = load
            res[(eng, label)].append(r)
            print(f"  round {rep + 1} {eng:5s} {label:28s} load {load:.2f}: end-to-end {r['e2e_s']:.3f} s, "
                  f"forward {r['fwd_s']:.3f} s, {r['n_tokens']} tokens, {len(r['batches'])} batches, "
                  f"{cores(r)} cores busy",
                  file=sys.stderr)

    # identical batches for Kiln and llama.cpp?
    same = "n/a"
    kb = next((v[0]["batches"] for (e, _), v in res.items() if e == "kiln"), None)
    lb = next((v[0]["batches"] for (e, _), v in res.items() if e == "llama"), None)
    if kb and lb:
        same = "yes" if kb == lb else f"NO (Kiln {kb[:8]}..., llama.cpp {lb[:8]}...)"

    def rates(key, field):
        return [a.n / r[field] for r in res[key]]

    names = {"st": "sentence-transformers", "kiln": "Kiln", "llama": "llama.cpp"}
    out = []
    out.append(f"CPU: {cpu} ({ncpu} CPUs); threads {a.threads}; repository at {kiln_commit}; "
               f"llama.cpp {llama_ver}; "
               f"torch {info.get('torch')}, sentence-transformers {info.get('sentence_transformers')}, "
               f"transformers {info.get('transformers')} (torch threads {info.get('torch_threads')})")
    st0 = res[("st", "F32 (torch)")][0]
    out.append(f"corpus: {a.n} sentences of {a.min_words}-{a.max_words} words, {sum(n_tok)} tokens "
               f"(mean {sum(n_tok) / len(n_tok):.1f}); tokens counted: Hugging Face {sum(n_tok)}, "
               + ", ".join(f"{names[e]} {l} {v[0]['n_tokens']}" for (e, l), v in res.items() if e != "st")
               + f"; sentence-transformers batches of {a.batch} ({st0['n_tokens_padded']} token slots with "
               f"padding), Kiln/llama.cpp batches of <= 512 tokens ({len(kb or [])} batches, "
               f"{a.n / max(1, len(kb or [1])):.1f} sentences each on average); identical Kiln/llama.cpp "
               f"batches: {same}")
    out.append(f"median of {a.reps} runs (min-max); load averages at run start "
               f"{min(r['load_avg'] for v in res.values() for r in v):.2f}-"
               f"{max(r['load_avg'] for v in res.values() for r in v):.2f}; waited {quiet.waited:.0f} s")
    out.append("")
    out.append("| engine | weights | end-to-end sentences/s | forward-only sentences/s | cores busy per run |")
    out.append("|---|---|---|---|---|")
    for key in res:
        out.append(f"| {names[key[0]]} | {key[1]} | {fmt_rate(rates(key, 'e2e_s'))} | "
                   f"{fmt_rate(rates(key, 'fwd_s'))} | {', '.join(cores(r) for r in res[key])} |")
    out.append("")
    out.append("| Kiln weights | Kiln / llama.cpp (same file), end-to-end | forward | "
               "Kiln / sentence-transformers F32, end-to-end | forward |")
    out.append("|---|---|---|---|---|")
    med = {k: {f: statistics.median(rates(k, f)) for f in ("e2e_s", "fwd_s")} for k in res}
    st = med[("st", "F32 (torch)")]
    for key in res:
        if key[0] != "kiln":
            continue
        ll = med.get(("llama", key[1]))
        k = med[key]
        vs_l = (f"{k['e2e_s'] / ll['e2e_s']:.2f} | {k['fwd_s'] / ll['fwd_s']:.2f}") if ll else "- | -"
        out.append(f"| {key[1]} | {vs_l} | {k['e2e_s'] / st['e2e_s']:.2f} | {k['fwd_s'] / st['fwd_s']:.2f} |")

    # sanity: cosine of each engine's vectors against sentence-transformers' on a few sentences
    ref = run_worker(sys.executable, "torch", a.st_model, check, a, check=True)["vectors"]
    out.append("")
    out.append(f"cosine against sentence-transformers on {len(check_texts)} sentences (worst):")
    for key in res:
        eng, label = key
        path = next(p for e, l, p in configs if (e, l) == key)
        if eng == "kiln":
            vecs = run_worker(a.kiln_python, "kiln", path, check, a, check=True)["vectors"]
        elif eng == "llama":
            vecs = llama_vectors(a, path, check)
        else:
            continue
        worst = min(cosine(u, v) for u, v in zip(vecs, ref)) if len(vecs) == len(ref) else float("nan")
        out.append(f"  {names[eng]} {label}: {worst:.6f}")
    print("\n".join(out))
    with open(os.path.join(tmp, "results.json"), "w") as f:
        json.dump({"|".join(k): v for k, v in res.items()}, f)
    print(f"(raw results: {tmp}/results.json)", file=sys.stderr)


if __name__ == "__main__":
    main()
