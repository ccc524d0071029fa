/*
 * kernels_flash_attention.c - masked grouped-query attention, flash style: for each query the visible
 * keys are visited in tiles of KV_TILE; a tile's scores are computed, the running maximum m and
 * denominator l are updated (online softmax: the accumulator is rescaled by exp(m_old - m_new) when the
 * maximum grows), and the tile's values are added with weights exp(s - m). The output is acc / l. No
 * [T, C] score matrix is materialized: the query's mask row bounds the key loop (its first and last
 * visible key, kiln__cpu_mask_range), hidden keys inside that range are skipped (no dot, no value
 * update), and the mask's finite values are added to the scores. A query that sees no key outputs zeros.
 * A query head reads its shared KV head (h / (Hq / Hkv)) in place.
 *
 * Shapes as KILN_OP_ATTENTION in graph.h: q [D, Hq, T], k and v [D, Hkv, C], mask [C, T]. Threads take
 * ranges of (t, h) rows, h fastest, so results do not depend on the thread count and a token's mask row
 * is scanned once per thread. Tiles start at the first visible key. Dots and updates go through the
 * dispatch table; exp is libm's expf (correctly rounded to within 1 ulp). The reference is
 * kiln__cpu_attention (kernels_attention.c), which materializes the scores. A level may bring its own
 * kernel (isa->flash_attention, x86/avx512_attention.c), which takes the node when it supports its shape.
 */
#include "backend/cpu/kernels.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

#define KV_TILE 64

size_t kiln__cpu_flash_attention_scratch_floats(const kiln_tensor *node) {
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    size_t n = KV_TILE + (size_t)node->src[0]->ne[0];
    return isa->flash_attention_scratch_floats ? KILN__MAX(n, isa->flash_attention_scratch_floats(node)) : n;
}

void kiln__cpu_flash_attention(const kiln_cpu_args *a) {
    const kiln_tensor *q = a->dst->src[0], *k = a->dst->src[1], *v = a->dst->src[2], *mask = a->dst->src[3];
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    float scale = a->dst->fp[0];
    int64_t D = q->ne[0], Hq = q->ne[1], C = k->ne[2], group = Hq / k->ne[1], r0, r1, lo = 0, hi = -1, row_t = -1;
    float *s = a->scratch, *acc = a->scratch + KV_TILE;
    const float *mrow = NULL;
    if (isa->flash_attention && isa->flash_attention(a)) return;
    kiln__cpu_split(Hq * q->ne[2], a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t h = r % Hq, t = r / Hq, hk = h / group;
        const float *qr = (const float *)kiln__cpu_row(q, h, t, 0);
        float *out = (float *)kiln__cpu_row(a->dst, h, t, 0);
        float m = -INFINITY, l = 0.0f;
        if (t != row_t) { /* a new token: scan its mask row */
            mrow = (const float *)kiln__cpu_row(mask, t, 0, 0);
            kiln__cpu_mask_range(mrow, C, &lo, &hi);
            row_t = t;
        }
        memset(acc, 0, (size_t)D * sizeof(float));
        for (int64_t j0 = lo; j0 <= hi; j0 += KV_TILE) {
            int64_t nj = kiln__cpu_min64(KV_TILE, hi + 1 - j0);
            float tile_max = -INFINITY, m_new, sum = 0.0f;
            for (int64_t j = 0; j < nj; j++) {
                float mj = mrow[j0 + j];
                s[j] = mj == -INFINITY ? -INFINITY
                                       : isa->dot_f32(qr, (const float *)kiln__cpu_row(k, hk, j0 + j, 0), D) * scale + mj;
                tile_max = fmaxf(tile_max, s[j]);
            }
            if (tile_max == -INFINITY) continue; /* every key of the tile hidden */
            m_new = fmaxf(m, tile_max);
            if (m_new > m && l > 0.0f) {
                float c = expf(m - m_new);
                isa->scale_f32(acc, c, D);
                l *= c;
            }
            m = m_new;
            for (int64_t j = 0; j < nj; j++) {
                if (s[j] == -INFINITY) continue;
                float p = expf(s[j] - m);
                sum += p;
                isa->axpy_f32(acc, p, (const float *)kiln__cpu_row(v, hk, j0 + j, 0), D);
            }
            l += sum;
        }
        for (int64_t i = 0; i < D; i++) out[i] = l > 0.0f ? acc[i] / l : 0.0f;
    }
}
