/*
 * kernels_rope.c - reference rotary position embedding on x [D, H, T] with positions [T].
 *
 * For pair index i = 0, 2, 4, ... < n_rot: theta = pos * scale / base^(i / n_rot). NORMAL mode rotates
 * adjacent elements (i, i + 1); NEOX mode rotates (i/2, i/2 + n_rot/2). Elements at n_rot and beyond are
 * copied unchanged (partial rotary). With frequency factors (src2, Llama 3), theta of pair i/2 is divided by
 * factor[i/2].
 */
#include "backend/cpu/kernels.h"

#include "graph/graph.h"

#include <math.h>

void kiln__cpu_rope(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0], *pos = a->dst->src[1];
    const float *factors = a->dst->src[2] ? (const float *)a->dst->src[2]->data : NULL;
    int32_t n_rot = a->dst->ip[0], mode = a->dst->ip[1];
    float base = a->dst->fp[0], scale = a->dst->fp[1];
    float *cs = a->scratch; /* [cos, sin] of pair i / 2 at cs[i], cs[i + 1] for the cached position */
    int64_t D = x->ne[0], H = x->ne[1], r0, r1, cached_t = -1;
    kiln__cpu_split(H * x->ne[2], a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t h = r % H, t = r / H;
        const float *xr = (const float *)kiln__cpu_row(x, h, t, 0);
        float *out = (float *)kiln__cpu_row(a->dst, h, t, 0);
        if (t != cached_t) { /* the angles depend on the position only: once per position, not per head */
            int32_t p = *(const int32_t *)((const char *)pos->data + t * (int64_t)pos->nb[0]);
            for (int64_t i = 0; i < n_rot; i += 2) {
                float freq = kiln__rope_freq(base, (int32_t)i, (int32_t)n_rot);
                float theta = scale == 1.0f ? (float)p * freq : (float)p * scale * freq;
                if (factors) theta /= factors[i / 2];
                cs[i] = cosf(theta);
                cs[i + 1] = sinf(theta);
            }
            cached_t = t;
        }
        for (int64_t i = n_rot; i < D; i++) out[i] = xr[i];
        for (int64_t i = 0; i < n_rot; i += 2) {
            float c = cs[i], s = cs[i + 1];
            int64_t i0 = mode == KILN_ROPE_NEOX ? i / 2 : i;
            int64_t i1 = mode == KILN_ROPE_NEOX ? i / 2 + n_rot / 2 : i + 1;
            float v0 = xr[i0], v1 = xr[i1];
            out[i0] = v0 * c - v1 * s;
            out[i1] = v0 * s + v1 * c;
        }
    }
}
