/*
 * avx512_attention.c - masked grouped-query attention, flash style, with the queries in the vector lanes.
 * The generic kernel (kernels_flash_attention.c) walks one query at a time and pays a horizontal sum per
 * key; here 16 query rows that share a KV head run side by side, one per lane:
 *
 *   scores  for 16 keys at a time, acc[j] += Qt[d] * K[j][d] (broadcast) over d: Qt is the unit's queries
 *           transposed once ([D][16 lanes], pre-multiplied by the softmax scale), so every FMA is useful
 *           and no horizontal sums are needed; then each lane's mask value is added, and keys the lane's
 *           mask hides become -inf. Tiles where every lane's mask is all 0 or all -inf (the interior of
 *           a causal triangle) skip the add; others gather the lanes' mask values key by key;
 *   softmax the running maximum m and denominator l are per lane, so the online-softmax update
 *           (rescale by exp(m_old - m_new), p = exp(s - m_new)) is plain vector arithmetic;
 *   values  Ot[d] = Ot[d] * c + sum_j p[j] * V[j][d] (broadcast), 8 dimensions in registers at a time,
 *           with the FMA masked to the lanes that see key j (a hidden cell's V is never read into a lane).
 *
 * K/V caches in F16 or Q8_0 are converted 16 keys at a time into scratch (the blocks covering the head's
 * elements), then read as F32 rows; F32 caches are read in place.
 *
 * A unit is 16 consecutive (position, head) rows of one KV head's group: with GQA groups of 8, two
 * positions; without GQA, 16 positions of one head. Each lane's visible keys are [lo, hi] of its mask row
 * (found 16 entries at a time; kiln__cpu_mask_range is the scalar reference); the unit visits the key tiles
 * (KV_TILE keys, starting at multiples of KV_TILE) that cover the union of its lanes' ranges, and skips
 * every 16-key block that all its lanes' masks hide. A tile or block a lane does not see leaves that lane's
 * m, l and Ot exactly as they were (c = exp(0) = 1, p = 0, masked FMAs), so each lane's arithmetic depends
 * only on its own mask row: not on its unit's other lanes, the unit split or the thread count, and thread
 * counts agree bit for bit. For a plain causal mask the tiles, blocks and sums are those of a per-lane key
 * count. A lane that sees no key outputs zeros. Units are dealt to threads round-robin.
 *
 * exp is kiln__exp16 (avx512_exp.h), within 2.5e-7 relative of libm's expf; it maps -inf to 0.
 * The reference is kiln__cpu_attention (kernels_attention.c), which materializes the scores.
 */
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_kv.h"

#if defined(__x86_64__)
#include "backend/cpu/x86/avx512_exp.h"
#include "tensor/types.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX512

#define LANES 16
#define KV_TILE 64
#define DBLOCK 8 /* value dimensions kept in registers at a time */

/* The unit's view of the node. */
typedef struct unit_ctx {
    const kiln_tensor *q, *k, *v, *dst;
    const float *mask;   /* [C, T] contiguous */
    int64_t D, group, T, C;
    float scale;
    float *qt, *p, *ot;  /* scratch: [D][16], [KV_TILE][16], [D][16] */
    float *mt;           /* scratch: the tile's mask values, [KV_TILE][16] */
    float *kbuf, *vbuf;  /* scratch for F16 / Q8_0 caches: a key tile as floats, [KV_TILE][D] each */
    float *tmp;          /* scratch: one dequantized cache segment (D + 64 floats) */
} unit_ctx;

/* Rows j0 .. j0 + n of KV head hk as float rows (kiln__cpu_kv_head_rows), converted into buf unless F32. */
static const char *kv_rows(const unit_ctx *u, const kiln_tensor *c, int64_t hk, int64_t j0, int64_t n, float *buf,
                           size_t *stride) {
    return kiln__cpu_kv_head_rows(c, u->D, hk, j0, n, buf, u->tmp, stride);
}

