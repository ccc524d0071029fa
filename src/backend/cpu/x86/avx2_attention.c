/*
 * avx2_attention.c - masked grouped-query attention, flash style, with the queries in the vector lanes: the
 * AVX2 twin of avx512_attention.c (read its header for the design), 8 lanes instead of 16. The generic
 * kernel (kernels_flash_attention.c) walks one query at a time and pays a horizontal sum and a libm expf
 * per key; here 8 query rows that share a KV head run side by side, one per lane:
 *
 *   scores  for 8 keys at a time, acc[j] += Qt[d] * K[j][d] (broadcast) over d, Qt being the unit's
 *           queries transposed once ([D][8 lanes], pre-multiplied by the softmax scale); each lane's mask
 *           value is added, and keys the lane's mask hides become -inf (a blend, whatever the score was);
 *   softmax the running maximum m and denominator l are per lane (vector online-softmax update);
 *   values  Ot[d] = Ot[d] * c + sum_j p[j] * V[j][d] (broadcast), 8 dimensions in registers at a time.
 *           AVX2 has no masked FMA: where a tile is not seen whole by every lane, the broadcast V value is
 *           ANDed with the lanes that see key j, so a hidden cell's V (never written: NaN or inf) never
 *           enters a lane; there p is exactly 0 too (exp8 maps -inf to 0), so the lane adds +0 * 0.
 *
 * K/V caches in F16 or Q8_0 are converted 8 keys at a time into scratch (the blocks covering the head's
 * elements), then read as F32 rows; F32 caches are read in place.
 *
 * A unit is 8 consecutive (position, head) rows of one KV head's group: with GQA groups of 8 (TinyLlama,
 * Llama 3), one position; without GQA, 8 positions of one head. The unit visits the key tiles (KV_TILE keys,
 * starting at multiples of KV_TILE) that cover the union of its lanes' visible ranges and skips every 8-key
 * block that all its lanes' masks hide (-inf, or the float minimum of exported graphs: row_floor). A tile or
 * block a lane does not see leaves that lane's m, l and Ot as they were (c = exp(0) = 1, p = 0), so each
 * lane's result depends only on its own mask row and the key tiling, not on the thread count: units are dealt
 * to threads round-robin and thread counts agree bit for bit. A lane that sees no key outputs zeros.
 *
 * Error against the reference (kiln__cpu_attention, which materializes the scores and normalizes before
 * the weighted sum): both are float computations; this one sums the scores' products in d order with FMA,
 * rescales the running sums once per tile, and divides at the end. With |q|, |k|, |v| <= 1 the relative
 * error of each output is a few ulps times the number of rescalings plus the summation length's rounding,
 * which the test bounds as 2e-6 * (1 + |ref|) for D <= 64 and C <= 200 keys. exp is kiln__exp8
 * (avx2_exp.h: the same polynomial as the AVX-512 exp, within 2.5e-7 relative of libm's expf).
 */
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_kv.h"

#if defined(__x86_64__)
#include "backend/cpu/x86/avx2_exp.h"
#include "tensor/types.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define KILN_AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX2

#define LANES 8
#define KV_TILE 64
#define KBLOCK 8 /* keys scored together, and the unit of skipping hidden keys */
#define DBLOCK 8 /* value dimensions kept in registers at a time */
#define DMAX 256 /* the largest head dimension taken (kpad's size) */

/* The unit's view of the node. */
typedef struct unit_ctx {
    const kiln_tensor *q, *k, *v, *dst;
    const float *mask; /* [C, T] contiguous */
    int64_t D, group, T, C;
    float scale;
    float *qt, *p, *ot; /* scratch: [D][8], [KV_TILE][8], [D][8] */
    float *mt;          /* scratch: the tile's mask values, [KV_TILE][8] */
    float *kbuf, *vbuf; /* scratch for F16 / Q8_0 caches: a key tile as floats, [KV_TILE][D] each */
    float *tmp;         /* scratch: one dequantized cache segment (D + 64 floats) */
} unit_ctx;

/* Rows j0 .. j0 + n of KV head hk as float rows (kiln__cpu_kv_head_rows), converted into buf unless F32. */
static const char *kv_rows(const unit_ctx *u, const kiln_tensor *c, int64_t hk, int64_t j0, int64_t n,
                           float *buf, size_t *stride) {
    return kiln__cpu_kv_head_rows(c, u->D, hk, j0, n, buf, u->tmp, stride);
}

