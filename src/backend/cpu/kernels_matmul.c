/*
 * kernels_matmul.c - reference matmul: dst[n, m] = sum_k W[k, n] * X[k, m], per batch (i2, i3), with W
 * broadcast over batch dims. Each thread takes a range of weight rows n; a quantized or half-precision
 * weight row is dequantized once into the thread's scratch and reused for every activation column m.
 */
#include "backend/cpu/kernels.h"

#include "tensor/types.h"

void kiln__cpu_matmul(const kiln_cpu_args *a) {
    const kiln_tensor *w = a->dst->src[0], *x = a->dst->src[1];
    kiln_tensor *dst = a->dst;
    int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];
    int64_t n0, n1;
    kiln__cpu_split(N, a->ith, a->nth, &n0, &n1);
    for (int64_t i3 = 0; i3 < x->ne[3]; i3++) {
        for (int64_t i2 = 0; i2 < x->ne[2]; i2++) {
            for (int64_t n = n0; n < n1; n++) {
                const char *wrow = kiln__cpu_row(w, n, i2 / r2, i3 / r3);
                const float *wf = (const float *)wrow;
                if (w->type != KILN_TYPE_F32) {
                    kiln__dequantize_row(w->type, wrow, a->scratch, K);
                    wf = a->scratch;
                }
                for (int64_t m = 0; m < M; m++) {
                    const float *xr = (const float *)kiln__cpu_row(x, m, i2, i3);
                    float *out = (float *)kiln__cpu_row(dst, m, i2, i3);
                    out[n] = kiln__cpu_dot_f32(wf, xr, K);
                }
            }
        }
    }
}
