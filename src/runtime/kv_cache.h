/*
 * kv_cache.h - the bookkeeping of a context's KV cache: a pool of n_cells cells shared by every sequence.
 *
 * A cell holds the K and V rows of one token (in every layer; the rows themselves live in the context's
 * cache buffer, row c of each layer's K and V matrices). Its metadata is the token's position and the set
 * of sequences it belongs to (a bit mask): a prefix copied with seq_cp is one set of cells whose masks
 * name several sequences, so sharing costs neither recomputation nor memory. A cell with an empty mask is
 * free. Nothing here touches K or V: the graph writes them (cache_write at the cells kiln__kv_find chose)
 * and reads them through the attention mask kiln__kv_fill_mask builds.
 *
 * Invariants (kiln__kv_check): pos[c] == -1 exactly when seqs[c] == 0; n_used counts the cells with a
 * non-empty mask; a sequence holds at most one cell per position.
 */
#ifndef KILN_RUNTIME_KV_CACHE_H
#define KILN_RUNTIME_KV_CACHE_H

#include "kiln.h"

typedef struct kiln_kv_cells {
    int32_t n_cells;
    int32_t n_seq_max;
    int32_t n_used;
    int32_t head;   /* where the next search for free cells starts */
    int32_t *pos;   /* [n_cells] the token's position, -1 when free */
    uint64_t *seqs; /* [n_cells] bit s: the cell belongs to sequence s */
} kiln_kv_cells;

kiln_status kiln__kv_init(kiln_kv_cells *kv, int32_t n_cells, int32_t n_seq_max);
void kiln__kv_free(kiln_kv_cells *kv);
void kiln__kv_clear(kiln_kv_cells *kv);

/* n free cells (not necessarily adjacent), in cells[0..n); KILN_E_CONTEXT_FULL when fewer are free.
 * Changes nothing: kiln__kv_occupy takes them. */
kiln_status kiln__kv_find(const kiln_kv_cells *kv, int32_t n, int32_t *cells);
/* Give cell cells[i] to token i (position pos[i] of sequence seq[i]). */
void kiln__kv_occupy(kiln_kv_cells *kv, const int32_t *cells, const int32_t *pos, const int32_t *seq,
                     int32_t n);
/* Free cells taken by kiln__kv_occupy (a batch that failed). */
void kiln__kv_release(kiln_kv_cells *kv, const int32_t *cells, int32_t n);

/* The additive attention mask of a batch, [n_cells, T] row-major by token: entry (c, t) is 0 when token t
 * (position pos[t] of sequence seq[t]) sees cell c, else -inf. A causal token sees the cells of its
 * sequence at positions <= pos[t] (and within the last `window` positions when window > 0); a token of a
 * non-causal model (an encoder) sees every cell of its sequence, with no window. Rows n .. T - 1
 * (padding tokens) are all -inf. */
void kiln__kv_fill_mask(const kiln_kv_cells *kv, const int32_t *pos, const int32_t *seq, int32_t n, int32_t T,
                        int32_t window, bool causal, float *mask);

int32_t kiln__kv_seq_pos_max(const kiln_kv_cells *kv, int32_t seq);
/* Forget positions [p0, p1) of seq (every sequence when seq < 0). */
void kiln__kv_seq_rm(kiln_kv_cells *kv, int32_t seq, int32_t p0, int32_t p1);
/* dst shares src's cells at positions [p0, p1); fails when dst already holds one of those positions. */
kiln_status kiln__kv_seq_cp(kiln_kv_cells *kv, int32_t src, int32_t dst, int32_t p0, int32_t p1);
void kiln__kv_seq_keep(kiln_kv_cells *kv, int32_t seq);

/* Check the invariants; KILN_E_INTERNAL naming the first broken one. For tests. */
kiln_status kiln__kv_check(const kiln_kv_cells *kv);

#endif
