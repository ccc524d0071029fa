/*
 * bandwidth.c - the read-bandwidth probe of `kiln bench`.
 *
 * A decode step streams every weight once, so its ceiling is the rate at which the machine's threads can
 * read memory far larger than the caches. No single access pattern reaches that rate everywhere: one
 * sequential stream per thread under-reports on Sapphire Rapids (26.5 against 31.4 GB/s with 8 streams,
 * 2 threads, 2026-11-24), and a probe on 4 KiB pages read 48.9 GB/s on a 2-vCPU Zen 5 where Kiln's
 * decode, whose repacked weights lie on 2 MiB pages, moved 60.8 GB/s (2026-11-25). So the probe searches:
 * starting from T threads x 8 interleaved streams on 2 MiB pages with software prefetch 2 KiB ahead, it
 * tries, one dimension at a time and keeping the best so far,
 *   pages     2 MiB (MADV_HUGEPAGE) or 4 KiB (MADV_NOHUGEPAGE), the two ways weights can lie in memory;
 *   streams   1, 2, 4, 8 or 16 interleaved sequential streams per thread (hardware prefetchers track a
 *             limited number, and more streams keep more misses in flight);
 *   prefetch  none or 512 B to 8 KiB ahead in each stream;
 *   loads     regular or non-temporal (movntdqa on x86-64);
 *   layout    each thread one contiguous share of the buffer, or the buffer in 4 MiB blocks (about a
 *             weight matrix) with every block split among the threads, as a matmul splits its rows;
 *   threads   all T, or one.
 * Each pattern reads the 512 MiB buffer three times; its best pass counts, and the best pattern is the
 * result. The whole search takes a few seconds. Reads are 64-byte vectors folded into a checksum that is
 * kept, so the compiler cannot drop them.
 */
#include "bandwidth.h"

#include "common.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define BUF_BYTES ((size_t)512 << 20)
#define PAGE_2M ((size_t)2 << 20)
#define BLOCK_BYTES ((size_t)4 << 20)
#define LINE 64
#define PASSES 3
#define MAX_THREADS 64

typedef uint64_t line_t __attribute__((vector_size(LINE), may_alias));

typedef struct pattern {
    int huge;       /* 2 MiB pages */
    int streams;    /* per thread */
    int prefetch;   /* bytes ahead; 0: none */
    int nontemp;    /* non-temporal loads */
    int blocks;     /* 4 MiB blocks split among the threads, else one share per thread */
    int threads;
} pattern;

typedef struct job {
    const char *buf;
    pattern p;
    int ith;
    uint64_t sum;
} job;

/* Bytes [lo, hi) read as p.streams interleaved streams, 64 bytes from each in turn. */
static uint64_t read_streams(const char *buf, size_t lo, size_t hi, const pattern *p) {
    size_t len = (hi - lo) / (size_t)p->streams / LINE * LINE;
    line_t acc = {0};
    for (size_t i = 0; i < len; i += LINE)
        for (int s = 0; s < p->streams; s++) {
            const char *q = buf + lo + (size_t)s * len + i;
            if (p->prefetch) __builtin_prefetch(q + p->prefetch); /* past the end is harmless */
            acc ^= *(const line_t *)q;
        }
    uint64_t sum = 0;
    for (int w = 0; w < LINE / 8; w++) sum += acc[w];
    return sum;
}

#if defined(__x86_64__)
__attribute__((target("sse4.1"))) static uint64_t read_streams_nt(const char *buf, size_t lo, size_t hi,
                                                                   const pattern *p) {
    size_t len = (hi - lo) / (size_t)p->streams / LINE * LINE;
    __m128i acc = _mm_setzero_si128();
    for (size_t i = 0; i < len; i += LINE)
        for (int s = 0; s < p->streams; s++) {
            const char *q = buf + lo + (size_t)s * len + i;
            if (p->prefetch) __builtin_prefetch(q + p->prefetch);
            for (int k = 0; k < LINE; k += 16) acc = _mm_xor_si128(acc, _mm_stream_load_si128((__m128i *)(q + k)));
        }
    return (uint64_t)_mm_cvtsi128_si64(acc) + (uint64_t)_mm_extract_epi64(acc, 1);
}
#endif

/* The bytes of the buffer a thread reads in one pass (its share, or its share of every block). */
static void *run_job(void *arg) {
    job *j = arg;
    const pattern *p = &j->p;
    size_t unit = p->blocks ? BLOCK_BYTES : BUF_BYTES, n = (size_t)p->threads;
    for (size_t b = 0; b < BUF_BYTES; b += unit) {
        size_t lo = b + unit / n * (size_t)j->ith, hi = lo + unit / n;
#if defined(__x86_64__)
        if (p->nontemp) {
            j->sum += read_streams_nt(j->buf, lo, hi, p);
            continue;
        }
#endif
        j->sum += read_streams(j->buf, lo, hi, p);
    }
    return NULL;
}

