/*
 * prefix_cache.c - the table of cached sequences (prefix_cache.h). The table is small (at most
 * KILN_SEQ_MAX entries), so lookup and LRU are linear scans.
 */
#include "prefix_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

kiln_status ks__pcache_init(ks_pcache *pc, int32_t max, kiln_ctx *ctx, void (*release)(void *, int32_t),
                            void *release_user) {
    memset(pc, 0, sizeof *pc);
    pc->ctx = ctx;
    pc->release = release;
    pc->release_user = release_user;
    pc->max = max > 0 ? max : 0;
    if (pc->max > 0 && !(pc->entries = calloc((size_t)pc->max, sizeof *pc->entries))) return KILN_E_NOMEM;
    return KILN_OK;
}

static void evict_at(ks_pcache *pc, int32_t i) {
    ks_pcache_entry *e = &pc->entries[i];
    kiln_kv_seq_rm(pc->ctx, e->seq, -1, -1);
    pc->release(pc->release_user, e->seq);
    free(e->tokens);
    pc->entries[i] = pc->entries[--pc->n];
}

void ks__pcache_free(ks_pcache *pc) {
    while (pc->n > 0)
        evict_at(pc, pc->n - 1);
    free(pc->entries);
    memset(pc, 0, sizeof *pc);
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

int32_t ks__pcache_lookup(ks_pcache *pc, const int32_t *prompt, int32_t n, int32_t *n_match) {
    int32_t best = -1, best_len = 0;
    for (int32_t i = 0; i < pc->n; i++) {
        int32_t len = common_prefix(pc->entries[i].tokens, pc->entries[i].n, prompt, n);
        if (len > best_len) best = i, best_len = len;
    }
    if (best >= 0) pc->entries[best].used = ++pc->tick;
    *n_match = best_len;
    return best;
}

void ks__pcache_insert(ks_pcache *pc, int32_t seq, int32_t *tokens, int32_t n) {
    for (int32_t i = 0; i < pc->n; i++) {
        ks_pcache_entry *e = &pc->entries[i];
        if (e->n >= n && common_prefix(e->tokens, e->n, tokens, n) == n) { /* nothing new to keep */
            e->used = ++pc->tick;
            kiln_kv_seq_rm(pc->ctx, seq, -1, -1);
            pc->release(pc->release_user, seq);
            free(tokens);
            return;
        }
    }
    for (int32_t i = pc->n - 1; i >= 0; i--) /* entries the new one contains */
        if (common_prefix(pc->entries[i].tokens, pc->entries[i].n, tokens, n) == pc->entries[i].n)
            evict_at(pc, i);
    if (pc->max == 0 || n == 0) {
        kiln_kv_seq_rm(pc->ctx, seq, -1, -1);
        pc->release(pc->release_user, seq);
        free(tokens);
        return;
    }
    if (pc->n == pc->max) ks__pcache_evict_lru(pc, -1);
    pc->entries[pc->n++] = (ks_pcache_entry){.seq = seq, .tokens = tokens, .n = n, .used = ++pc->tick};
}

bool ks__pcache_evict_lru(ks_pcache *pc, int32_t keep) {
    int32_t victim = -1;
    for (int32_t i = 0; i < pc->n; i++)
        if (i != keep && (victim < 0 || pc->entries[i].used < pc->entries[victim].used)) victim = i;
    if (victim < 0) return false;
    evict_at(pc, victim);
    return true;
}

int32_t ks__pcache_tokens(const ks_pcache *pc) {
    int32_t total = 0;
    for (int32_t i = 0; i < pc->n; i++)
        total += pc->entries[i].n;
    return total;
}
