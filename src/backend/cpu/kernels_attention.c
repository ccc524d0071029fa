/*
 * kernels_attention.c - reference masked attention with grouped-query heads, and the mask-row scan that
 * every attention kernel shares.
 *
 * q [D, Hq, T], k and v [D, Hkv, C], mask [C, T]. Query t of head h reads KV head h / (Hq / Hkv): score
 * s_j = scale * q.k_j + mask[t][j] for the keys j its mask row leaves visible, softmax over them, then
 * the weighted sum of v. Only keys lo..hi are visited, the first and last visible key of the row; hidden
 * keys inside that range get score -inf (weight 0). A query with no visible key outputs zeros. Each
 * thread takes a range of (t, h) rows, h fastest, so the row's range is found once per token; scores
 * live in the thread's scratch (C floats).
 */
#include "backend/cpu/kernels.h"

#include <math.h>
#include <string.h>

bool kiln__cpu_mask_range(const float *m, int64_t n, int64_t *lo, int64_t *hi) {
    int64_t a = 0, b = n - 1;
    while (a < n && m[a] == -INFINITY) a++;
    if (a == n) {
        *lo = 0, *hi = -1;
        return false;
    }
    while (m[b] == -INFINITY) b--;
    *lo = a, *hi = b;
    return true;
}

void kiln__cpu_attention(const kiln_cpu_args *a) {
    const kiln_tensor *q = a->dst->src[0], *k = a->dst->src[1], *v = a->dst->src[2], *mask = a->dst->src[3];
    float scale = a->dst->fp[0];
    int64_t D = q->ne[0], Hq = q->ne[1], C = k->ne[2], group = Hq / k->ne[1], r0, r1, lo = 0, hi = -1, row_t = -1;
    float *scores = a->scratch;
    const float *mrow = NULL;
    kiln__cpu_split(Hq * q->ne[2], a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t h = r % Hq, t = r / Hq, hk = h / group;
        const float *qr = (const float *)kiln__cpu_row(q, h, t, 0);
        float *out = (float *)kiln__cpu_row(a->dst, h, t, 0);
        if (t != row_t) { /* a new token: scan its mask row */
            mrow = (const float *)kiln__cpu_row(mask, t, 0, 0);
            kiln__cpu_mask_range(mrow, C, &lo, &hi);
            row_t = t;
        }
        memset(out, 0, (size_t)D * sizeof(float));
        if (hi < lo) continue; /* sees no key: zeros */
        for (int64_t j = lo; j <= hi; j++)
            scores[j - lo] = mrow[j] == -INFINITY
                                 ? -INFINITY
                                 : kiln__cpu_dot_f32(qr, (const float *)kiln__cpu_row(k, hk, j, 0), D) * scale + mrow[j];
        kiln__cpu_softmax_row(scores, hi - lo + 1);
        for (int64_t j = lo; j <= hi; j++) {
            if (mrow[j] == -INFINITY) continue;
            const float *vr = (const float *)kiln__cpu_row(v, hk, j, 0);
            for (int64_t i = 0; i < D; i++) out[i] += scores[j - lo] * vr[i];
        }
    }
}
