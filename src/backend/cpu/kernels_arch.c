/*
 * kernels_arch.c - reference kernels for the ops of architectures beyond Llama.
 *
 * norm: each row along dim 0 becomes (x - mean) / sqrt(var + eps), with the biased variance
 * var = mean((x - mean)^2), as torch.nn.LayerNorm computes it before its affine part. Accumulation is in
 * float, left to right, so results do not depend on the thread count.
 */
#include "backend/cpu/kernels_arch.h"

#include <math.h>

void kiln__cpu_norm(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0];
    float eps = a->dst->fp[0];
    int64_t r0, r1, n = x->ne[0];
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        const float *xr = (const float *)kiln__cpu_row(x, i1, i2, i3);
        float *out = (float *)kiln__cpu_row(a->dst, i1, i2, i3);
        float mean = 0.0f, var = 0.0f;
        for (int64_t i = 0; i < n; i++) mean += xr[i];
        mean /= (float)n;
        for (int64_t i = 0; i < n; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= (float)n;
        float inv = 1.0f / sqrtf(var + eps);
        for (int64_t i = 0; i < n; i++) out[i] = (xr[i] - mean) * inv;
    }
}
