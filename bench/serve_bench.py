#!/usr/bin/env python3
"""
serve_bench.py - `kiln serve` against llama.cpp's `llama-server` on the same model file with the same
threads, over loopback, and a long soak of `kiln serve` alone. Run it with the Python of
scripts/setup-python.sh (it needs nothing beyond the standard library and tests/server/sse.py).

Compare (the default): each engine in turn is started on a free port (kiln serve -t T --parallel 8
--ctx-size 4096; llama-server -t T -np 8 -c 4096 -kvu, the unified KV cache that Kiln's engine also uses:
without -kvu llama-server splits 4096 cells into 8 slots of 512, too few for the long prompt), then
  - streaming /v1/completions, 64 generated tokens (ignore_eos) from ~24-word prompts, each unique from
    its first word (no prefix-cache help), with 1, 4 and 8 concurrent clients issuing --requests requests
    in all: output tok/s (generated tokens / wall time) and TTFT p50;
  - 4 streams of 192 tokens, and after their 16th token a 1,024-token prompt arrives: p99 (and max) of
    the 4 streams' inter-token gaps from its arrival until its first token, beside p99 before it.
Every stream is read by one select loop (tests/server/sse.py), so no client thread adds its own gaps.

  build/venv/bin/python bench/serve_bench.py --model /tmp/models/tl-q4_0.gguf -t 2 \\
      --llama-server /path/to/llama-server --kiln-args='' --kiln-args='-b 64'

(--kiln-args runs kiln serve once more per use with those options: -b, the per-step token budget, sets
how long one step of a long prompt's prefill holds the streams.)

Soak (--soak): 64 clients stream against kiln serve for --duration seconds (default 600); prints requests,
errors, generated tokens and the server's RSS at start and end (after a warm-up request).

  build/venv/bin/python bench/serve_bench.py --soak --model models/stories260K.gguf -t 2
"""
import argparse
import itertools
import json
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(ROOT / "tests" / "server"))
from sse import RawSSE, pump  # noqa: E402

WORDS = ("the little dog ran across the green field to find a red ball that his friend had thrown over "
         "the old stone wall near the quiet river").split()
NUMBERS = ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
           "seventeen eighteen nineteen twenty").split()


def prompt24(i):
    """About 24 words, starting with a word that differs between requests."""
    return f"Story {NUMBERS[i % len(NUMBERS)]} {i}: " + " ".join(WORDS[:21])


def count_tokens(port, text):
    """Tokens of text as the server under test counts them (POST /tokenize, which both servers have)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize", method="POST",
                                 data=json.dumps({"content": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return len(json.load(r)["tokens"])


def long_prompt(port, n_tokens=1024):
    """A prompt of n_tokens tokens with BOS (within a few), fitted with the server's own tokenizer."""
    words = WORDS * 200
    n = n_tokens
    for _ in range(8):
        text = "Chapter zero. " + " ".join(words[:n])
        got = count_tokens(port, text) + 1
        if abs(got - n_tokens) <= 2:
            break
        n = max(1, int(n * n_tokens / got) + (1 if got < n_tokens else -1))
    return text


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


class Server:
    def __init__(self, name, cmd, port, log):
        self.name, self.port = name, port
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{name} exited with {self.proc.returncode}; see {log}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if b" 200 " in s.recv(200):
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"{name} did not become healthy; see {log}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def body(prompt, max_tokens, seed=0):
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.8, "seed": seed, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}


def first_text_time(s):
    """When the first event with generated text arrived (None if none did). TTFT is measured to it, not to
    the first event: a server may send an empty chunk before it has computed the prompt."""
    for t, ev in s.events:
        for c in ev.get("choices") or ():
            if c.get("text") or (c.get("delta") or {}).get("content"):
                return t
    return None


def generated_tokens(s):
    for _, ev in reversed(s.events):
        if ev.get("usage"):
            return ev["usage"]["completion_tokens"]
    return len(s.token_times())


PROMPT_IDS = itertools.count()  # every closed-loop request of a run has its own prompt: no prefix-cache help