/* The first entry of m[0..n) that is not -inf, or n (scalar reference: kiln__cpu_mask_range). */
INLINE int64_t first_visible(const float *m, int64_t n) {
    int64_t a = 0;
    for (; a + 16 <= n; a += 16) {
        unsigned vis = _mm512_cmp_ps_mask(_mm512_loadu_ps(m + a), _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
        if (vis) return a + __builtin_ctz(vis);
    }
    while (a < n && m[a] == -INFINITY) a++;
    return a;
}

/* The last entry of m[0..n) that is not -inf, or -1. */
INLINE int64_t last_visible(const float *m, int64_t n) {
    int64_t b = n;
    for (; b >= 16; b -= 16) {
        unsigned vis = _mm512_cmp_ps_mask(_mm512_loadu_ps(m + b - 16), _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
        if (vis) return b - 16 + 31 - __builtin_clz(vis);
    }
    while (b > 0 && m[b - 1] == -INFINITY) b--;
    return b - 1;
}

/* Scores of 16 keys starting at row kr (stride ks bytes) for the 16 lanes, into p[0..15][lanes]. */
INLINE void scores16(const unit_ctx *u, const char *kr, size_t ks, float *p) {
    __m512 acc[16];
    for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t d = 0; d < u->D; d++) {
        __m512 qv = _mm512_load_ps(u->qt + d * LANES);
        for (int j = 0; j < 16; j++)
            acc[j] = _mm512_fmadd_ps(qv, _mm512_set1_ps(*(const float *)(kr + (size_t)j * ks + (size_t)d * 4)), acc[j]);
    }
    for (int j = 0; j < 16; j++) _mm512_store_ps(p + j * LANES, acc[j]);
}

/* Ot[d0 .. d0 + nd) = Ot * c + sum over the tile's live 16-key blocks of p[j] * V[j][d], each key's FMA
 * masked to the lanes that see it, unmasked when every lane sees every key of the tile (full); the two
 * give the same sums (nd <= DBLOCK). Block b's rows start at vb[b], stride vs bytes. */
INLINE void values(const unit_ctx *u, const char *const *vb, size_t vs, unsigned live, int64_t nj,
                   const __mmask16 *vis, bool full, int64_t d0, int nd, __m512 c) {
    __m512 o[DBLOCK];
    for (int i = 0; i < nd; i++) o[i] = _mm512_mul_ps(_mm512_load_ps(u->ot + (d0 + i) * LANES), c);
    for (int64_t jb = 0; jb < nj; jb += 16) {
        if (!(live >> (jb / 16) & 1)) continue;
        for (int64_t j = jb; j < kiln__cpu_min64(jb + 16, nj); j++) {
            __m512 pj = _mm512_load_ps(u->p + j * LANES);
            const float *row = (const float *)(vb[jb / 16] + (size_t)(j - jb) * vs) + d0;
            if (full)
                for (int i = 0; i < nd; i++) o[i] = _mm512_fmadd_ps(pj, _mm512_set1_ps(row[i]), o[i]);
            else
                for (int i = 0; i < nd; i++) o[i] = _mm512_mask3_fmadd_ps(pj, _mm512_set1_ps(row[i]), o[i], vis[j]);
        }
    }
    for (int i = 0; i < nd; i++) _mm512_store_ps(u->ot + (d0 + i) * LANES, o[i]);
}

/* The scores of the live 16-key blocks of the tile at j0 (nj keys) into p: blocks of 16 keys scored in
 * place, a partial last block through a zero-padded copy. */
INLINE void tile_scores(const unit_ctx *u, const char *const *kb, size_t ks, unsigned live, int64_t nj) {
    float kpad[16 * 256] __attribute__((aligned(64))); /* a partial 16-key block, zero-padded (D <= 256) */
    for (int64_t jb = 0; jb < nj; jb += 16) {
        if (!(live >> (jb / 16) & 1)) continue;
        if (nj - jb >= 16) {
            scores16(u, kb[jb / 16], ks, u->p + jb * LANES);
            continue;
        }
        memset(kpad, 0, (size_t)16 * (size_t)u->D * sizeof(float));
        for (int64_t j = 0; j < nj - jb; j++) memcpy(kpad + j * u->D, kb[jb / 16] + (size_t)j * ks, (size_t)u->D * 4);
        scores16(u, (const char *)kpad, (size_t)u->D * 4, u->p + jb * LANES);
    }
}

/* The unit's distinct mask rows (a position's lanes are adjacent): row i is token rt[i] of the lanes in
 * the bit set lanes[i]. */
typedef struct unit_rows {
    int n;
    int64_t rt[LANES];
    __mmask16 lanes[LANES];
} unit_rows;

/* Whether every lane's mask over keys j0 .. j0 + nj is uniform: the lanes whose rows are all 0 there
 * (*zero; -0 counts as 0) and all -inf (the rest). Most tiles are (all but those a causal diagonal, a
 * window's edge or a sequence boundary crosses); they need no per-key mask values. Contiguous loads,
 * 16 keys at a time, per distinct row. */
INLINE bool uniform_tile(const unit_ctx *u, const unit_rows *rows, int64_t j0, int64_t nj, __mmask16 *zero) {
    __mmask16 z = 0, hidden = 0;
    for (int i = 0; i < rows->n; i++) {
        const float *mr = u->mask + rows->rt[i] * u->C + j0;
        bool all_zero = true, all_hidden = true;
        for (int64_t jb = 0; jb < nj && (all_zero || all_hidden); jb += 16) {
            __mmask16 in = nj - jb >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (nj - jb)) - 1);
            __m512 mv = _mm512_maskz_loadu_ps(in, mr + jb);
            all_zero = all_zero && _mm512_mask_cmp_ps_mask(in, mv, _mm512_setzero_ps(), _CMP_EQ_OQ) == in;
            all_hidden = all_hidden && _mm512_mask_cmp_ps_mask(in, mv, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ) == in;
        }
        if (all_zero) z |= rows->lanes[i];
        else if (all_hidden) hidden |= rows->lanes[i];
    }
    *zero = z;
    return (__mmask16)(z | hidden) == (__mmask16)0xffff;
}