/* Which mask values hide a key from a row: -inf always; the float minimum too, where the row has a key
 * above it. Exported PyTorch graphs (HF GPT-2, BERT) hide keys with the float minimum rather than -inf;
 * a score plus that is -FLT_MAX (|score| < 2^103), whose exp against the row's maximum, a visible
 * score, is exactly 0: such a key adds exactly nothing (p = 0, and p * V = 0 for a finite V), before or
 * after the row's first visible key (a run of them first leaves m = -FLT_MAX and sums that the first
 * visible key rescales by exp(-FLT_MAX - s) = 0). Skipping it thus changes no output beyond the sign of
 * a zero, and lets a causal export skip its upper triangle as a -inf mask does. A row with no key above
 * the float minimum (ONNX: every key hidden) keeps them all, and averages the values as the reference. */
INLINE float row_floor(const float *m, int64_t n) {
    for (int64_t j = 0; j < n; j++)
        if (!(m[j] <= -FLT_MAX)) return -FLT_MAX;
    return -INFINITY;
}

/* Lanes of v above the floor (or NaN), as a bit mask. */
INLINE unsigned visible_bits(__m256 v, __m256 floor) {
    return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(v, floor, _CMP_NLE_UQ));
}

/* The first entry of m[0..n) above the floor, or n (scalar reference: kiln__cpu_mask_range). */
INLINE int64_t first_visible(const float *m, int64_t n, float floor) {
    int64_t a = 0;
    for (; a + 8 <= n; a += 8) {
        unsigned vis = visible_bits(_mm256_loadu_ps(m + a), _mm256_set1_ps(floor));
        if (vis) return a + __builtin_ctz(vis);
    }
    while (a < n && m[a] <= floor)
        a++;
    return a;
}

/* The last entry of m[0..n) above the floor, or -1. */
INLINE int64_t last_visible(const float *m, int64_t n, float floor) {
    int64_t b = n;
    for (; b >= 8; b -= 8) {
        unsigned vis = visible_bits(_mm256_loadu_ps(m + b - 8), _mm256_set1_ps(floor));
        if (vis) return b - 8 + 31 - __builtin_clz(vis);
    }
    while (b > 0 && m[b - 1] <= floor)
        b--;
    return b - 1;
}

/* *p in every lane, through the integer broadcast (vpbroadcastd): on Zen 1 a float broadcast from memory
 * (vbroadcastss) costs more, and this kernel does one per FMA: 25.8 -> 32.9 GFLOPS for the scores8 loop in
 * isolation. The same bits either way. */
INLINE __m256 bcast(const float *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_castsi256_ps(_mm256_set1_epi32(v));
}

/* Scores of 8 keys starting at row kr (stride ks bytes) for the 8 lanes, into p[0..7][lanes]. */
INLINE void scores8(const unit_ctx *u, const char *kr, size_t ks, float *p) {
    __m256 acc[KBLOCK];
    for (int j = 0; j < KBLOCK; j++)
        acc[j] = _mm256_setzero_ps();
    for (int64_t d = 0; d < u->D; d++) {
        __m256 qv = _mm256_load_ps(u->qt + d * LANES);
        for (int j = 0; j < KBLOCK; j++)
            acc[j] = _mm256_fmadd_ps(qv, bcast((const float *)(kr + (size_t)j * ks + (size_t)d * 4)), acc[j]);
    }
    for (int j = 0; j < KBLOCK; j++)
        _mm256_store_ps(p + j * LANES, acc[j]);
}

/* The scores of the live 8-key blocks of the tile (nj keys) into p: blocks of 8 keys scored in place, a
 * partial last block through a zero-padded copy. */
INLINE void tile_scores(const unit_ctx *u, const char *const *kb, size_t ks, unsigned live, int64_t nj) {
    float kpad[KBLOCK * DMAX] __attribute__((aligned(32)));
    for (int64_t jb = 0; jb < nj; jb += KBLOCK) {
        if (!(live >> (jb / KBLOCK) & 1)) continue;
        if (nj - jb >= KBLOCK) {
            scores8(u, kb[jb / KBLOCK], ks, u->p + jb * LANES);
            continue;
        }
        memset(kpad, 0, (size_t)KBLOCK * (size_t)u->D * sizeof(float));
        for (int64_t j = 0; j < nj - jb; j++)
            memcpy(kpad + j * u->D, kb[jb / KBLOCK] + (size_t)j * ks, (size_t)u->D * 4);
        scores8(u, (const char *)kpad, (size_t)u->D * 4, u->p + jb * LANES);
    }
}

