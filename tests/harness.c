/* harness.c - see harness.h. */
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

int harness_check_failures = 0;
static int passed = 0, failed = 0;
static const char *current_test = "";

void harness_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "  FAIL %s (%s:%d): ", current_test, file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    harness_check_failures++;
}

void harness_run(const char *name, void (*fn)(void)) {
    int before = harness_check_failures;
    current_test = name;
    fn();
    if (harness_check_failures == before) {
        passed++;
        printf("ok   %s\n", name);
    } else {
        failed++;
        printf("FAIL %s\n", name);
    }
    fflush(stdout);
}

int harness_finish(void) {
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

char *harness_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (size) *size = (size_t)n;
    }
    return buf;
}

const char *harness_data_path(const char *relative) {
    static char slots[8][4096];
    static int next = 0;
    char *p = slots[next++ % 8];
    snprintf(p, 4096, "%s/%s", KILN_TEST_DATA, relative);
    return p;
}

kiln_ctx_params harness_ctx_params(void) {
    kiln_ctx_params p = kiln_ctx_params_default();
    const char *check = getenv("KILN_CHECK_PASSES");
    p.check_passes = check && *check && strcmp(check, "0") != 0;
    return p;
}

uint64_t harness_profile_calls(const kiln_device_profile *p) {
    uint64_t n = 0;
    for (int32_t i = 0; i < p->n_kernels; i++)
        n += p->kernels[i].calls;
    return n;
}

uint64_t harness_check_profile(const kiln_device_profile *p) {
    uint64_t ns = 0;
    for (int32_t i = 0; i < p->n_kernels; i++) {
        CHECK(p->kernels[i].calls > 0);
        if (i > 0) CHECK(p->kernels[i].ns <= p->kernels[i - 1].ns);
        ns += p->kernels[i].ns;
    }
    CHECK_EQ_INT(ns, p->kernel_ns);
    CHECK(p->kernel_ns > 0 && p->kernel_ns <= p->submit_ns);
    CHECK_EQ_INT(p->unattributed, 0);
    return harness_profile_calls(p);
}

bool harness_profile_has(const kiln_device_profile *p, const char *kernel) {
    for (int32_t i = 0; i < p->n_kernels; i++)
        if (!strcmp(p->kernels[i].name, kernel)) return true;
    return false;
}

/* ---- The test allocator. Live blocks are kept in an open-addressing table keyed by address (libc
 * memory, never Kiln's), so that a block allocated before the allocator was installed is freed untracked
 * and every count covers only what was allocated while it was installed. One mutex guards it all. ---- */

typedef struct block {
    void *ptr; /* NULL: empty; TOMB: deleted */
    size_t size;
} block;

#define TOMB ((void *)&tracker)

static struct {
    pthread_mutex_t mu;
    block *table;
    size_t cap, used; /* used counts live entries and tombstones */
    long count;       /* allocations (alloc and realloc) since the last zero */
    long fail_at;     /* fail the allocation that brings count to this; 0 = none */
    long live;
    size_t live_bytes, peak_bytes;
} tracker = {.mu = PTHREAD_MUTEX_INITIALIZER};

static size_t slot_of(const void *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

static void table_put(void *p, size_t size);

static void table_grow(void) {
    block *old = tracker.table;
    size_t old_cap = tracker.cap;
    tracker.cap = old_cap ? old_cap * 2 : 1024;
    tracker.table = calloc(tracker.cap, sizeof *tracker.table);
    if (!tracker.table) {
        fprintf(stderr, "harness: out of memory for the allocation table\n");
        abort();
    }
    tracker.used = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].ptr && old[i].ptr != TOMB) table_put(old[i].ptr, old[i].size);
    free(old);
}

static void table_put(void *p, size_t size) {
    size_t i;
    if ((tracker.used + 1) * 2 > tracker.cap) table_grow();
    for (i = slot_of(p, tracker.cap); tracker.table[i].ptr && tracker.table[i].ptr != TOMB;
         i = (i + 1) & (tracker.cap - 1)) {
    }
    if (!tracker.table[i].ptr) tracker.used++;
    tracker.table[i] = (block){p, size};
}

