/*
 * kv_cache.c - the cell pool of a context's KV cache (see kv_cache.h). Every operation is a linear scan
 * over the cells: a few thousand entries of two small arrays, cheap next to one decode step.
 */
#include "runtime/kv_cache.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

kiln_status kiln__kv_init(kiln_kv_cells *kv, int32_t n_cells, int32_t n_seq_max) {
    memset(kv, 0, sizeof *kv);
    kv->pos = kiln__alloc_array((size_t)n_cells, sizeof *kv->pos);
    kv->seqs = kiln__alloc_array((size_t)n_cells, sizeof *kv->seqs);
    if (!kv->pos || !kv->seqs) {
        kiln__kv_free(kv);
        return kiln__nomem("the KV cell table");
    }
    kv->n_cells = n_cells;
    kv->n_seq_max = n_seq_max;
    kiln__kv_clear(kv);
    return KILN_OK;
}

void kiln__kv_free(kiln_kv_cells *kv) {
    kiln__dealloc(kv->pos);
    kiln__dealloc(kv->seqs);
    memset(kv, 0, sizeof *kv);
}

void kiln__kv_clear(kiln_kv_cells *kv) {
    for (int32_t c = 0; c < kv->n_cells; c++) {
        kv->pos[c] = -1;
        kv->seqs[c] = 0;
    }
    kv->n_used = 0;
    kv->head = 0;
}

kiln_status kiln__kv_find(const kiln_kv_cells *kv, int32_t n, int32_t *cells) {
    int32_t found = 0;
    if (n > kv->n_cells - kv->n_used)
        return kiln__error(KILN_E_CONTEXT_FULL, "%d tokens do not fit: %d of %d KV cells are in use", n,
                           kv->n_used, kv->n_cells);
    /* From head on, wrapping: a sequence decoding token by token gets adjacent cells, which keeps each
     * query's span of visible cells short. */
    for (int32_t k = 0; k < kv->n_cells && found < n; k++) {
        int32_t c = (kv->head + k) % kv->n_cells;
        if (!kv->seqs[c]) cells[found++] = c;
    }
    return found == n ? KILN_OK
                      : kiln__error(KILN_E_INTERNAL, "KV cell count %d disagrees with the table", kv->n_used);
}

void kiln__kv_occupy(kiln_kv_cells *kv, const int32_t *cells, const int32_t *pos, const int32_t *seq,
                     int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        kv->pos[cells[i]] = pos[i];
        kv->seqs[cells[i]] = (uint64_t)1 << seq[i];
    }
    kv->n_used += n;
    if (n > 0) kv->head = (cells[n - 1] + 1) % kv->n_cells;
}

void kiln__kv_release(kiln_kv_cells *kv, const int32_t *cells, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        kv->pos[cells[i]] = -1;
        kv->seqs[cells[i]] = 0;
    }
    kv->n_used -= n;
    if (n > 0) kv->head = cells[0];
}

void kiln__kv_fill_mask(const kiln_kv_cells *kv, const int32_t *pos, const int32_t *seq, int32_t n, int32_t T,
                        int32_t window, bool causal, float *mask) {
    const int32_t C = kv->n_cells;
    for (int32_t t = 0; t < T; t++) {
        float *row = mask + (size_t)t * (size_t)C;
        if (t >= n) {
            for (int32_t c = 0; c < C; c++)
                row[c] = -INFINITY;
            continue;
        }
        uint64_t bit = (uint64_t)1 << seq[t];
        int32_t p = causal ? pos[t] : INT32_MAX, lo = window > 0 && causal ? p - window + 1 : INT32_MIN;
        for (int32_t c = 0; c < C; c++)
            row[c] = (kv->seqs[c] & bit) && kv->pos[c] <= p && kv->pos[c] >= lo ? 0.0f : -INFINITY;
    }
}

int32_t kiln__kv_seq_pos_max(const kiln_kv_cells *kv, int32_t seq) {
    int32_t best = -1;
    if (seq < 0 || seq >= kv->n_seq_max) return -1;
    uint64_t bit = (uint64_t)1 << seq;
    for (int32_t c = 0; c < kv->n_cells; c++)
        if ((kv->seqs[c] & bit) && kv->pos[c] > best) best = kv->pos[c];
    return best;
}

static bool in_range(int32_t p, int32_t p0, int32_t p1) {
    return p >= p0 && p < p1;
}

void kiln__kv_seq_rm(kiln_kv_cells *kv, int32_t seq, int32_t p0, int32_t p1) {
    uint64_t bits = seq < 0 ? ~(uint64_t)0 : (uint64_t)1 << seq;
    for (int32_t c = 0; c < kv->n_cells; c++) {
        if (!(kv->seqs[c] & bits) || !in_range(kv->pos[c], p0, p1)) continue;
        kv->seqs[c] &= ~bits;
        if (!kv->seqs[c]) {
            kv->pos[c] = -1;
            kv->n_used--;
            if (c < kv->head) kv->head = c;
        }
    }
}

kiln_status kiln__kv_seq_cp(kiln_kv_cells *kv, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    uint64_t sbit = (uint64_t)1 << src, dbit = (uint64_t)1 << dst;
    if (src == dst) return KILN_OK;
    for (int32_t c = 0; c < kv->n_cells; c++)
        if ((kv->seqs[c] & dbit) && in_range(kv->pos[c], p0, p1) && (kv->seqs[c] & sbit) == 0)
            return kiln__error(KILN_E_INVALID_ARG,
                               "kiln_kv_seq_cp: sequence %d already holds position %d of the range [%d, %d)",
                               dst, kv->pos[c], p0, p1);
    for (int32_t c = 0; c < kv->n_cells; c++)
        if ((kv->seqs[c] & sbit) && in_range(kv->pos[c], p0, p1)) kv->seqs[c] |= dbit;
    return KILN_OK;
}

void kiln__kv_seq_keep(kiln_kv_cells *kv, int32_t seq) {
    uint64_t bit = (uint64_t)1 << seq;
    for (int32_t c = 0; c < kv->n_cells; c++) {
        if (!kv->seqs[c] || (kv->seqs[c] & bit)) {
            if (kv->seqs[c]) kv->seqs[c] = bit;
            continue;
        }
        kv->seqs[c] = 0;
        kv->pos[c] = -1;
        kv->n_used--;
        if (c < kv->head) kv->head = c;
    }
}

kiln_status kiln__kv_check(const kiln_kv_cells *kv) {
    int32_t used = 0;
    for (int32_t c = 0; c < kv->n_cells; c++) {
        if ((kv->pos[c] < 0) != (kv->seqs[c] == 0))
            return kiln__error(KILN_E_INTERNAL, "KV cell %d: position %d with sequence mask %#llx", c,
                               kv->pos[c], (unsigned long long)kv->seqs[c]);
        if (kv->n_seq_max < 64 && (kv->seqs[c] >> kv->n_seq_max))
            return kiln__error(KILN_E_INTERNAL, "KV cell %d names a sequence >= %d", c, kv->n_seq_max);
        used += kv->seqs[c] != 0;
        for (int32_t d = c + 1; d < kv->n_cells; d++)
            if (kv->pos[d] == kv->pos[c] && (kv->seqs[c] & kv->seqs[d]))
                return kiln__error(KILN_E_INTERNAL, "KV cells %d and %d hold position %d of one sequence", c,
                                   d, kv->pos[c]);
    }
    if (used != kv->n_used)
        return kiln__error(KILN_E_INTERNAL, "KV cache counts %d used cells, the table has %d", kv->n_used,
                           used);
    return KILN_OK;
}
