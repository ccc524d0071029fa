/*
 * prefix_cache.h - finished sequences kept in the KV cache so that a later prompt starting with the same
 * tokens reuses their cells (kiln_kv_seq_cp) instead of recomputing them.
 *
 * An entry is a sequence id whose cells hold tokens[0..n) at positions 0..n-1. Lookup finds the entry
 * with the longest common token prefix with a prompt. Entries are evicted least recently used (a lookup
 * that matches refreshes its entry) when the cache is full, when the engine needs cells, or when a new
 * entry's tokens contain an older entry's tokens as a prefix (the older one can never match longer).
 * Evicting forgets the sequence's cells (kiln_kv_seq_rm) and hands its id back through `release`; cells
 * another sequence shares stay in use by that sequence.
 *
 * Used by the engine thread only.
 */
#ifndef KILN_SERVER_PREFIX_CACHE_H
#define KILN_SERVER_PREFIX_CACHE_H

#include "kiln.h"

#include <stdint.h>

typedef struct ks_pcache_entry {
    int32_t seq;
    int32_t *tokens; /* [n], owned */
    int32_t n;
    uint64_t used; /* tick of the last insert or match */
} ks_pcache_entry;

typedef struct ks_pcache {
    ks_pcache_entry *entries; /* [max] */
    int32_t n, max;
    uint64_t tick;
    kiln_ctx *ctx;
    void (*release)(void *user, int32_t seq);
    void *release_user;
} ks_pcache;

/* An empty cache of at most max entries (0 disables it: every insert is released at once). */
kiln_status ks__pcache_init(ks_pcache *pc, int32_t max, kiln_ctx *ctx, void (*release)(void *, int32_t),
                            void *release_user);
/* Evict everything and free the table. */
void ks__pcache_free(ks_pcache *pc);

/* The entry sharing the longest token prefix with prompt[0..n) (refreshed as used), or -1 when none
 * shares a token; *n_match receives that prefix's length. */
int32_t ks__pcache_lookup(ks_pcache *pc, const int32_t *prompt, int32_t n, int32_t *n_match);

/* Keep sequence seq, holding tokens[0..n) at positions 0..n-1; the cache takes the malloc'd token
 * array. When an entry already holds tokens of which these are a prefix, the new sequence is released
 * instead. */
void ks__pcache_insert(ks_pcache *pc, int32_t seq, int32_t *tokens, int32_t n);

/* Evict the least recently used entry other than entry `keep` (-1: any). Returns false when there is
 * none. Entry indices change on eviction. */
bool ks__pcache_evict_lru(ks_pcache *pc, int32_t keep);

/* The cells the entries' sequences hold, counting each entry's tokens (shared cells counted per entry). */
int32_t ks__pcache_tokens(const ks_pcache *pc);

#endif
