/*
 * kernels_norm.c - reference kernels for rms_norm and softmax (row-wise along dim 0), and the shared
 * softmax and dot-product row helpers. Accumulation is in float, left to right, so results are the same
 * for every thread count. A softmax row whose entries are all -inf (a query that may see no key: a
 * padding token) gives zeros rather than the NaN of exp(-inf - -inf).
 */
#include "backend/cpu/kernels.h"

#include <math.h>

float kiln__cpu_dot_f32(const float *x, const float *y, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += x[i] * y[i];
    return sum;
}

void kiln__cpu_softmax_row(float *x, int64_t n) {
    float max = -INFINITY, sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > max) max = x[i];
    if (max == -INFINITY) {
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int64_t i = 0; i < n; i++) x[i] /= sum;
}

void kiln__cpu_rms_norm(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0];
    float eps = a->dst->fp[0];
    int64_t r0, r1, n = x->ne[0];
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        const float *xr = (const float *)kiln__cpu_row(x, i1, i2, i3);
        float *out = (float *)kiln__cpu_row(a->dst, i1, i2, i3);
        float ss = 0.0f;
        for (int64_t i = 0; i < n; i++) ss += xr[i] * xr[i];
        ss /= (float)n;
        ss += eps;
        ss = 1.0f / sqrtf(ss);
        for (int64_t i = 0; i < n; i++) out[i] = ss * xr[i];
    }
}

void kiln__cpu_softmax(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0];
    float scale = a->dst->fp[0];
    int64_t r0, r1;
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        const float *xr = (const float *)kiln__cpu_row(x, i1, i2, i3);
        float *out = (float *)kiln__cpu_row(a->dst, i1, i2, i3);
        for (int64_t i = 0; i < x->ne[0]; i++) out[i] = scale * xr[i];
        kiln__cpu_softmax_row(out, x->ne[0]);
    }
}