/* Remove p; its size, or (size_t)-1 when p was not allocated while the tracker was installed. */
static size_t table_take(void *p) {
    if (!tracker.cap) return (size_t)-1;
    for (size_t i = slot_of(p, tracker.cap); tracker.table[i].ptr; i = (i + 1) & (tracker.cap - 1))
        if (tracker.table[i].ptr == p) {
            size_t size = tracker.table[i].size;
            tracker.table[i].ptr = TOMB;
            return size;
        }
    return (size_t)-1;
}

static void track_new(void *p, size_t size) {
    table_put(p, size);
    tracker.live++;
    tracker.live_bytes += size;
    if (tracker.live_bytes > tracker.peak_bytes) tracker.peak_bytes = tracker.live_bytes;
}

static void track_gone(void *p) {
    size_t size = table_take(p);
    if (size == (size_t)-1) return;
    tracker.live--;
    tracker.live_bytes -= size;
}

static bool should_fail(void) {
    return ++tracker.count == tracker.fail_at;
}

static void *track_alloc(size_t n, void *u) {
    void *p = NULL;
    (void)u;
    pthread_mutex_lock(&tracker.mu);
    if (!should_fail() && (p = malloc(n))) track_new(p, n);
    pthread_mutex_unlock(&tracker.mu);
    return p;
}

static void *track_realloc(void *old, size_t n, void *u) {
    void *p = NULL;
    (void)u;
    pthread_mutex_lock(&tracker.mu);
    if (!should_fail()) {
        /* Forget the old block first (realloc may free it); put it back if realloc fails. */
        size_t old_size = old ? table_take(old) : (size_t)-1;
        if (old_size != (size_t)-1) {
            tracker.live--;
            tracker.live_bytes -= old_size;
        }
        p = realloc(old, n);
        if (p)
            track_new(p, n);
        else if (old_size != (size_t)-1)
            track_new(old, old_size);
    }
    pthread_mutex_unlock(&tracker.mu);
    return p;
}

static void track_free(void *p, void *u) {
    (void)u;
    if (!p) return;
    pthread_mutex_lock(&tracker.mu);
    track_gone(p);
    free(p);
    pthread_mutex_unlock(&tracker.mu);
}

void harness_count_allocations(void) {
    static const kiln_allocator tracking = {track_alloc, track_realloc, track_free, NULL};
    pthread_mutex_lock(&tracker.mu);
    if (tracker.table) memset(tracker.table, 0, tracker.cap * sizeof *tracker.table);
    tracker.used = 0;
    tracker.count = tracker.fail_at = tracker.live = 0;
    tracker.live_bytes = tracker.peak_bytes = 0;
    pthread_mutex_unlock(&tracker.mu);
    kiln_set_allocator(&tracking);
}

void harness_zero_allocations(void) {
    pthread_mutex_lock(&tracker.mu);
    if (tracker.fail_at) tracker.fail_at -= tracker.count; /* an armed failure stays as far away */
    tracker.count = 0;
    tracker.peak_bytes = tracker.live_bytes;
    pthread_mutex_unlock(&tracker.mu);
}

void harness_fail_allocation(long n) {
    pthread_mutex_lock(&tracker.mu);
    tracker.fail_at = n > 0 ? tracker.count + n : 0;
    pthread_mutex_unlock(&tracker.mu);
}

/* A consistent copy of the counters. */
static void read_tracker(long *count, long *live, size_t *live_bytes, size_t *peak_bytes) {
    pthread_mutex_lock(&tracker.mu);
    *count = tracker.count;
    *live = tracker.live;
    *live_bytes = tracker.live_bytes;
    *peak_bytes = tracker.peak_bytes;
    pthread_mutex_unlock(&tracker.mu);
}

long harness_allocations(void) {
    long count, live;
    size_t bytes, peak;
    read_tracker(&count, &live, &bytes, &peak);
    return count;
}

long harness_live_blocks(void) {
    long count, live;
    size_t bytes, peak;
    read_tracker(&count, &live, &bytes, &peak);
    return live;
}

