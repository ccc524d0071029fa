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
/* Path under the test data folder, in a static buffer per call site slot. */
const char *harness_data_path(const char *relative);
/* Context parameters for tests: the defaults, with every graph pass verified when the test run sets
 * KILN_CHECK_PASSES=1 (tests/CMakeLists.txt does; the library itself reads no environment). */
kiln_ctx_params harness_ctx_params(void);
/* Install an allocator that counts every alloc and realloc (kiln_set_allocator(NULL) removes it), so a
 * test can pin that a step allocates nothing. */
void harness_count_allocations(void);
void harness_zero_allocations(void);
long harness_allocations(void);

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
