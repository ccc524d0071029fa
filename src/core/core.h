/*
 * core.h - internal helpers shared by every layer: error reporting, the replaceable allocator, and
 * overflow-checked arithmetic. Nothing here is public; the public contract lives in include/kiln.h.
 */
#ifndef KILN_CORE_H
#define KILN_CORE_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define KILN__PRINTF(fmt_index, args_index) __attribute__((format(printf, fmt_index, args_index)))
#else
#define KILN__PRINTF(fmt_index, args_index)
#endif

/* Record a formatted message for kiln_last_error() and return status, so a failure reads
 * `return kiln__error(KILN_E_FORMAT, "tensor '%s': ...", name);`. */
kiln_status kiln__error(kiln_status status, const char *fmt, ...) KILN__PRINTF(2, 3);

/* Prefix the current error message with context ("loading 'x.gguf': ") and return status. */
kiln_status kiln__error_prefix(kiln_status status, const char *fmt, ...) KILN__PRINTF(2, 3);

/* Clear the thread's error message. */
void kiln__error_clear(void);

/* Allocation through the installed allocator. kiln__alloc_array checks n * size for overflow. All
 * return NULL on failure without setting an error; callers report KILN_E_NOMEM with context. */
void *kiln__alloc(size_t size);
void *kiln__calloc(size_t n, size_t size);
void *kiln__alloc_array(size_t n, size_t size);
void *kiln__realloc(void *ptr, size_t size);
void *kiln__realloc_array(void *ptr, size_t n, size_t size);
void kiln__dealloc(void *ptr);
char *kiln__strndup(const char *s, size_t len);

/* Shorthand for the common out-of-memory failure. */
kiln_status kiln__nomem(const char *what);

/* Overflow-checked arithmetic: return true on overflow. */
static inline bool kiln__mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool kiln__add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}
static inline bool kiln__mul_overflow_size(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool kiln__add_overflow_size(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out);
}
static inline bool kiln__mul_overflow_i64(int64_t a, int64_t b, int64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

/* Round x up to a multiple of align (a power of two); returns true on overflow. */
static inline bool kiln__align_up(uint64_t x, uint64_t align, uint64_t *out) {
    uint64_t t;
    if (kiln__add_overflow_u64(x, align - 1, &t)) return true;
    *out = t & ~(align - 1);
    return false;
}

#define KILN__MIN(a, b) ((a) < (b) ? (a) : (b))
#define KILN__MAX(a, b) ((a) > (b) ? (a) : (b))
#define KILN__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* CLOCK_MONOTONIC in nanoseconds (clock.c): profiles, the thread pool's spin budget, timing logs. */
uint64_t kiln__now_ns(void);

#endif /* KILN_CORE_H */