size_t harness_live_bytes(void) {
    long count, live;
    size_t bytes, peak;
    read_tracker(&count, &live, &bytes, &peak);
    return bytes;
}

size_t harness_peak_bytes(void) {
    long count, live;
    size_t bytes, peak;
    read_tracker(&count, &live, &bytes, &peak);
    return peak;
}

/* ---- Allocation-failure sweeps. ---- */

static bool sweep_step(const harness_sweep *sw, long k, long *made) {
    long live0 = harness_live_blocks(), before;
    kiln_status s = KILN_OK;
    bool ok = true;
    if (sw->setup && (s = sw->setup(sw->user)) != KILN_OK) {
        harness_fail(__FILE__, __LINE__, "%s: setup failed: %s (%s)", sw->what, kiln_status_name(s),
                     kiln_last_error());
        return false;
    }
    before = harness_allocations();
    harness_fail_allocation(k);
    s = sw->op(sw->user);
    *made = harness_allocations() - before;
    harness_fail_allocation(0);
    if (s != KILN_OK && s != KILN_E_NOMEM) {
        harness_fail(__FILE__, __LINE__, "%s, allocation %ld failing: %s, expected KILN_E_NOMEM (%s)",
                     sw->what, k, kiln_status_name(s), kiln_last_error());
        ok = false;
    } else if (s == KILN_E_NOMEM && !strstr(kiln_last_error(), "out of memory")) {
        harness_fail(__FILE__, __LINE__,
                     "%s, allocation %ld failing: the message \"%s\" does not say out of memory", sw->what, k,
                     kiln_last_error());
        ok = false;
    } else if (s == KILN_OK && *made >= k) {
        harness_fail(__FILE__, __LINE__, "%s: allocation %ld failed, yet the call succeeded", sw->what, k);
        ok = false;
    }
    if (sw->teardown) sw->teardown(sw->user);
    if (harness_live_blocks() != live0) {
        harness_fail(__FILE__, __LINE__, "%s, allocation %ld failing: %ld blocks (%zu bytes) left allocated",
                     sw->what, k, harness_live_blocks() - live0, harness_live_bytes());
        ok = false;
    }
    if (ok && s == KILN_OK && *made < k) *made = -*made - 1; /* done: every allocation has failed once */
    return ok;
}

long harness_alloc_sweep(const harness_sweep *sw) {
    harness_count_allocations();
    for (long k = 1;; k++) {
        long made = 0;
        if (!sweep_step(sw, k, &made)) {
            kiln_set_allocator(NULL);
            return -1;
        }
        if (made < 0) {
            kiln_set_allocator(NULL);
            return -made - 1;
        }
    }
}

int32_t harness_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

size_t harness_json_ids(const char *json, const char *section, const char *key, int32_t *out, size_t cap) {
    const char *p = strstr(json, section);
    size_t n = 0;
    if (!p || !(p = strstr(p, key)) || !(p = strchr(p, '['))) return 0;
    for (p++; *p && *p != ']' && n < cap;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        out[n++] = (int32_t)v;
        p = end;
    }
    return n;
}

void harness_golden_load(const char *section, harness_golden *g) {
    char *json = harness_read_file(harness_data_path("golden/stories260K_greedy.json"), NULL);
    memset(g, 0, sizeof *g);
    CHECK(json != NULL);
    if (!json) return;
    g->n_prompt = harness_json_ids(json, section, "\"prompt_ids\"", g->prompt, 16);
    g->n_ids = harness_json_ids(json, section, "\"token_ids\"", g->ids, 256);
    free(json);
}

int harness_run_command(const char *cmd, const char *errpath, char *out, size_t out_cap, char *err,
                        size_t err_cap) {
    char full[8192];
    size_t n = 0;
    out[0] = err[0] = '\0';
    snprintf(full, sizeof full, "%s 2>'%s'", cmd, errpath);
    FILE *p = popen(full, "r");
    CHECK(p != NULL);
    if (!p) return -1;
    n = fread(out, 1, out_cap - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    char *e = harness_read_file(errpath, &n);
    snprintf(err, err_cap, "%s", e ? e : "");
    free(e);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