/* Ot[d0 .. d0 + nd) = Ot * c + sum over the tile's live blocks of p[j] * V[j][d]; unless every lane sees
 * every key of the tile (full), each broadcast V value is ANDed with vis[j], the lanes that see key j
 * (nd <= DBLOCK). Block b's rows start at vb[b], stride vs bytes. */
INLINE void values(const unit_ctx *u, const char *const *vb, size_t vs, unsigned live, int64_t nj,
                   const __m256 *vis, bool full, int64_t d0, int nd, __m256 c) {
    __m256 o[DBLOCK];
    for (int i = 0; i < nd; i++)
        o[i] = _mm256_mul_ps(_mm256_load_ps(u->ot + (d0 + i) * LANES), c);
    for (int64_t jb = 0; jb < nj; jb += KBLOCK) {
        if (!(live >> (jb / KBLOCK) & 1)) continue;
        for (int64_t j = jb; j < kiln__cpu_min64(jb + KBLOCK, nj); j++) {
            __m256 pj = _mm256_load_ps(u->p + j * LANES);
            const float *row = (const float *)(vb[jb / KBLOCK] + (size_t)(j - jb) * vs) + d0;
            if (full)
                for (int i = 0; i < nd; i++)
                    o[i] = _mm256_fmadd_ps(pj, bcast(row + i), o[i]);
            else
                for (int i = 0; i < nd; i++)
                    o[i] = _mm256_fmadd_ps(pj, _mm256_and_ps(bcast(row + i), vis[j]), o[i]);
        }
    }
    for (int i = 0; i < nd; i++)
        _mm256_store_ps(u->ot + (d0 + i) * LANES, o[i]);
}

/* The unit's distinct mask rows (a position's lanes are adjacent): row i is token rt[i] of the lanes in
 * the bit set lanes[i]. */
typedef struct unit_rows {
    int n;
    int64_t rt[LANES];
    unsigned lanes[LANES];
    float floor[LANES]; /* row_floor of each row */
    __m256 lane_floor;  /* each lane's row's floor */
} unit_rows;

/* Whether every lane's mask over keys j0 .. j0 + nj is uniform: the lanes whose rows are all 0 there
 * (*zero; -0 counts as 0) and all hidden (the rest). Most tiles are (all but those a causal diagonal, a
 * window's edge or a sequence boundary crosses); they need no per-key mask values. */
INLINE bool uniform_tile(const unit_ctx *u, const unit_rows *rows, int64_t j0, int64_t nj, unsigned *zero) {
    unsigned z = 0, hidden = 0;
    for (int i = 0; i < rows->n; i++) {
        const float *mr = u->mask + rows->rt[i] * u->C + j0;
        bool all_zero = true, all_hidden = true;
        int64_t j = 0;
        for (; j + 8 <= nj && (all_zero || all_hidden); j += 8) {
            __m256 mv = _mm256_loadu_ps(mr + j);
            all_zero =
                all_zero && _mm256_movemask_ps(_mm256_cmp_ps(mv, _mm256_setzero_ps(), _CMP_EQ_OQ)) == 0xff;
            all_hidden = all_hidden && visible_bits(mv, _mm256_set1_ps(rows->floor[i])) == 0;
        }
        for (; j < nj && (all_zero || all_hidden); j++) {
            all_zero = all_zero && mr[j] == 0.0f;
            all_hidden = all_hidden && mr[j] <= rows->floor[i];
        }
        if (all_zero)
            z |= rows->lanes[i];
        else if (all_hidden)
            hidden |= rows->lanes[i];
    }
    *zero = z;
    return (z | hidden) == 0xffu;
}

/* The lanes of the bit set as an all-ones / all-zeros float mask. */
INLINE __m256 lane_mask(unsigned bits) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i b = _mm256_and_si256(_mm256_set1_epi32((int)bits), bit);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, bit));
}

