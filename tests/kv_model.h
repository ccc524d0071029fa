/*
 * kv_model.h - a model of the KV cache written from include/kiln.h alone, shared by the seeded property
 * test (test_kv_cache.c) and the batch fuzzer (fuzz/fuzz_batch.c): a set of cells, each holding one
 * position and the set of sequences that share it. A batch takes one new cell per token; seq_cp adds dst
 * to src's cells in the range (no new cell); seq_rm takes the sequence (every sequence for -1) off the
 * cells in the range and frees a cell whose set becomes empty; seq_keep frees every cell that does not
 * hold the kept sequence and takes the others off the rest; reset frees everything. Each cell also keeps
 * a hash of the tokens its K and V were computed from, so a caller can tell a clean history.
 *
 * The includer defines N_CTX (cells) and N_SEQ (sequences, at most 32).
 */
#ifndef KILN_TEST_KV_MODEL_H
#define KILN_TEST_KV_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#if !defined(N_CTX) || !defined(N_SEQ)
#error "define N_CTX and N_SEQ before including kv_model.h"
#endif

typedef struct mcell {
    int32_t pos;   /* -1: free */
    uint32_t seqs; /* bit s: sequence s holds the cell */
    int32_t token;
    uint64_t hist; /* hash of the tokens at positions 0..pos the cell's K and V were computed from; 0 when
                    * its sequence did not then hold a clean history 0..pos - 1 */
} mcell;

typedef struct kv_model {
    mcell cell[N_CTX];
} kv_model;

#define HIST_START 0x243f6a8885a308d3ull

static inline uint64_t hist_next(uint64_t h, int32_t token) {
    h ^= (uint64_t)(uint32_t)token + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h | 1; /* never 0, the mark of an unclean history */
}

static inline void model_reset(kv_model *m) {
    for (int32_t c = 0; c < N_CTX; c++) {
        m->cell[c].pos = -1;
        m->cell[c].seqs = 0;
    }
}

static inline int32_t model_used(const kv_model *m) {
    int32_t n = 0;
    for (int32_t c = 0; c < N_CTX; c++)
        n += m->cell[c].seqs != 0;
    return n;
}

static inline int32_t model_pos_max(const kv_model *m, int32_t s) {
    int32_t best = -1;
    for (int32_t c = 0; c < N_CTX; c++)
        if ((m->cell[c].seqs >> s & 1u) && m->cell[c].pos > best) best = m->cell[c].pos;
    return best;
}

/* map[q] = the cell holding position q of s, or -1, for q < n (n <= N_CTX: a clean history of n positions
 * needs n cells, so no caller asks for more). */
static inline void model_map(const kv_model *m, int32_t s, int32_t n, int32_t *map) {
    for (int32_t q = 0; q < n; q++)
        map[q] = -1;
    for (int32_t c = 0; c < N_CTX; c++)
        if ((m->cell[c].seqs >> s & 1u) && m->cell[c].pos < n) map[m->cell[c].pos] = c;
}

/* True when s holds positions 0..P (P = its pos_max; none is fine too), each computed from exactly the
 * cells s holds before it; toks[0..P] receives its tokens. */
static inline bool model_clean(const kv_model *m, int32_t s, int32_t *toks, int32_t *P) {
    int32_t map[N_CTX];
    uint64_t h = HIST_START;
    *P = model_pos_max(m, s);
    if (*P >= N_CTX) return false; /* P + 1 positions cannot fit in N_CTX cells */
    model_map(m, s, *P + 1, map);
    for (int32_t q = 0; q <= *P; q++) {
        if (map[q] < 0) return false;
        h = hist_next(h, m->cell[map[q]].token);
        if (m->cell[map[q]].hist != h) return false;
        toks[q] = m->cell[map[q]].token;
    }
    return true;
}

/* A batch token: a new cell at position p of s (the batch was accepted, so a cell is free). */
static inline void model_add(kv_model *m, int32_t s, int32_t p, int32_t token) {
    int32_t map[N_CTX], c = 0;
    uint64_t h = p <= N_CTX ? HIST_START : 0; /* p earlier positions need p cells */
    if (h) model_map(m, s, p, map);
    for (int32_t q = 0; q < p && h; q++) {
        if (map[q] < 0) {
            h = 0;
            break;
        }
        h = hist_next(h, m->cell[map[q]].token);
        if (m->cell[map[q]].hist != h) h = 0;
    }
    while (m->cell[c].seqs)
        c++;
    m->cell[c].pos = p;
    m->cell[c].seqs = 1u << s;
    m->cell[c].token = token;
    m->cell[c].hist = h ? hist_next(h, token) : 0;
}

static inline bool in_range(int32_t p, int32_t p0, int32_t p1) {
    return p >= (p0 < 0 ? 0 : p0) && (p1 < 0 || p < p1);
}

static inline void model_rm(kv_model *m, int32_t s, int32_t p0, int32_t p1) {
    uint32_t bits = s < 0 ? (1u << N_SEQ) - 1 : 1u << s;
    for (int32_t c = 0; c < N_CTX; c++) {
        if (!(m->cell[c].seqs & bits) || !in_range(m->cell[c].pos, p0, p1)) continue;
        m->cell[c].seqs &= ~bits;
        if (!m->cell[c].seqs) m->cell[c].pos = -1;
    }
}

static inline void model_cp(kv_model *m, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    for (int32_t c = 0; c < N_CTX; c++)
        if ((m->cell[c].seqs >> src & 1u) && in_range(m->cell[c].pos, p0, p1)) m->cell[c].seqs |= 1u << dst;
}

static inline void model_keep(kv_model *m, int32_t s) {
    for (int32_t c = 0; c < N_CTX; c++) {
        if (m->cell[c].seqs >> s & 1u)
            m->cell[c].seqs = 1u << s;
        else {
            m->cell[c].seqs = 0;
            m->cell[c].pos = -1;
        }
    }
}

#endif
