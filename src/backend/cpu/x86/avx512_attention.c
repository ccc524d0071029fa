/*
 * avx512_attention.c - causal grouped-query attention over F32 K/V, flash style, with the queries in the
 * vector lanes. The generic kernel (kernels_flash_attention.c) walks one query at a time and pays a
 * horizontal sum per key; here 16 query rows that share a KV head run side by side, one per lane:
 *
 *   scores  for 16 keys at a time, acc[j] += Qt[d] * K[j][d] (broadcast) over d: Qt is the unit's queries
 *           transposed once ([D][16 lanes], pre-multiplied by the softmax scale), so every FMA is useful
 *           and no horizontal sums are needed;
 *   softmax the running maximum m and denominator l are per lane, so the online-softmax update
 *           (rescale by exp(m_old - m_new), p = exp(s - m_new)) is plain vector arithmetic;
 *   values  Ot[d] = Ot[d] * c + sum_j p[j] * V[j][d] (broadcast), 8 dimensions in registers at a time.
 *
 * K/V caches in F16 or Q8_0 are converted a key tile at a time into scratch (the blocks covering the
 * head's elements), then read as F32 rows; F32 caches are read in place.
 *
 * A unit is 16 consecutive (position, head) rows of one KV head's group: with GQA groups of 8, two
 * positions; without GQA, 16 positions of one head. Causality is a per-lane key count (keys past it are
 * set to -inf in the one tile that crosses it); key tiles start at multiples of KV_TILE. Each lane's
 * arithmetic does not depend on its unit's other lanes, on the unit split or the thread count, so thread
 * counts agree bit for bit. Units are dealt to threads round-robin, which balances the causal triangle.
 *
 * exp is kiln__exp16 (avx512_exp.h), within 2.5e-7 relative of libm's expf.
 * The reference is kiln__cpu_attention (kernels_attention.c), which materializes the scores.
 */
#include "backend/cpu/kernels.h"

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
    int64_t D, group, T;
    int32_t pos0;
    float scale;
    float *qt, *p, *ot;  /* scratch: [D][16], [KV_TILE][16], [D][16] */
    float *kbuf, *vbuf;  /* scratch for F16 / Q8_0 caches: a key tile as floats, [KV_TILE][D] each */
    float *tmp;          /* scratch: one dequantized cache segment (D + 64 floats) */
} unit_ctx;

/* Rows j0 .. j0 + n of KV head hk as float rows: F32 caches ([D, Hkv, L]) are read in place; F16 and
 * Q8_0 caches ([Hkv * D, L], a row per position) are converted into buf, the blocks that cover the head's
 * elements at a time. Sets *stride to the returned rows' stride in bytes. */