/* Fills the unit's transposed queries, mask offsets and distinct rows; returns its lanes' key range. */
INLINE void unit_queries(const unit_ctx *u, int64_t hk, int64_t idx0, int64_t n_rows, int32_t *moff,
                         unit_rows *rows, int64_t *lo_out, int64_t *hi_out) {
    const int64_t D = u->D, C = u->C;
    int64_t lo = C, hi = -1, tlo = 0, thi = -1;
    float floors[LANES];
    /* Lanes past the last row repeat the last row's mask row and have zero queries; never stored. */
    for (int l = 0; l < LANES; l++) {
        int64_t idx = idx0 + kiln__cpu_min64(l, n_rows - 1), t = idx / u->group,
                h = hk * u->group + idx % u->group;
        const float *qr = (const float *)kiln__cpu_row(u->q, h, t, 0);
        if (rows->n == 0 || rows->rt[rows->n - 1] != t) {
            float floor = row_floor(u->mask + t * C, C);
            tlo = first_visible(u->mask + t * C, C, floor);
            thi = tlo < C ? last_visible(u->mask + t * C, C, floor) : -1;
            rows->floor[rows->n] = floor;
            rows->rt[rows->n++] = t;
        }
        rows->lanes[rows->n - 1] |= 1u << l;
        floors[l] = rows->floor[rows->n - 1];
        if (tlo <= thi) lo = kiln__cpu_min64(lo, tlo), hi = thi > hi ? thi : hi;
        moff[l] = (int32_t)(t * C);
        for (int64_t d = 0; d < D; d++)
            u->qt[d * LANES + l] = l < n_rows ? qr[d] * u->scale : 0.0f;
    }
    rows->lane_floor = _mm256_loadu_ps(floors);
    *lo_out = lo, *hi_out = hi;
}

/* Rows idx0 .. idx0 + 8 (fewer at the end) of KV head hk's (position, head) enumeration. */
KILN_AVX2 static void run_unit(const unit_ctx *u, int64_t hk, int64_t idx0) {
    const int64_t D = u->D, n_rows = kiln__cpu_min64(LANES, u->T * u->group - idx0);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    int32_t moff[LANES];
    int64_t lo, hi;
    size_t ks = 0, vs = 0;
    unit_rows rows = {0};
    unit_queries(u, hk, idx0, n_rows, moff, &rows, &lo, &hi);
    const __m256i mrows = _mm256_loadu_si256((const __m256i *)(const void *)moff);
    __m256 m = ninf, l = _mm256_setzero_ps();
    memset(u->ot, 0, (size_t)D * LANES * sizeof(float));
    for (int64_t j0 = hi < lo ? 0 : lo / KV_TILE * KV_TILE; j0 <= hi; j0 += KV_TILE) {
        const int64_t nj = kiln__cpu_min64(KV_TILE, hi + 1 - j0);
        __m256 vis[KV_TILE];
        unsigned zero, live = 0;
        const bool uniform = uniform_tile(u, &rows, j0, nj, &zero);
        const __m256 zero_lanes = lane_mask(zero);
        for (int64_t j = 0; j < nj; j++) {
            if (uniform) { /* lanes in zero see every key of the tile unchanged, the others none */
                vis[j] = zero_lanes;
            } else { /* each lane's mask value for key j0 + j */
                __m256 mv = _mm256_i32gather_ps(u->mask + j0 + j, mrows, 4);
                vis[j] = _mm256_cmp_ps(mv, rows.lane_floor, _CMP_NLE_UQ);
                _mm256_store_ps(u->mt + j * LANES, mv);
            }
            live |= (unsigned)(_mm256_movemask_ps(vis[j]) != 0) << (j / KBLOCK);
        }
        if (!live) continue; /* no lane sees a key of this tile */
        const char *kb[KV_TILE / KBLOCK], *vb[KV_TILE / KBLOCK];
        for (int64_t jb = 0; jb < nj; jb += KBLOCK)
            if (live >> (jb / KBLOCK) & 1) {
                int64_t n = kiln__cpu_min64(KBLOCK, nj - jb);
                kb[jb / KBLOCK] = kv_rows(u, u->k, hk, j0 + jb, n, u->kbuf + jb * D, &ks);
                vb[jb / KBLOCK] = kv_rows(u, u->v, hk, j0 + jb, n, u->vbuf + jb * D, &vs);
            }
        tile_scores(u, kb, ks, live, nj);
        __m256 tile_max = ninf;
        for (int64_t j = 0; j < nj; j++) {
            if (!(live >> (j / KBLOCK) & 1)) continue;
            /* s + mask where the lane sees key j, -inf where it does not (whatever the hidden cell holds) */
            __m256 s = _mm256_load_ps(u->p + j * LANES);
            if (!uniform) s = _mm256_add_ps(s, _mm256_load_ps(u->mt + j * LANES));
            s = _mm256_blendv_ps(ninf, s, vis[j]);
            _mm256_store_ps(u->p + j * LANES, s);
            tile_max = _mm256_max_ps(tile_max, s);
        }
        /* Lanes that have seen no key yet keep m = -inf: they subtract 0 instead, so that c and p are
         * exp(-inf) = 0 rather than NaN (their l and Ot are still 0). */
        __m256 m_new = _mm256_max_ps(m, tile_max);
        __m256 m_sub = _mm256_blendv_ps(m_new, _mm256_setzero_ps(), _mm256_cmp_ps(m_new, ninf, _CMP_EQ_OQ));
        __m256 c = kiln__exp8(_mm256_sub_ps(m, m_sub));
        l = _mm256_mul_ps(l, c);
        for (int64_t j = 0; j < nj; j++) {
            if (!(live >> (j / KBLOCK) & 1)) continue;
            __m256 pj = kiln__exp8(_mm256_sub_ps(_mm256_load_ps(u->p + j * LANES), m_sub));
            _mm256_store_ps(u->p + j * LANES, pj);
            l = _mm256_add_ps(l, pj);
        }
        m = m_new;
        int64_t d0 = 0;
        const bool full = uniform && zero == 0xffu;
        for (; d0 + DBLOCK <= D; d0 += DBLOCK)
            values(u, vb, vs, live, nj, vis, full, d0, DBLOCK, c);
        if (d0 < D) values(u, vb, vs, live, nj, vis, full, d0, (int)(D - d0), c);
    }
    float lsum[LANES];
    _mm256_storeu_ps(lsum, l);
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t idx = idx0 + r, t = idx / u->group, h = hk * u->group + idx % u->group;
        float *out = (float *)kiln__cpu_row(u->dst, h, t, 0);
        for (int64_t d = 0; d < D; d++)
            out[d] = lsum[r] > 0.0f ? u->ot[d * LANES + r] / lsum[r] : 0.0f;
    }
}

