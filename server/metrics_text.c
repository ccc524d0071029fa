/*
 * metrics_text.c - the engine's metrics in Prometheus' text exposition format (version 0.0.4), served at
 * GET /metrics. Counters end in _total; the four latency histograms are cumulative over the engine's
 * bucket bounds (ks_metric_buckets, seconds) with a final le="+Inf" bucket equal to _count.
 */
#include "api.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct text_buf {
    char *s;
    size_t len, cap;
    bool failed;
} text_buf;

static void put(text_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void put(text_buf *b, const char *fmt, ...) {
    for (int tries = 0; tries < 2 && !b->failed; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) break;
        if (b->s && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
        char *s = realloc(b->s, cap);
        if (!s) break;
        b->s = s;
        b->cap = cap;
    }
    b->failed = true;
}

static void counter(text_buf *b, const char *name, const char *help, uint64_t v) {
    put(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void gauge(text_buf *b, const char *name, const char *help, int64_t v) {
    put(b, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name, (long long)v);
}

static void histogram(text_buf *b, const char *name, const char *help, const ks_histogram *h) {
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < KS_HIST_BUCKETS; i++)
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, ks_metric_buckets[i], (unsigned long long)h->count[i]);
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, (unsigned long long)h->total,
        name, h->sum, name, (unsigned long long)h->total);
}

char *ks_metrics_text(const ks_metrics *m, uint64_t rejected) {
    text_buf b = {0};
    put(&b,
        "# HELP kiln_requests_total Completion requests by outcome.\n# TYPE kiln_requests_total counter\n");
    put(&b, "kiln_requests_total{status=\"ok\"} %llu\n", (unsigned long long)m->requests_ok);
    put(&b, "kiln_requests_total{status=\"failed\"} %llu\n", (unsigned long long)m->requests_failed);
    put(&b, "kiln_requests_total{status=\"cancelled\"} %llu\n", (unsigned long long)m->requests_cancelled);
    put(&b, "kiln_requests_total{status=\"rejected\"} %llu\n", (unsigned long long)rejected);
    counter(&b, "kiln_prompt_tokens_total", "Prompt tokens of finished requests.", m->prompt_tokens);
    counter(&b, "kiln_cached_prompt_tokens_total", "Prompt tokens reused from the prefix cache.",
            m->cached_prompt_tokens);
    counter(&b, "kiln_generated_tokens_total", "Tokens generated.", m->generated_tokens);
    counter(&b, "kiln_speculative_drafted_tokens_total",
            "Guessed tokens verified (--lookup or --model-draft).", m->drafted_tokens);
    counter(&b, "kiln_speculative_accepted_tokens_total", "Guessed tokens the target model kept.",
            m->accepted_tokens);
    gauge(&b, "kiln_queue_depth", "Requests waiting to start.", m->queue_depth);
    gauge(&b, "kiln_running_sequences", "Sequences in prefill or decoding.", m->running_sequences);
    gauge(&b, "kiln_kv_cells_used", "KV cache cells in use.", m->kv_cells_used);
    gauge(&b, "kiln_kv_cells_total", "KV cache cells.", m->kv_cells_total);
    gauge(&b, "kiln_draft_kv_cells_used", "KV cache cells in use in the draft model's context (--model-draft).",
          m->draft_kv_cells_used);
    gauge(&b, "kiln_prefix_cache_sequences", "Finished sequences kept for the prefix cache.",
          m->prefix_cache_sequences);
    gauge(&b, "kiln_prefix_cache_cells", "KV cells held by the prefix cache.", m->prefix_cache_cells);
    histogram(&b, "kiln_time_to_first_token_seconds", "Time from arrival to the first generated token.",
              &m->ttft);
    histogram(&b, "kiln_inter_token_latency_seconds", "Time between consecutive tokens of a sequence.",
              &m->inter_token);
    histogram(&b, "kiln_request_duration_seconds", "Time from arrival to the last event.", &m->end_to_end);
    histogram(&b, "kiln_queue_time_seconds", "Time from arrival to the start of prefill.", &m->queue_time);
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