/* Rows idx0 .. idx0 + 16 (fewer at the end) of KV head hk's (position, head) enumeration. */
KILN_AVX512 static void run_unit(const unit_ctx *u, int64_t hk, int64_t idx0) {
    const int64_t D = u->D, C = u->C, n_rows = kiln__cpu_min64(LANES, u->T * u->group - idx0);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    int32_t moff[LANES];
    int64_t lo = C, hi = -1, tlo = 0, thi = -1;
    size_t ks = 0, vs = 0;
    unit_rows rows = {0};
    /* Lanes past the last row repeat the last row's mask row and have zero queries; never stored. Lanes of
     * one position are adjacent, so each mask row is scanned once per unit. */
    for (int l = 0; l < LANES; l++) {
        int64_t idx = idx0 + kiln__cpu_min64(l, n_rows - 1), t = idx / u->group, h = hk * u->group + idx % u->group;
        const float *qr = (const float *)kiln__cpu_row(u->q, h, t, 0);
        if (rows.n == 0 || rows.rt[rows.n - 1] != t) {
            tlo = first_visible(u->mask + t * C, C);
            thi = tlo < C ? last_visible(u->mask + t * C, C) : -1;
            rows.rt[rows.n++] = t;
        }
        rows.lanes[rows.n - 1] |= (__mmask16)(1u << l);
        if (tlo <= thi) lo = kiln__cpu_min64(lo, tlo), hi = thi > hi ? thi : hi;
        moff[l] = (int32_t)(t * C);
        for (int64_t d = 0; d < D; d++) u->qt[d * LANES + l] = l < n_rows ? qr[d] * u->scale : 0.0f;
    }
    const __m512i mrows = _mm512_loadu_si512((const void *)moff);
    __m512 m = ninf, l = _mm512_setzero_ps();
    memset(u->ot, 0, (size_t)D * LANES * sizeof(float));
    for (int64_t j0 = hi < lo ? 0 : lo / KV_TILE * KV_TILE; j0 <= hi; j0 += KV_TILE) {
        const int64_t nj = kiln__cpu_min64(KV_TILE, hi + 1 - j0);
        __mmask16 vis[KV_TILE], zero;
        unsigned live = 0;
        const bool uniform = uniform_tile(u, &rows, j0, nj, &zero);
        for (int64_t j = 0; j < nj; j++) {
            if (uniform) { /* lanes in zero see every key of the tile unchanged, the others none */
                vis[j] = zero;
            } else { /* each lane's mask value for key j0 + j */
                __m512 mv = _mm512_i32gather_ps(mrows, u->mask + j0 + j, 4);
                vis[j] = _mm512_cmp_ps_mask(mv, ninf, _CMP_NEQ_UQ);
                _mm512_store_ps(u->mt + j * LANES, mv);
            }
            live |= (unsigned)(vis[j] != 0) << (j / 16);
        }
        if (!live) continue; /* no lane sees a key of this tile */
        const char *kb[KV_TILE / 16], *vb[KV_TILE / 16];
        for (int64_t jb = 0; jb < nj; jb += 16)
            if (live >> (jb / 16) & 1) {
                int64_t n = kiln__cpu_min64(16, nj - jb);
                kb[jb / 16] = kv_rows(u, u->k, hk, j0 + jb, n, u->kbuf + jb * D, &ks);
                vb[jb / 16] = kv_rows(u, u->v, hk, j0 + jb, n, u->vbuf + jb * D, &vs);
            }
        tile_scores(u, kb, ks, live, nj);
        __m512 tile_max = ninf;
        for (int64_t j = 0; j < nj; j++) {
            if (!(live >> (j / 16) & 1)) continue;
            /* s + mask where the lane sees key j, -inf where it does not (whatever the hidden cell holds) */
            __m512 s = uniform ? _mm512_mask_mov_ps(ninf, vis[j], _mm512_load_ps(u->p + j * LANES))
                               : _mm512_mask_add_ps(ninf, vis[j], _mm512_load_ps(u->p + j * LANES),
                                                    _mm512_load_ps(u->mt + j * LANES));
            _mm512_store_ps(u->p + j * LANES, s);
            tile_max = _mm512_max_ps(tile_max, s);
        }
        /* Lanes that have seen no key yet keep m = -inf: they subtract 0 instead, so that c and p are
         * exp(-inf) = 0 rather than NaN (their l and Ot are still 0). */
        __m512 m_new = _mm512_max_ps(m, tile_max);
        __m512 m_sub = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_new, ninf, _CMP_EQ_OQ), m_new, _mm512_setzero_ps());
        __m512 c = kiln__exp16(_mm512_sub_ps(m, m_sub));
        l = _mm512_mul_ps(l, c);
        for (int64_t j = 0; j < nj; j++) {
            if (!(live >> (j / 16) & 1)) continue;
            __m512 pj = kiln__exp16(_mm512_sub_ps(_mm512_load_ps(u->p + j * LANES), m_sub));
            _mm512_store_ps(u->p + j * LANES, pj);
            l = _mm512_add_ps(l, pj);
        }
        m = m_new;
        int64_t d0 = 0;
        const bool full = uniform && zero == (__mmask16)0xffff;
        for (; d0 + DBLOCK <= D; d0 += DBLOCK) values(u, vb, vs, live, nj, vis, full, d0, DBLOCK, c);
        if (d0 < D) values(u, vb, vs, live, nj, vis, full, d0, (int)(D - d0), c);
    }
    float lsum[LANES];
    _mm512_storeu_ps(lsum, l);
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t idx = idx0 + r, t = idx / u->group, h = hk * u->group + idx % u->group;
        float *out = (float *)kiln__cpu_row(u->dst, h, t, 0);
        for (int64_t d = 0; d < D; d++) out[d] = lsum[r] > 0.0f ? u->ot[d * LANES + r] / lsum[r] : 0.0f;
    }
}

