/*
 * gguf_arena.c - a chunked arena for the NUL-terminated names and per-array tables of an open GGUF file
 * or a writer. Chunks never move, so pointers into them stay valid until the arena is freed; everything
 * is freed at once. Allocation failure returns NULL and leaves the arena usable.
 */
#include "gguf/gguf_internal.h"

#include "core/core.h"

#include <string.h>

#define CHUNK_MIN 65536u

struct kiln__gguf_chunk {
    kiln__gguf_chunk *next;
    size_t used, cap;
    uint64_t data[]; /* 8-byte aligned storage */
};

void *kiln__gguf_arena_alloc(kiln__gguf_arena *a, size_t size) {
    size_t need, total;
    kiln__gguf_chunk *c = a->head;
    if (kiln__add_overflow_size(size, 7, &need)) return NULL;
    need &= ~(size_t)7;
    if (!c || c->cap - c->used < need) {
        size_t cap = KILN__MAX(need, (size_t)CHUNK_MIN);
        if (kiln__add_overflow_size(cap, sizeof *c, &total)) return NULL;
        c = kiln__alloc(total);
        if (!c) return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = (uint8_t *)c->data + c->used;
    c->used += need;
    return p;
}

char *kiln__gguf_arena_strndup(kiln__gguf_arena *a, const char *s, size_t len) {
    size_t n;
    char *p;
    if (kiln__add_overflow_size(len, 1, &n)) return NULL;
    p = kiln__gguf_arena_alloc(a, n);
    if (!p) return NULL;
    if (len) memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

void kiln__gguf_arena_free(kiln__gguf_arena *a) {
    kiln__gguf_chunk *c = a->head;
    while (c) {
        kiln__gguf_chunk *next = c->next;
        kiln__dealloc(c);
        c = next;
    }
    a->head = NULL;
}
