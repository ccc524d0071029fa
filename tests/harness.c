/* harness.c - see harness.h. */
#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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

static long allocations;
static void *count_alloc(size_t n, void *u) {
    (void)u;
    allocations++;
    return malloc(n);
}
static void *count_realloc(void *p, size_t n, void *u) {
    (void)u;
    allocations++;
    return realloc(p, n);
}
static void count_free(void *p, void *u) {
    (void)u;
    free(p);
}

void harness_count_allocations(void) {
    static const kiln_allocator counting = {count_alloc, count_realloc, count_free, NULL};
    allocations = 0;
    kiln_set_allocator(&counting);
}
void harness_zero_allocations(void) { allocations = 0; }
long harness_allocations(void) { return allocations; }