static const char *kv_rows(const unit_ctx *u, const kiln_tensor *c, int64_t hk, int64_t j0, int64_t n, float *buf,
                           size_t *stride) {
    const int64_t D = u->D;
    if (c->type == KILN_TYPE_F32) {
        *stride = c->nb[2];
        return kiln__cpu_row(c, hk, j0, 0);
    }
    const kiln_type_traits *tr = kiln__type_traits(c->type);
    const int64_t e0 = hk * D, b0 = e0 / tr->block_elems, b1 = (e0 + D - 1) / tr->block_elems;
    for (int64_t j = 0; j < n; j++) {
        const char *row = kiln__cpu_row(c, j0 + j, 0, 0) + b0 * (int64_t)tr->block_bytes;
        kiln__dequantize_row(c->type, row, u->tmp, (b1 - b0 + 1) * tr->block_elems);
        memcpy(buf + j * D, u->tmp + (e0 - b0 * tr->block_elems), (size_t)D * sizeof(float));
    }
    *stride = (size_t)D * sizeof(float);
    return (const char *)buf;
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

/* Ot[d0 .. d0 + nd) = Ot * c + sum over nj keys of p[j] * V[j][d] (nd <= DBLOCK). */
INLINE void values(const unit_ctx *u, const char *vr, size_t vs, int64_t nj, int64_t d0, int nd, __m512 c) {
    __m512 o[DBLOCK];
    for (int i = 0; i < nd; i++) o[i] = _mm512_mul_ps(_mm512_load_ps(u->ot + (d0 + i) * LANES), c);
    for (int64_t j = 0; j < nj; j++) {
        __m512 pj = _mm512_load_ps(u->p + j * LANES);
        const float *row = (const float *)(vr + (size_t)j * vs) + d0;
        for (int i = 0; i < nd; i++) o[i] = _mm512_fmadd_ps(pj, _mm512_set1_ps(row[i]), o[i]);
    }
    for (int i = 0; i < nd; i++) _mm512_store_ps(u->ot + (d0 + i) * LANES, o[i]);
}

/* Rows idx0 .. idx0 + 16 (fewer at the end) of KV head hk's (position, head) enumeration. */
KILN_AVX512 static void run_unit(const unit_ctx *u, int64_t hk, int64_t idx0) {
    const int64_t D = u->D, n_rows = kiln__cpu_min64(LANES, u->T * u->group - idx0);
    size_t ks, vs;
    int32_t nk[LANES];
    float kpad[16 * 256] __attribute__((aligned(64))); /* a partial 16-key block, zero-padded (D <= 256) */
    /* Lanes past the last row repeat the last row's key count and have zero queries; never stored. */
    for (int l = 0; l < LANES; l++) {
        int64_t idx = idx0 + kiln__cpu_min64(l, n_rows - 1), t = idx / u->group, h = hk * u->group + idx % u->group;
        const float *qr = (const float *)kiln__cpu_row(u->q, h, t, 0);
        nk[l] = u->pos0 + (int32_t)t + 1;
        for (int64_t d = 0; d < D; d++) u->qt[d * LANES + l] = l < n_rows ? qr[d] * u->scale : 0.0f;
    }
    const __m512i nkeys = _mm512_loadu_si512((const void *)nk);
    const int64_t min_keys = nk[0], max_keys = nk[LANES - 1];
    __m512 m = _mm512_set1_ps(-INFINITY), l = _mm512_setzero_ps();
    memset(u->ot, 0, (size_t)D * LANES * sizeof(float));
    for (int64_t j0 = 0; j0 < max_keys; j0 += KV_TILE) {
        const int64_t nj = kiln__cpu_min64(KV_TILE, max_keys - j0);
        const char *kt = kv_rows(u, u->k, hk, j0, nj, u->kbuf, &ks), *vt = kv_rows(u, u->v, hk, j0, nj, u->vbuf, &vs);
        for (int64_t jb = 0; jb < nj; jb += 16) {
            if (nj - jb >= 16) {
                scores16(u, kt + (size_t)jb * ks, ks, u->p + jb * LANES);
            } else { /* the sequence's last keys: copy them into a zero-padded block */
                memset(kpad, 0, (size_t)16 * (size_t)D * sizeof(float));
                for (int64_t j = 0; j < nj - jb; j++) memcpy(kpad + j * D, kt + (size_t)(jb + j) * ks, (size_t)D * 4);
                scores16(u, (const char *)kpad, (size_t)D * 4, u->p + jb * LANES);
            }
        }
        __m512 tile_max = _mm512_set1_ps(-INFINITY);
        for (int64_t j = 0; j < nj; j++) {
            __m512 s = _mm512_load_ps(u->p + j * LANES);
            if (j0 + j + 1 > min_keys) /* causal: lanes whose key count ends before key j0 + j */
                s = _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(nkeys, _mm512_set1_epi32((int)(j0 + j))),
                                         _mm512_set1_ps(-INFINITY), s);
            _mm512_store_ps(u->p + j * LANES, s);
            tile_max = _mm512_max_ps(tile_max, s);
        }
        /* Key 0 is in every lane's first tile, so m is finite from the first tile's update on. */
        __m512 m_new = _mm512_max_ps(m, tile_max), c = kiln__exp16(_mm512_sub_ps(m, m_new));
        l = _mm512_mul_ps(l, c);
        for (int64_t j = 0; j < nj; j++) {
            __m512 pj = kiln__exp16(_mm512_sub_ps(_mm512_load_ps(u->p + j * LANES), m_new));
            _mm512_store_ps(u->p + j * LANES, pj);
            l = _mm512_add_ps(l, pj);
        }
        m = m_new;
        int64_t d0 = 0;
        for (; d0 + DBLOCK <= D; d0 += DBLOCK) values(u, vt, vs, nj, d0, DBLOCK, c);
        if (d0 < D) values(u, vt, vs, nj, d0, (int)(D - d0), c);
    }
    float lsum[LANES];
    _mm512_storeu_ps(lsum, l);
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t idx = idx0 + r, t = idx / u->group, h = hk * u->group + idx % u->group;
        float *out = (float *)kiln__cpu_row(u->dst, h, t, 0);
        for (int64_t d = 0; d < D; d++) out[d] = u->ot[d * LANES + r] / lsum[r];
    }
}

static size_t scratch_floats(const kiln_tensor *node) {
    const size_t D = (size_t)node->src[0]->ne[0];
    const size_t convert = node->src[1]->type == KILN_TYPE_F32 ? 0 : 2 * KV_TILE * D + D + 64; /* kbuf, vbuf, tmp */
    return (size_t)LANES * (2 * D + KV_TILE) + convert + 16;
}

static bool kv_type_ok(kiln_type t) { return t == KILN_TYPE_F32 || t == KILN_TYPE_F16 || t == KILN_TYPE_Q8_0; }

/* Q [D, Hq, T] F32; K/V F32 [D, Hkv, L] or F16 / Q8_0 [Hkv * D, L]. Declines D > 256 (kpad's size) and
 * strided query rows. */
KILN_AVX512 static bool flash_attention(const kiln_cpu_args *a) {
    const kiln_tensor *q = a->dst->src[0], *k = a->dst->src[1], *v = a->dst->src[2];
    const int64_t D = q->ne[0], Hkv = k->type == KILN_TYPE_F32 ? k->ne[1] : k->ne[0] / D;
    if (D > 256 || q->nb[0] != sizeof(float) || k->type != v->type || !kv_type_ok(k->type) ||
        (k->type == KILN_TYPE_F32 && (k->nb[0] != sizeof(float) || v->nb[0] != sizeof(float))))
        return false;
    float *s = (float *)(((uintptr_t)a->scratch + 63) & ~(uintptr_t)63);
    unit_ctx u = {q, k, v, a->dst, D, q->ne[1] / Hkv, q->ne[2], a->dst->ip[0], a->dst->fp[0], s, s + D * LANES,
                  s + D * LANES + KV_TILE * LANES, s + 2 * D * LANES + KV_TILE * LANES,
                  s + 2 * D * LANES + KV_TILE * LANES + KV_TILE * D, s + 2 * D * LANES + KV_TILE * LANES + 2 * KV_TILE * D};
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
