"""
A long prompt arriving while four streams decode delays none of their tokens by more than one step: the
engine prefills it in slices (chunked prefill, decode first), so the streams keep receiving a token every
step while the prompt is computed, and /metrics counts what happened.

The bound, derived. The server runs with a per-step budget of B = 32 tokens; the long prompt has L ~ 1,300
tokens (what the 2,048-cell context holds beside the streams), so it needs k >= L / B slices, one per step. A step holds the four streams' decode tokens plus at
most one slice, so while the prompt is prefilled a stream waits at most one decode step plus one slice:
    gap_during <= gap_before + T_prefill / k,
where gap_before is the longest gap between tokens of the four streams before the prompt arrived and
T_prefill is the time the prompt takes alone on the idle server (measured first, with another prompt of
the same length so that the prefix cache cannot help). The test allows
    gap_during <= 2 * gap_before + T_prefill / 2,
which doubles the decode term for scheduling noise and gives the slice term k / 2 >= 20 times its size;
an engine that prefilled the whole prompt in one step would show a gap of at least T_prefill, beyond the
bound as long as a decode step is well below T_prefill / 4 (checked with the median gap, the step time). Independent of time, each stream must receive
at least k - 2 tokens between the prompt's arrival and its first token: one per prefill step.
"""
import math
import statistics
import time

import pytest
import requests

from sse import RawSSE, pump

BATCH = 32
STREAM_PROMPTS = ["Once upon a time", "The cat", "One day, a little bird", "Mia had a red ball"]
STREAM_TOKENS = 160
SENTENCE = " and Tom played in the big green park with a red ball."


def long_prompt(name):
    return " ".join([name + SENTENCE] * 60)


@pytest.fixture(scope="module")
def fair_server(start_server):
    return start_server("prefill", args=["--batch-size", str(BATCH), "--parallel", "8"])


def body(prompt, max_tokens):
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}


def max_gap(times):
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


@pytest.mark.timeout(120)
def test_long_prompt_delays_no_stream_by_more_than_one_step(fair_server):
    port = fair_server.port
    # T_prefill: the long prompt alone on the idle server (a different first word: no shared prefix).
    alone = RawSSE(port, "/v1/completions", body(long_prompt("Ben"), 1))
    assert pump([alone], lambda: alone.done, time.monotonic() + 30)
    assert alone.status == 200
    t_prefill = alone.token_times()[0] - alone.sent_at
    before_metrics = fair_server.metrics()

    streams = [RawSSE(port, "/v1/completions", body(p, STREAM_TOKENS)) for p in STREAM_PROMPTS]
    try:
        assert pump(streams, lambda: all(len(s.token_times()) >= 30 for s in streams),
                    time.monotonic() + 30), "the four streams did not start"
        long = RawSSE(port, "/v1/completions", body(long_prompt("Lily"), 2))
        t0 = long.sent_at
        assert pump(streams + [long], lambda: bool(long.token_times()), time.monotonic() + 30)
        t1 = long.token_times()[0]
        assert pump(streams + [long], lambda: all(s.done for s in streams + [long]), time.monotonic() + 60)
    finally:
        for s in streams:
            s.close()
    long.close()

    assert all(s.status == 200 and s.saw_done_marker for s in streams + [long])
    n_long = long.events[-1][1]["usage"]["prompt_tokens"]
    k = math.ceil(n_long / BATCH)
    before = [[t for t in s.token_times()[5:] if t <= t0] for s in streams]
    gap_before = max(max_gap(times) for times in before)
    step = statistics.median(b - a for times in before for a, b in zip(times, times[1:]))
    gaps_during = []
    for s in streams:
        times = s.token_times()
        assert times[-1] > t1, "a stream ended before the long prompt's first token: raise STREAM_TOKENS"
        during = [t for t in times if t0 < t <= t1]
        assert len(during) >= k - 2, f"a stream got {len(during)} tokens during {k} prefill steps"
        last_before = max(t for t in times if t <= t0)
        gaps_during.append(max_gap([last_before] + during + [min(t for t in times if t > t1)]))
    bound = 2 * gap_before + t_prefill / 2
    assert 4 * step < t_prefill, (
        f"cannot tell slices from a whole prefill: step {step * 1e3:.1f} ms, prefill {t_prefill * 1e3:.1f} ms")
    assert max(gaps_during) <= bound, (
        f"gap while prefilling {max(gaps_during) * 1e3:.1f} ms > bound {bound * 1e3:.1f} ms "
        f"(gap before {gap_before * 1e3:.1f} ms, prefill alone {t_prefill * 1e3:.1f} ms, {k} slices)")

    after = fair_server.metrics()
    assert after["kiln_prompt_tokens_total"] - before_metrics["kiln_prompt_tokens_total"] >= n_long
    assert (after["kiln_generated_tokens_total"] - before_metrics["kiln_generated_tokens_total"]
            >= 4 * STREAM_TOKENS)
    assert after["kiln_inter_token_latency_seconds_count"] > before_metrics["kiln_inter_token_latency_seconds_count"]
    assert after["kiln_requests_total{status=\"ok\"}"] >= before_metrics["kiln_requests_total{status=\"ok\"}"] + 5
    assert after["kiln_running_sequences"] == 0
    assert after["kiln_queue_depth"] == 0


def test_metrics_are_prometheus_text_with_help_and_type(fair_server):
    r = requests.get(fair_server.base + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    text = r.text
    for name in ("kiln_running_sequences", "kiln_kv_cells_used", "kiln_kv_cells_total", "kiln_queue_depth",
                 "kiln_time_to_first_token_seconds", "kiln_inter_token_latency_seconds"):
        assert f"# TYPE {name} " in text, name
    m = fair_server.metrics()
    assert m["kiln_kv_cells_total"] == 2048
    assert 0 <= m["kiln_kv_cells_used"] <= m["kiln_kv_cells_total"]
    assert m['kiln_time_to_first_token_seconds_bucket{le="+Inf"}'] == m["kiln_time_to_first_token_seconds_count"]
