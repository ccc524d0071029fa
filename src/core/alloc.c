/*
 * alloc.c - the one allocator every Kiln heap allocation goes through.
 *
 * kiln_set_allocator() swaps it (tests count allocations on the decode path and fail each allocation in
 * turn). Array helpers check the multiplication for overflow before asking for memory.
 */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

static void *libc_alloc(size_t size, void *user) {
    (void)user;
    return malloc(size);
}
static void *libc_realloc(void *ptr, size_t size, void *user) {
    (void)user;
    return realloc(ptr, size);
}
static void libc_free(void *ptr, void *user) {
    (void)user;
    free(ptr);
}

static const kiln_allocator libc_allocator = {libc_alloc, libc_realloc, libc_free, NULL};
static kiln_allocator current = {libc_alloc, libc_realloc, libc_free, NULL};

void kiln_set_allocator(const kiln_allocator *allocator) {
    current = allocator ? *allocator : libc_allocator;
}

void *kiln__alloc(size_t size) { return current.alloc(size ? size : 1, current.user); }

void *kiln__calloc(size_t n, size_t size) {
    void *p = kiln__alloc_array(n, size);
    if (p) memset(p, 0, n * size);
    return p;
}

void *kiln__alloc_array(size_t n, size_t size) {
    size_t total;
    if (kiln__mul_overflow_size(n, size, &total)) return NULL;
    return kiln__alloc(total);
}

void *kiln__realloc(void *ptr, size_t size) { return current.realloc(ptr, size ? size : 1, current.user); }

void *kiln__realloc_array(void *ptr, size_t n, size_t size) {
    size_t total;
    if (kiln__mul_overflow_size(n, size, &total)) return NULL;
    return kiln__realloc(ptr, total);
}

void kiln__dealloc(void *ptr) {
    if (ptr) current.free(ptr, current.user);
}

void kiln_free(void *ptr) { kiln__dealloc(ptr); }

char *kiln__strndup(const char *s, size_t len) {
    char *p = kiln__alloc(len + 1);
    if (!p) return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}