/* Bytes one pass of p reads (what the streams' rounding leaves of the buffer). */
static double pass_bytes(const pattern *p) {
    size_t unit = p->blocks ? BLOCK_BYTES : BUF_BYTES, share = unit / (size_t)p->threads;
    size_t per = share / (size_t)p->streams / LINE * LINE * (size_t)p->streams;
    return (double)per * (double)p->threads * (double)(BUF_BYTES / unit);
}

/* The best of PASSES passes of p over buf, in GB/s (0 when a thread could not start). */
static double measure(const char *buf, const pattern *p, uint64_t *sink) {
    double best = 0;
    for (int pass = 0; pass < PASSES; pass++) {
        job jobs[MAX_THREADS];
        pthread_t th[MAX_THREADS];
        int started = 1;
        double t0 = cli_now_seconds(), dt;
        for (int i = 0; i < p->threads; i++) jobs[i] = (job){buf, *p, i, 0};
        for (int i = 1; i < p->threads; i++, started++)
            if (pthread_create(&th[i], NULL, run_job, &jobs[i]) != 0) break;
        run_job(&jobs[0]);
        for (int i = 1; i < started; i++) pthread_join(th[i], NULL);
        dt = cli_now_seconds() - t0;
        if (started < p->threads) return 0;
        for (int i = 0; i < p->threads; i++) *sink += jobs[i].sum;
        if (dt > 0 && pass_bytes(p) / dt / 1e9 > best) best = pass_bytes(p) / dt / 1e9;
    }
    return best;
}

/* A 2 MiB-aligned buffer of BUF_BYTES advised to lie on 2 MiB or 4 KiB pages, written once so that every
 * page exists before timing. */
static char *buffer(int huge) {
    void *p = NULL;
    if (posix_memalign(&p, PAGE_2M, BUF_BYTES) != 0) return NULL;
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    madvise(p, BUF_BYTES, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
    (void)huge;
#endif
    memset(p, 1, BUF_BYTES);
    return p;
}

static volatile uint64_t sink; /* the checksum of the reads, kept */

typedef struct search {
    pattern best;
    double gbs;
    uint64_t sink;
    FILE *log;
} search;

static void describe(const pattern *p, char *out, size_t len) {
    char pf[32] = "no prefetch";
    if (p->prefetch) snprintf(pf, sizeof pf, "prefetch %d B ahead", p->prefetch);
    snprintf(out, len, "%d thread%s x %d stream%s, %s pages, %s, %s loads%s", p->threads, p->threads > 1 ? "s" : "",
             p->streams, p->streams > 1 ? "s" : "", p->huge ? "2 MiB" : "4 KiB", pf,
             p->nontemp ? "non-temporal" : "regular", p->blocks ? ", 4 MiB blocks split among the threads" : "");
}

static void try(search *s, const char *buf, pattern p) {
    double g = measure(buf, &p, &s->sink);
    if (s->log) {
        char d[160];
        describe(&p, d, sizeof d);
        fprintf(s->log, "read bandwidth %6.1f GB/s: %s\n", g, d);
    }
    if (g > s->gbs) {
        s->gbs = g;
        s->best = p;
    }
}

double cli_read_bandwidth(int n_threads, char *how, size_t how_len, FILE *log) {
    static const int streams[] = {1, 2, 4, 16}, prefetch[] = {0, 512, 1024, 4096, 8192};
    search s = {{1, 8, 2048, 0, 0, n_threads}, 0, 0, log};
    char *buf[2] = {NULL, NULL};
    if (how_len) how[0] = '\0';
    if (n_threads < 1 || n_threads > MAX_THREADS) return 0;
    for (int huge = 0; huge < 2; huge++) { /* the page size first, one buffer at a time */
        pattern p = s.best;
        if (!(buf[huge] = buffer(huge))) break;
        p.huge = huge;
        try(&s, buf[huge], p);
        if (!huge) {
            free(buf[0]);
            buf[0] = NULL;
        }
    }
    if (s.gbs > 0 && !s.best.huge) { /* 4 KiB pages won: search on them */
        free(buf[1]);
        buf[1] = NULL;
        buf[0] = buffer(0);
    }
    const char *b = buf[s.best.huge];
    if (b) {
        pattern p;
        for (size_t i = 0; i < sizeof streams / sizeof *streams; i++) try(&s, b, (p = s.best, p.streams = streams[i], p));
        for (size_t i = 0; i < sizeof prefetch / sizeof *prefetch; i++)
            try(&s, b, (p = s.best, p.prefetch = prefetch[i], p));
#if defined(__x86_64__)
        if (__builtin_cpu_supports("sse4.1")) try(&s, b, (p = s.best, p.nontemp = 1, p));
#endif
        try(&s, b, (p = s.best, p.blocks = 1, p));
        if (n_threads > 1) try(&s, b, (p = s.best, p.threads = 1, p));
    }
    free(buf[0]);
    free(buf[1]);
    sink = s.sink;
    if (s.gbs > 0 && how_len) describe(&s.best, how, how_len);
    return s.gbs;
}