static size_t scratch_floats(const kiln_tensor *node) {
    const size_t D = (size_t)node->src[0]->ne[0];
    const size_t convert =
        node->src[1]->type == KILN_TYPE_F32 ? 0 : 2 * KV_TILE * D + D + 64; /* kbuf, vbuf, tmp */
    return (size_t)LANES * (2 * D + 2 * KV_TILE) + convert + 8;
}

static bool kv_type_ok(kiln_type t) {
    return t == KILN_TYPE_F32 || t == KILN_TYPE_F16 || t == KILN_TYPE_Q8_0;
}

/* Q [D, Hq, T] F32; K/V F32 [D, Hkv, C] or F16 / Q8_0 [Hkv * D, C]; mask [C, T]. Declines D > DMAX (kpad's
 * size), strided query rows, and masks of more than 2^31 entries (gather offsets are int32). */
KILN_AVX2 static bool flash_attention(const kiln_cpu_args *a) {
    const kiln_tensor *q = a->dst->src[0], *k = a->dst->src[1], *v = a->dst->src[2], *mask = a->dst->src[3];
    const int64_t D = q->ne[0], Hkv = k->type == KILN_TYPE_F32 ? k->ne[1] : k->ne[0] / D;
    if (D > DMAX || q->nb[0] != sizeof(float) || k->type != v->type || !kv_type_ok(k->type) ||
        (k->type == KILN_TYPE_F32 && (k->nb[0] != sizeof(float) || v->nb[0] != sizeof(float))) ||
        kiln__tensor_nelements(mask) > INT32_MAX)
        return false;
    float *s = (float *)(((uintptr_t)a->scratch + 31) & ~(uintptr_t)31);
    unit_ctx u = {.q = q,
                  .k = k,
                  .v = v,
                  .dst = a->dst,
                  .mask = (const float *)mask->data,
                  .D = D,
                  .group = q->ne[1] / Hkv,
                  .T = q->ne[2],
                  .C = mask->ne[0],
                  .scale = a->dst->fp[0]};
    u.qt = s;
    u.p = u.qt + D * LANES;
    u.ot = u.p + KV_TILE * LANES;
    u.mt = u.ot + D * LANES;
    u.kbuf = u.mt + KV_TILE * LANES;
    u.vbuf = u.kbuf + KV_TILE * D;
    u.tmp = u.vbuf + KV_TILE * D;
    const int64_t per_head = (u.T * u.group + LANES - 1) / LANES, n_units = per_head * Hkv;
    for (int64_t i = a->ith; i < n_units; i += a->nth)
        run_unit(&u, i % Hkv, i / Hkv * LANES);
    return true;
}

void kiln__cpu_isa_init_avx2_attention(kiln_cpu_isa *t) {
    t->flash_attention = flash_attention;
    t->flash_attention_scratch_floats = scratch_floats;
}

#else
void kiln__cpu_isa_init_avx2_attention(kiln_cpu_isa *t) {
    (void)t;
}
#endif
