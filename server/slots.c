/*
 * slots.c - llama-server's slot actions (/slots/{id}?action=save|restore|erase) on the engine: a cached
 * prompt's KV state written to a file and read back into the prefix cache, so that a prompt computed
 * before a restart is reused after it (kiln_ctx_state_save/load).
 *
 * Kiln has no fixed slots: requests take any free sequence, and finished ones stay in the prefix cache.
 * Slot k is the k-th most recently used entry of that cache (0: the prompt and reply of the last finished
 * request), k < cache_seqs. Save writes that entry's cells and tokens; erase evicts it; restore loads a
 * file into a free sequence and inserts it into the cache as the most recent entry (so it becomes slot 0),
 * where the next prompt that starts with its tokens reuses it. The restored cells must be free and
 * unreserved: least recently used entries are evicted for room, and running requests are never touched.
 *
 * The HTTP thread hands the action to the engine thread (which owns the context) and waits: the engine
 * runs it between two steps.
 */
#include "engine_impl.h"

#include "error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The index in the cache of slot k (the k-th most recently used entry), or -1. */
static int32_t entry_of_slot(const ks_pcache *pc, int32_t k) {
    for (int32_t i = 0; i < pc->n; i++) {
        int32_t newer = 0;
        for (int32_t j = 0; j < pc->n; j++)
            newer += pc->entries[j].used > pc->entries[i].used;
        if (newer == k) return i;
    }
    return -1;
}

static uint64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static kiln_status slot_save(ks_engine *e, int32_t i, const char *path, ks_slot_result *out) {
    ks_pcache_entry *en = &e->pcache.entries[i];
    kiln_status s = kiln_ctx_state_save(e->ctx, path, en->seq, en->tokens, en->n);
    if (s) return s;
    en->used = ++e->pcache.tick;
    out->n_tokens = en->n;
    out->bytes = file_size(path);
    return KILN_OK;
}

/* The state in a free sequence, within cells no running request has reserved; entries evicted (least
 * recently used first) until it fits. */
static kiln_status load_fitting(ks_engine *e, const char *path, int32_t seq, int32_t *tokens, int32_t *n) {
    for (;;) {
        int32_t used = kiln_kv_n_used(e->ctx);
        kiln_status s = kiln_ctx_state_load(e->ctx, path, seq, tokens, e->p.n_ctx, n);
        if (s == KILN_OK && e->p.n_ctx - kiln_kv_n_used(e->ctx) >= e->reserved_cells) {
            if (kiln_kv_n_used(e->ctx) - used == *n && kiln_kv_seq_pos_max(e->ctx, seq) == *n - 1)
                return KILN_OK;
            kiln_kv_seq_rm(e->ctx, seq, -1, -1);
            return kiln__error(KILN_E_INVALID_ARG,
                               "the state's cells do not hold its %d tokens at positions "
                               "0..%d, so it cannot serve as a cached prompt",
                               *n, *n - 1);
        }
        if (s == KILN_OK) {
            kiln_kv_seq_rm(e->ctx, seq, -1, -1);
            s = kiln__error(KILN_E_CONTEXT_FULL, "the state does not fit beside the running requests' cells");
        }
        if (s != KILN_E_CONTEXT_FULL || !ks__pcache_evict_lru(&e->pcache, -1)) return s;
    }
}

static kiln_status slot_restore(ks_engine *e, const char *path, ks_slot_result *out) {
    int32_t *tokens, n = 0, seq;
    kiln_status s;
    if (e->pcache.n == e->pcache.max) ks__pcache_evict_lru(&e->pcache, -1); /* a sequence id for it */
    /* With room in the cache, the pool holds a sequence beyond those admission may give to requests. */
    if (e->n_free_seqs == 0) return kiln__error(KILN_E_CONTEXT_FULL, "no free sequence for the state");
    if (!(tokens = malloc((size_t)e->p.n_ctx * sizeof *tokens)))
        return kiln__error(KILN_E_NOMEM, "out of memory for the restored tokens");
    seq = e->free_seqs[--e->n_free_seqs];
    if ((s = load_fitting(e, path, seq, tokens, &n))) {
        ks__engine_release_seq(e, seq);
        free(tokens);
        return s;
    }
    out->n_tokens = n;
    out->bytes = file_size(path);
    ks__pcache_insert(&e->pcache, seq, tokens, n);
    return KILN_OK;
}

/* Runs on the engine thread between steps. */
void ks__engine_run_slot_op(ks_engine *e, ks_slot_op *op) {
    double t0 = now_ms();
    int32_t i = op->action == KS_SLOT_RESTORE ? 0 : entry_of_slot(&e->pcache, op->slot);
    kiln_status s;
    if (i < 0) {
        s = kiln__error(KILN_E_NOT_FOUND, "slot %d holds no cached prompt (%d are cached)", op->slot,
                        e->pcache.n);
    } else if (op->action == KS_SLOT_SAVE) {
        s = slot_save(e, i, op->path, &op->result);
    } else if (op->action == KS_SLOT_RESTORE) {
        s = slot_restore(e, op->path, &op->result);
    } else {
        op->result.n_tokens = e->pcache.entries[i].n;
        e->pcache.entries[i].used = 0; /* the least recent, so that it goes first */
        s = ks__pcache_evict_lru(&e->pcache, -1) ? KILN_OK : KILN_E_INTERNAL;
    }
    op->status = s;
    if (s) snprintf(op->result.error, sizeof op->result.error, "%s", kiln_last_error());
    op->result.ms = now_ms() - t0;
}

/* Actions run until the engine stops, except while a shutdown waits for running requests: once those are
 * done (ks_engine_shutdown returned), the cache can be saved (persist.c). With e->mu held. */
static bool slots_open(const ks_engine *e) { return !e->stopping && (e->accepting || e->n_live == 0); }

kiln_status ks_engine_slot(ks_engine *e, ks_slot_action action, int32_t slot, const char *path,
                           ks_slot_result *out) {
    ks_slot_op op = {.action = action, .slot = slot, .path = path};
    memset(out, 0, sizeof *out);
    if (e->embeds || e->p.cache_seqs == 0)
        return kiln__error(KILN_E_UNSUPPORTED, "slot actions need a prefix cache (cache_seqs > 0) and a "
                                               "generation model");
    if (slot < 0 || slot >= e->p.cache_seqs)
        return kiln__error(KILN_E_INVALID_ARG, "slot %d is outside 0..%d (the prefix cache's entries)", slot,
                           e->p.cache_seqs - 1);
    pthread_mutex_lock(&e->mu);
    while (e->slot_op && slots_open(e)) /* one action at a time */
        pthread_cond_wait(&e->slot_cv, &e->mu);
    if (!slots_open(e)) {
        pthread_mutex_unlock(&e->mu);
        return kiln__error(KILN_E_UNSUPPORTED, "the server is shutting down");
    }
    e->slot_op = &op;
    pthread_cond_signal(&e->work_cv);
    while (!op.done)
        pthread_cond_wait(&e->slot_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    *out = op.result;
    return op.status ? kiln__error(op.status, "%s", op.result.error) : KILN_OK;
}
