/*
 * dfa.c - the memo of recognizer moves (dfa.h): interned sets of stacks in one pool, found by an
 * order-independent hash, and moves in an open-addressing table.
 */
#include "grammar/dfa.h"

#include <string.h>

void kiln__kg_dfa_free(kg_dfa *d) {
    kiln__dealloc(d->pool);
    kiln__dealloc(d->sets);
    kiln__dealloc(d->set_slots);
    kiln__dealloc(d->move_keys);
    kiln__dealloc(d->move_vals);
    memset(d, 0, sizeof *d);
}

void kiln__kg_dfa_trim(kg_dfa *d) {
    if (2 * d->n_sets <= KG_DFA_MAX_SETS && 2 * d->pool_len <= KG_DFA_MAX_POOL &&
        2 * d->n_moves <= KG_DFA_MAX_MOVES)
        return;
    d->pool_len = 0;
    d->n_sets = 0;
    d->n_moves = 0;
    if (d->set_slots) memset(d->set_slots, 0, d->n_set_slots * sizeof *d->set_slots);
    if (d->move_keys) memset(d->move_keys, 0, d->n_move_slots * sizeof *d->move_keys);
}

static bool grow_set_slots(kg_dfa *d) {
    uint32_t n = d->n_set_slots ? 2 * d->n_set_slots : 64;
    uint32_t *slots = kiln__calloc(n, sizeof *slots);
    if (!slots) return false;
    for (uint32_t id = 0; id < d->n_sets; id++) {
        uint32_t i = (uint32_t)d->sets[id].hash & (n - 1);
        while (slots[i])
            i = (i + 1) & (n - 1);
        slots[i] = id + 1;
    }
    kiln__dealloc(d->set_slots);
    d->set_slots = slots, d->n_set_slots = n;
    return true;
}

uint32_t kiln__kg_dfa_intern(kg_dfa *d, const kg_work *w, const kg_set *s) {
    uint64_t h = kiln__kg_hash(w, s);
    size_t len = s->end - s->start;
    if (d->n_set_slots) {
        for (uint32_t i = (uint32_t)h & (d->n_set_slots - 1); d->set_slots[i];
             i = (i + 1) & (d->n_set_slots - 1)) {
            const kg_dfa_set *e = &d->sets[d->set_slots[i] - 1];
            if (e->hash == h && kiln__kg_equal(w, s, d->pool + e->off, e->len, e->count))
                return d->set_slots[i] - 1;
        }
    }
    if (d->n_sets >= KG_DFA_MAX_SETS || d->pool_len + len > KG_DFA_MAX_POOL) return KG_DFA_FULL;
    if (2 * (d->n_sets + 1) > d->n_set_slots && !grow_set_slots(d)) return KG_DFA_FULL;
    if (d->n_sets == d->sets_cap) {
        uint32_t cap = d->sets_cap ? 2 * d->sets_cap : 32;
        kg_dfa_set *sets = kiln__realloc_array(d->sets, cap, sizeof *sets);
        if (!sets) return KG_DFA_FULL;
        d->sets = sets, d->sets_cap = cap;
    }
    if (d->pool_len + len > d->pool_cap) {
        size_t cap = d->pool_cap ? d->pool_cap : 512;
        while (cap < d->pool_len + len)
            cap *= 2;
        uint32_t *pool = kiln__realloc_array(d->pool, cap, sizeof *pool);
        if (!pool) return KG_DFA_FULL;
        d->pool = pool, d->pool_cap = cap;
    }
    memcpy(d->pool + d->pool_len, w->arena + s->start, len * sizeof *d->pool);
    uint32_t id = d->n_sets++;
    d->sets[id] = (kg_dfa_set){d->pool_len, len, s->count, h};
    d->pool_len += len;
    uint32_t i = (uint32_t)h & (d->n_set_slots - 1);
    while (d->set_slots[i])
        i = (i + 1) & (d->n_set_slots - 1);
    d->set_slots[i] = id + 1;
    return id;
}

static uint64_t move_key(uint32_t id, uint32_t cp) {
    return ((uint64_t)id << 21 | cp) + 1;
}

static uint32_t move_slot(uint64_t key, uint32_t n) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (n - 1);
}

int kiln__kg_dfa_lookup(const kg_dfa *d, uint32_t id, uint32_t cp, uint32_t *next) {
    if (!d->n_move_slots) return 0;
    uint64_t key = move_key(id, cp);
    for (uint32_t i = move_slot(key, d->n_move_slots); d->move_keys[i]; i = (i + 1) & (d->n_move_slots - 1))
        if (d->move_keys[i] == key) {
            *next = d->move_vals[i];
            return 1;
        }
    return 0;
}

static bool grow_moves(kg_dfa *d) {
    uint32_t n = d->n_move_slots ? 2 * d->n_move_slots : 256;
    uint64_t *keys = kiln__calloc(n, sizeof *keys);
    uint32_t *vals = kiln__alloc_array(n, sizeof *vals);
    if (!keys || !vals) {
        kiln__dealloc(keys);
        kiln__dealloc(vals);
        return false;
    }
    for (uint32_t j = 0; j < d->n_move_slots; j++) {
        if (!d->move_keys[j]) continue;
        uint32_t i = move_slot(d->move_keys[j], n);
        while (keys[i])
            i = (i + 1) & (n - 1);
        keys[i] = d->move_keys[j], vals[i] = d->move_vals[j];
    }
    kiln__dealloc(d->move_keys);
    kiln__dealloc(d->move_vals);
    d->move_keys = keys, d->move_vals = vals, d->n_move_slots = n;
    return true;
}

void kiln__kg_dfa_remember(kg_dfa *d, uint32_t id, uint32_t cp, uint32_t next) {
    if (d->n_moves >= KG_DFA_MAX_MOVES) return;
    if (2 * (d->n_moves + 1) > d->n_move_slots && !grow_moves(d)) return;
    uint64_t key = move_key(id, cp);
    uint32_t i = move_slot(key, d->n_move_slots);
    while (d->move_keys[i])
        i = (i + 1) & (d->n_move_slots - 1);
    d->move_keys[i] = key, d->move_vals[i] = next;
    d->n_moves++;
}
