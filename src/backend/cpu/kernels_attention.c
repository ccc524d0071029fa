/*
 * kernels_attention.c - reference causal attention with grouped-query heads.
 *
 * q [D, Hq, T], k and v [D, Hkv, L]. Query t of head h sits at position pos0 + t and attends to keys
 * 0..pos0 + t of KV head h / (Hq / Hkv): scores = scale * q.k, softmax, then the weighted sum of v.
 * Each thread takes a range of (t, h) pairs; scores live in the thread's scratch (L floats).
 */
#include "backend/cpu/kernels.h"

#include <string.h>

void kiln__cpu_attention(const kiln_cpu_args *a) {
    const kiln_tensor *q = a->dst->src[0], *k = a->dst->src[1], *v = a->dst->src[2];
    int32_t pos0 = a->dst->ip[0];
    float scale = a->dst->fp[0];
    int64_t D = q->ne[0], Hq = q->ne[1], group = Hq / k->ne[1], r0, r1;
    float *scores = a->scratch;
    kiln__cpu_split(Hq * q->ne[2], a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t h = r % Hq, t = r / Hq, hk = h / group, n_keys = pos0 + t + 1;
        const float *qr = (const float *)kiln__cpu_row(q, h, t, 0);
        float *out = (float *)kiln__cpu_row(a->dst, h, t, 0);
        for (int64_t j = 0; j < n_keys; j++)
            scores[j] = kiln__cpu_dot_f32(qr, (const float *)kiln__cpu_row(k, hk, j, 0), D) * scale;
        kiln__cpu_softmax_row(scores, n_keys);
        memset(out, 0, (size_t)D * sizeof(float));
        for (int64_t j = 0; j < n_keys; j++) {
            const float *vr = (const float *)kiln__cpu_row(v, hk, j, 0);
            for (int64_t i = 0; i < D; i++) out[i] += scores[j] * vr[i];
        }
    }
}