static size_t scratch_floats(const kiln_tensor *node) {
    const size_t D = (size_t)node->src[0]->ne[0];
    const size_t convert = node->src[1]->type == KILN_TYPE_F32 ? 0 : 2 * KV_TILE * D + D + 64; /* kbuf, vbuf, tmp */
    return (size_t)LANES * (2 * D + 2 * KV_TILE) + convert + 16;
}

static bool kv_type_ok(kiln_type t) { return t == KILN_TYPE_F32 || t == KILN_TYPE_F16 || t == KILN_TYPE_Q8_0; }

/* Q [D, Hq, T] F32; K/V F32 [D, Hkv, C] or F16 / Q8_0 [Hkv * D, C]; mask [C, T]. Declines D > 256
 * (kpad's size), strided query rows, and masks of more than 2^31 entries (gather offsets are int32). */
KILN_AVX512 static bool flash_attention(const kiln_cpu_args *a) {
    const kiln_tensor *q = a->dst->src[0], *k = a->dst->src[1], *v = a->dst->src[2], *mask = a->dst->src[3];
    const int64_t D = q->ne[0], Hkv = k->type == KILN_TYPE_F32 ? k->ne[1] : k->ne[0] / D;
    if (D > 256 || q->nb[0] != sizeof(float) || k->type != v->type || !kv_type_ok(k->type) ||
        (k->type == KILN_TYPE_F32 && (k->nb[0] != sizeof(float) || v->nb[0] != sizeof(float))) ||
        kiln__tensor_nelements(mask) > INT32_MAX)
        return false;
    float *s = (float *)(((uintptr_t)a->scratch + 63) & ~(uintptr_t)63);
    unit_ctx u = {.q = q, .k = k, .v = v, .dst = a->dst, .mask = (const float *)mask->data, .D = D,
                  .group = q->ne[1] / Hkv, .T = q->ne[2], .C = mask->ne[0], .scale = a->dst->fp[0]};
    u.qt = s;
    u.p = u.qt + D * LANES;
    u.ot = u.p + KV_TILE * LANES;
    u.mt = u.ot + D * LANES;
    u.kbuf = u.mt + KV_TILE * LANES;
    u.vbuf = u.kbuf + KV_TILE * D;
    u.tmp = u.vbuf + KV_TILE * D;
    const int64_t per_head = (u.T * u.group + LANES - 1) / LANES, n_units = per_head * Hkv;
    for (int64_t i = a->ith; i < n_units; i += a->nth) run_unit(&u, i % Hkv, i / Hkv * LANES);
    return true;
}

void kiln__cpu_isa_init_avx512_attention(kiln_cpu_isa *t) {
    t->flash_attention = flash_attention;
    t->flash_attention_scratch_floats = scratch_floats;
}

#else
void kiln__cpu_isa_init_avx512_attention(kiln_cpu_isa *t) { (void)t; }
#endif
