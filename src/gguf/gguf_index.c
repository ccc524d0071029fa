/*
 * gguf_index.c - a hash table from names (keys or tensor names) to indexes, used for lookups and to
 * detect duplicates in O(1) per name. Open addressing with linear probing, FNV-1a hashes, kept at most
 * half full. Names are borrowed: they must outlive the index.
 */
#include "gguf/gguf_internal.h"

#include "core/core.h"

#include <string.h>

static uint64_t hash_name(const char *s, size_t len) {
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3u;
    }
    return h;
}

static size_t probe(const kiln__gguf_slot *slots, size_t cap, const char *name, size_t len, uint64_t h) {
    size_t mask = cap - 1, i = (size_t)h & mask;
    while (slots[i].name) {
        if (slots[i].hash == h && slots[i].len == len && memcmp(slots[i].name, name, len) == 0) break;
        i = (i + 1) & mask;
    }
    return i;
}

/* Double the table (or create it) and rehash every entry. */
static kiln_status grow(kiln__gguf_index *ix) {
    size_t cap = ix->cap ? ix->cap * 2 : 16;
    kiln__gguf_slot *slots;
    if (cap < ix->cap) return kiln__nomem("a name index");
    slots = kiln__calloc(cap, sizeof *slots);
    if (!slots) return kiln__nomem("a name index");
    for (size_t i = 0; i < ix->cap; i++) {
        const kiln__gguf_slot *s = &ix->slots[i];
        if (s->name) slots[probe(slots, cap, s->name, s->len, s->hash)] = *s;
    }
    kiln__dealloc(ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    return KILN_OK;
}

kiln_status kiln__gguf_index_insert(kiln__gguf_index *ix, const char *name, size_t len, int64_t value,
                                    int64_t *existing) {
    uint64_t h = hash_name(name, len);
    size_t i;
    *existing = -1;
    if (ix->cap) {
        i = probe(ix->slots, ix->cap, name, len, h);
        if (ix->slots[i].name) {
            *existing = ix->slots[i].value;
            return KILN_OK;
        }
    }
    if ((ix->count + 1) * 2 > ix->cap) {
        kiln_status s = grow(ix);
        if (s) return s;
    }
    i = probe(ix->slots, ix->cap, name, len, h);
    ix->slots[i] = (kiln__gguf_slot){name, len, h, value};
    ix->count++;
    return KILN_OK;
}

int64_t kiln__gguf_index_find(const kiln__gguf_index *ix, const char *name, size_t len) {
    size_t i;
    if (!ix->cap) return -1;
    i = probe(ix->slots, ix->cap, name, len, hash_name(name, len));
    return ix->slots[i].name ? ix->slots[i].value : -1;
}

void kiln__gguf_index_free(kiln__gguf_index *ix) {
    kiln__dealloc(ix->slots);
    ix->slots = NULL;
    ix->cap = ix->count = 0;
}