def closed_loop(port, clients, total, max_tokens, deadline_s=900):
    """`clients` slots, each starting a new request when its last one ends, `total` requests in all.
    Returns (finished streams, wall seconds)."""
    sel = selectors.DefaultSelector()
    started, done, errors = 0, [], []
    t0 = time.monotonic()
    deadline = t0 + deadline_s

    def launch():
        nonlocal started
        s = RawSSE(port, "/v1/completions", body(prompt24(next(PROMPT_IDS)), max_tokens, seed=started))
        started += 1
        sel.register(s, selectors.EVENT_READ)

    for _ in range(min(clients, total)):
        launch()
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(1.0):
            s = key.fileobj
            s.on_readable()
            if s.done:
                sel.unregister(s)
                s.close()
                (done if s.status == 200 and s.saw_done_marker else errors).append(s)
                if started < total:
                    launch()
    wall = time.monotonic() - t0
    sel.close()
    if errors:
        print(f"  {len(errors)} failed requests (status {[e.status for e in errors[:5]]})", file=sys.stderr)
    return done, wall


def percentile(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return xs[k]


def gaps(times):
    return [b - a for a, b in zip(times, times[1:])]


def interference(port):
    prompt_1024 = long_prompt(port)
    streams = [RawSSE(port, "/v1/completions", body(prompt24(1000 + i), 192, seed=i)) for i in range(4)]
    pump(streams, lambda: all(len(s.token_times()) >= 16 for s in streams), time.monotonic() + 120)
    long = RawSSE(port, "/v1/completions", body(prompt_1024, 4))
    t0 = long.sent_at
    pump(streams + [long], lambda: bool(long.token_times()) or long.done, time.monotonic() + 300)
    t1 = first_text_time(long) or time.monotonic()
    pump(streams + [long], lambda: all(s.done for s in streams + [long]), time.monotonic() + 300)
    for s in streams + [long]:
        s.close()
    before, during = [], []
    for s in streams:
        times = s.token_times()
        for a, b in zip(times, times[1:]):
            if b <= t0 and a >= times[min(4, len(times) - 1)]:
                before.append(b - a)
            elif t0 < b and a <= t1:
                during.append(b - a)
    n_long = next((ev["usage"]["prompt_tokens"] for _, ev in long.events if ev.get("usage")), None)
    return {"p99_before_ms": percentile(before, 99) * 1e3, "p99_during_ms": percentile(during, 99) * 1e3,
            "max_during_ms": max(during, default=float("nan")) * 1e3, "long_prompt_tokens": n_long,
            "long_ttft_s": t1 - t0, "ok": long.status == 200 and all(s.status == 200 for s in streams)}


def run_engine(name, cmd, port, args, logdir):
    srv = Server(name, cmd, port, logdir / f"{name}.log")
    rows = {}
    try:
        closed_loop(port, 2, 2, 8)  # warm-up: weight preparation, first plans
        for c in (1, 4, 8):
            done, wall = closed_loop(port, c, args.requests, 64)
            toks = sum(generated_tokens(s) for s in done)
            ttft = [first_text_time(s) - s.sent_at for s in done if first_text_time(s) is not None]
            first = [s.token_times()[0] - s.sent_at for s in done if s.token_times()]
            rows[c] = {"tok_s": toks / wall, "ttft_p50_ms": statistics.median(ttft) * 1e3 if ttft else float("nan"),
                       "first_event_p50_ms": statistics.median(first) * 1e3 if first else float("nan"),
                       "requests": len(done), "tokens": toks}
            print(f"  {name} c={c}: {rows[c]['tok_s']:.1f} tok/s, TTFT p50 {rows[c]['ttft_p50_ms']:.0f} ms "
                  f"(first event {rows[c]['first_event_p50_ms']:.0f} ms; {len(done)}/{args.requests} requests, "
                  f"{toks} tokens, {wall:.1f} s)", flush=True)
        rows["interference"] = interference(port)
        print(f"  {name} long prompt during 4 streams: {rows['interference']}", flush=True)
    finally:
        srv.stop()
    return rows


def compare(args):
    logdir = Path(args.logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    results = {}
    engines = []
    for extra in args.kiln_args or [""]:
        kport = free_port()
        engines.append((f"kiln {extra}".strip(), [args.kiln, "serve", "-m", args.model, "--host", "127.0.0.1",
                                                  "--port", str(kport), "-t", str(args.threads), "--parallel", "8",
                                                  "--ctx-size", "4096", *extra.split()], kport))
    if args.llama_server:
        lport = free_port()
        engines.append(("llama.cpp", [args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port",
                                      str(lport), "-t", str(args.threads), "-tb", str(args.threads), "-np", "8",
                                      "-c", "4096", "-kvu", "--no-webui"], lport))
    for name, cmd, port in engines:
        print(f"{name}: {' '.join(cmd)}", flush=True)
        results[name] = run_engine(name.replace(" ", ""), cmd, port, args, logdir)

    names = [n for n, _, _ in engines]
    print()
    print("| clients | " + " | ".join(f"{n} tok/s | {n} TTFT p50 ms" for n in names) + " |")
    print("|---" * (1 + 2 * len(names)) + "|")
    for c in (1, 4, 8):
        cells = " | ".join(f"{results[n][c]['tok_s']:.1f} | {results[n][c]['ttft_p50_ms']:.0f}" for n in names)
        print(f"| {c} | {cells} |")
    print()
    print("| 1,024-token prompt during 4 streams | " + " | ".join(names) + " |")
    print("|---" * (1 + len(names)) + "|")
    for key, label in (("p99_before_ms", "inter-token p99 before, ms"),
                       ("p99_during_ms", "inter-token p99 while it is prefilled, ms"),
                       ("max_during_ms", "inter-token max while it is prefilled, ms"),
                       ("long_ttft_s", "its time to first token, s"),
                       ("long_prompt_tokens", "its prompt tokens")):
        vals = [results[n]["interference"][key] for n in names]
        print(f"| {label} | " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in vals) + " |")


def soak(args):
    logdir = Path(args.logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cmd = [args.kiln, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-t", str(args.threads),
           "--parallel", str(min(args.clients, 32)), "--max-queue", str(args.clients * 2)]
    print(" ".join(cmd), flush=True)
    srv = Server("kiln-soak", cmd, port, logdir / "kiln-soak.log")
    try:
        closed_loop(port, 2, 2, 8)
        rss0 = rss_kib(srv.proc.pid)
        sel = selectors.DefaultSelector()
        t0 = time.monotonic()
        end = t0 + args.duration
        n, ok, errors, tokens = 0, 0, 0, 0
        last_report = t0

        def launch():
            nonlocal n
            s = RawSSE(port, "/v1/completions", body(prompt24(n), 16 + n % 112, seed=n))
            n += 1
            sel.register(s, selectors.EVENT_READ)

        for _ in range(args.clients):
            launch()
        while sel.get_map() and time.monotonic() < end + 120:
            for key, _ in sel.select(1.0):
                s = key.fileobj
                try:
                    s.on_readable()
                except Exception as e:  # a malformed event counts as an error, the soak goes on
                    print(f"  bad stream: {e!r}", file=sys.stderr)
                    s.done, s.status = True, -1
                if s.done:
                    sel.unregister(s)
                    s.close()
                    if s.status == 200 and s.saw_done_marker:
                        ok += 1
                        tokens += generated_tokens(s)
                    else:
                        errors += 1
                    if time.monotonic() < end:
                        launch()
            now = time.monotonic()
            if now - last_report >= 60:
                last_report = now
                print(f"  {now - t0:.0f} s: {ok} ok, {errors} errors, RSS {rss_kib(srv.proc.pid) / 1024:.1f} MiB",
                      flush=True)
        rss1 = rss_kib(srv.proc.pid)
        wall = time.monotonic() - t0
        unfinished = len(sel.get_map())  # still streaming when the drain window closed: neither ok nor error
    finally:
        srv.stop()
    print(f"soak: {args.clients} clients, {wall:.0f} s, {ok} requests ok, {errors} errors, "
          f"{unfinished} unfinished at the cut-off, {tokens} tokens ({tokens / wall:.1f} tok/s), "
          f"RSS start {rss0 / 1024:.1f} MiB, end {rss1 / 1024:.1f} MiB, "
          f"server exit {srv.proc.returncode}")
    return 1 if errors or srv.proc.returncode != 0 else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models" / "stories260K.gguf"))
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln")))
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--kiln-args", action="append",
                    help="extra kiln serve options, one run per use (e.g. --kiln-args='' --kiln-args='-b 64')")
    ap.add_argument("--requests", type=int, default=16, help="requests per concurrency level (default 16)")
    ap.add_argument("--logdir", default=str(ROOT / "build" / "serve-bench"))
    ap.add_argument("--soak", action="store_true", help="the soak test instead of the comparison")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=600)
    args = ap.parse_args()
    sys.exit(soak(args) if args.soak else compare(args))


if __name__ == "__main__":
    main()
