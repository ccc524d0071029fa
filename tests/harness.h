/*
 * harness.h - the tiny test harness. A test file defines functions and lists them in main():
 *
 *   static void pads_the_data_section(void) { CHECK_EQ_INT(a, b); ... }
 *   int main(void) { RUN(pads_the_data_section); return harness_finish(); }
 *
 * CHECK failures print file:line and the values, and the test continues; harness_finish() prints
 * "N passed, N failed" and returns the process exit code.
 */
#ifndef KILN_TEST_HARNESS_H
#define KILN_TEST_HARNESS_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern int harness_check_failures;

void harness_run(const char *name, void (*fn)(void));
int harness_finish(void);
void harness_fail(const char *file, int line, const char *fmt, ...);

/* Read a whole file into a malloc'd buffer (NUL-terminated); NULL on failure. */
char *harness_read_file(const char *path, size_t *size);
/* Run shell command cmd with its stderr sent to the file errpath; capture up to out_cap - 1 bytes of stdout
 * into out and of stderr into err (both NUL-terminated), and return the exit code (-1: not exited). */
int harness_run_command(const char *cmd, const char *errpath, char *out, size_t out_cap, char *err,
                        size_t err_cap);
/* Path under the test data folder, in a static buffer per call site slot. */
const char *harness_data_path(const char *relative);
/* The index of the largest of x[0..n) (the first on ties): a greedy step. */
int32_t harness_argmax(const float *x, int32_t n);
/* The integers of the JSON array after `key` (with its quotes, e.g. "\"token_ids\"") in the first part of
 * json from `section` on: at most cap into out; returns how many. Enough for the golden files' flat arrays. */
size_t harness_json_ids(const char *json, const char *section, const char *key, int32_t *out, size_t cap);
/* tests/data/golden/stories260K_greedy.json, one section (e.g. "\"bos_only_200\""): its prompt and greedy ids. */
typedef struct harness_golden {
    int32_t prompt[16];
    size_t n_prompt;
    int32_t ids[256];
    size_t n_ids;
} harness_golden;
void harness_golden_load(const char *section, harness_golden *g); /* a CHECK fails if the file is missing */
/* Context parameters for tests: the defaults, with every graph pass verified when the test run sets
 * KILN_CHECK_PASSES=1 (tests/CMakeLists.txt does; the library itself reads no environment). */
kiln_ctx_params harness_ctx_params(void);
/* A kernel profile's calls over its rows; and the same after checking the rows as kiln.h promises them: each
 * with calls, the most time first, adding up to kernel_ns, which is positive and within submit_ns, and no
 * dispatch or node left out of them. */
uint64_t harness_profile_calls(const kiln_device_profile *p);
uint64_t harness_check_profile(const kiln_device_profile *p);
bool harness_profile_has(const kiln_device_profile *p, const char *kernel);
/* The test allocator (kiln_set_allocator): counts every alloc and realloc, tracks the blocks and bytes
 * live (by address: a block allocated before it was installed is freed untracked) and their peak, and
 * can fail one chosen allocation. Thread-safe (the server engine allocates on its own thread).
 * kiln_set_allocator(NULL) removes it. */
void harness_count_allocations(void); /* install; no failure armed; count and peak from now */
void harness_zero_allocations(void);  /* count to 0, peak to the bytes live now */
long harness_allocations(void);       /* allocs and reallocs since then */
void harness_fail_allocation(long n); /* fail the n-th allocation from now (1: the next); 0: none */
long harness_live_blocks(void);
size_t harness_live_bytes(void);
size_t harness_peak_bytes(void); /* the most bytes live at once since the last zero */

/* An allocation-failure sweep: for k = 1, 2, ..., run setup (allocations working), then op with its k-th
 * allocation failing, then teardown, which releases what both made. op must return KILN_E_NOMEM with a
 * message that says "out of memory", and after teardown no block allocated since setup began may be live. The
 * sweep ends with the first run that makes fewer than k allocations, so every allocation op makes has failed
 * once and the last run, with a working allocator, must succeed. Returns the allocations op makes (the
 * number of k swept), or -1 after a failed check; leaves the libc allocator installed. */
typedef struct harness_sweep {
    const char *what;
    kiln_status (*setup)(void *user); /* or NULL */
    kiln_status (*op)(void *user);
    void (*teardown)(void *user); /* or NULL */
    void *user;
} harness_sweep;

long harness_alloc_sweep(const harness_sweep *sweep);

#define RUN(fn) harness_run(#fn, fn)

#define CHECK(cond)                                                                                    \
    do {                                                                                               \
        if (!(cond)) harness_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                             \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                             \
    do {                                                                                               \
        long long a_ = (long long)(a), b_ = (long long)(b);                                            \
        if (a_ != b_) harness_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_);      \
    } while (0)

#define CHECK_OK(expr)                                                                                 \
    do {                                                                                               \
        kiln_status s_ = (expr);                                                                       \
        if (s_ != KILN_OK)                                                                             \
            harness_fail(__FILE__, __LINE__, "%s returned %s: %s", #expr, kiln_status_name(s_),        \
                         kiln_last_error());                                                           \
    } while (0)

#define CHECK_STATUS(expr, expected)                                                                   \
    do {                                                                                               \
        kiln_status s_ = (expr);                                                                       \
        if (s_ != (expected))                                                                          \
            harness_fail(__FILE__, __LINE__, "%s returned %s, expected %s (%s)", #expr,                \
                         kiln_status_name(s_), kiln_status_name(expected), kiln_last_error());         \
    } while (0)

#define CHECK_STR(a, b)                                                                                \
    do {                                                                                               \
        const char *a_ = (a), *b_ = (b);                                                               \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                         \
            harness_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)", \
                         b_ ? b_ : "(null)");                                                          \
    } while (0)

/* The error message contains the given fragment. */
#define CHECK_ERROR_MENTIONS(fragment)                                                                 \
    do {                                                                                               \
        if (!strstr(kiln_last_error(), (fragment)))                                                    \
            harness_fail(__FILE__, __LINE__, "error \"%s\" does not mention \"%s\"", kiln_last_error(), \
                         (fragment));                                                                  \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                          \
    do {                                                                                               \
        double a_ = (a), b_ = (b);                                                                     \
        if (!(a_ - b_ <= (tol) && b_ - a_ <= (tol)))                                                   \
            harness_fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, a_, b_,         \
                         (double)(tol));                                                               \
    } while (0)

#endif
