"""
A CI-sized load test: 32 clients stream /v1/completions back to back for KILN_LOAD_SECONDS (default 60)
against one server, and every request succeeds: status 200, a finish_reason, the [DONE] marker, usage that
adds up. Afterwards the server is idle (no running sequence, empty queue) and its counters agree with what
the clients saw. The longer soak (64 clients, 10 minutes, RSS at start and end) is `bench/serve_bench.py
--soak`, not part of `make test`.
"""
import os
import threading
import time

import pytest

from sse import RawSSE, pump

CLIENTS = 32
SECONDS = float(os.environ.get("KILN_LOAD_SECONDS", "60"))
PROMPTS = ["Once upon a time", "The cat sat", "Tom and Lily went to the park", "One day, a little bird",
           "The sun was hot and the sky was blue", "Mia had a red ball"]


def client_loop(port, index, deadline, results):
    i = 0
    while time.monotonic() < deadline and i < 100_000:
        body = {"prompt": PROMPTS[(index + i) % len(PROMPTS)], "max_tokens": 16 + (index * 7 + i) % 48,
                "temperature": 0.8, "seed": index * 1000 + i, "stream": True,
                "stream_options": {"include_usage": True}}
        i += 1
        try:
            s = RawSSE(port, "/v1/completions", body)
            try:
                finished = pump([s], lambda: s.done, time.monotonic() + 60)
            finally:
                s.close()
            usage = s.events[-1][1].get("usage") if s.events else None
            finishes = [c["finish_reason"] for _, ev in s.events for c in ev.get("choices", [])
                        if c.get("finish_reason")]
            if not (finished and s.status == 200 and s.saw_done_marker and usage and len(finishes) == 1
                    and usage["completion_tokens"] <= body["max_tokens"]):
                results.append(("bad", s.status, s.events[-1:] if s.events else None))
            else:
                results.append(("ok", usage["completion_tokens"]))
        except OSError as e:
            results.append(("error", repr(e)))


@pytest.mark.heavy
@pytest.mark.timeout(SECONDS + 120)
def test_32_streaming_clients_for_a_minute_see_no_error(start_server):
    s = start_server("load", args=["--parallel", "16", "--max-queue", "64"])
    before = s.metrics()
    deadline = time.monotonic() + SECONDS
    results = []
    threads = [threading.Thread(target=client_loop, args=(s.port, i, deadline, results)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 90)
    assert not any(t.is_alive() for t in threads)
    errors = [r for r in results if r[0] != "ok"]
    assert not errors, f"{len(errors)} of {len(results)} requests failed, first: {errors[:3]}"
    assert len(results) >= CLIENTS
    after = s.metrics()
    assert after["kiln_running_sequences"] == 0 and after["kiln_queue_depth"] == 0
    assert after['kiln_requests_total{status="ok"}'] - before['kiln_requests_total{status="ok"}'] == len(results)
    assert (after["kiln_generated_tokens_total"] - before["kiln_generated_tokens_total"]
            == sum(r[1] for r in results))
