/*
 * kernels_fused.c - reference kernels for fused ops and the small elementwise ops of the unfused forms.
 *
 * Each computes exactly what its plain decomposition computes, in the same float order where that is
 * cheap to keep (rms_norm_mul multiplies the normalized value by the weight, as rms_norm then mul does;
 * swiglu computes silu(g) then the product), so fusing does not change results. Contiguous rows of
 * swiglu and rms_norm_mul go through the level's row helpers (kernels_vec_ref.c is their reference; the
 * SIMD sum of squares and exp differ from these loops by float rounding only). The activations of
 * contiguous rows (gelu, silu, relu, add_act, and the linear op's epilogue in kernels_matmul.c) go
 * through kiln__act_row and the level's gelu/silu helpers, which differ from kiln__act_apply within the
 * tolerances test_kernels_vec.c states.
 */
#include "backend/cpu/kernels_fused.h"

#include "tensor/types.h"

#include <math.h>
#include <string.h>

float kiln__act_apply(int32_t act, float x) {
    switch (act) {
    case KILN_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case KILN_ACT_GELU: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case KILN_ACT_SILU: return x * (1.0f / (1.0f + expf(-x)));
    default: return x;
    }
}

void kiln__act_row(const kiln_cpu_isa *isa, int32_t act, float *out, const float *x, int64_t n) {
    switch (act) {
    case KILN_ACT_GELU: isa->gelu_f32(out, x, n); return;
    case KILN_ACT_SILU: isa->silu_f32(out, x, n); return;
    case KILN_ACT_RELU:
        for (int64_t i = 0; i < n; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return;
    default:
        if (out != x) memmove(out, x, (size_t)n * sizeof(float));
        return;
    }
}

typedef float (*unary_fn)(const kiln_tensor *node, float x);

typedef void (*row_fn)(float *out, const float *x, int64_t n);

/* out = f(x) per element; act names the activation f computes (KILN_ACT_NONE: another function), whose
 * contiguous rows go through kiln__act_row; or row, when not NULL, is the level's helper for such rows. */
static void unary_rows(const kiln_cpu_args *a, unary_fn f, int32_t act, row_fn row) {
    const kiln_tensor *x = a->dst->src[0];
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    int64_t r0, r1;
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        const char *xr = kiln__cpu_row(x, i1, i2, i3);
        float *out = (float *)kiln__cpu_row(a->dst, i1, i2, i3);
        if (act != KILN_ACT_NONE && x->nb[0] == sizeof(float)) {
            kiln__act_row(isa, act, out, (const float *)xr, x->ne[0]);
            continue;
        }
        if (row && x->nb[0] == sizeof(float)) {
            row(out, (const float *)xr, x->ne[0]);
            continue;
        }
        for (int64_t i = 0; i < x->ne[0]; i++) out[i] = f(a->dst, *(const float *)(xr + i * (int64_t)x->nb[0]));
    }
}

static float scale_fn(const kiln_tensor *n, float x) { return n->fp[0] * x + n->fp[1]; }
static float tanh_fn(const kiln_tensor *n, float x) { (void)n; return tanhf(x); }
static float relu_fn(const kiln_tensor *n, float x) { (void)n; return kiln__act_apply(KILN_ACT_RELU, x); }
static float gelu_fn(const kiln_tensor *n, float x) { (void)n; return kiln__act_apply(KILN_ACT_GELU, x); }

/* KILN_OP_UNARY: the function i[0], in float through libm (the scalar reference; contiguous rows of the
 * exact GELU go through the level's gelu_erf_f32, the others have no SIMD form yet). */
static float unary_fn_of(const kiln_tensor *n, float x) {
    switch (n->ip[0]) {
    case KILN_UNARY_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case KILN_UNARY_ERF: return erff(x);
    case KILN_UNARY_SQRT: return sqrtf(x);
    case KILN_UNARY_EXP: return expf(x);
    case KILN_UNARY_LOG: return logf(x);
    case KILN_UNARY_NEG: return -x;
    case KILN_UNARY_RECIP: return 1.0f / x;
    case KILN_UNARY_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case KILN_UNARY_NOT: return x == 0.0f ? 1.0f : 0.0f;
    case KILN_UNARY_ROUND: return nearbyintf(x); /* the default rounding mode: ties to even */
    default: return x;
    }
}

void kiln__cpu_unary(const kiln_cpu_args *a) {
    unary_rows(a, unary_fn_of, KILN_ACT_NONE,
               a->dst->ip[0] == KILN_UNARY_GELU_ERF ? kiln__cpu_isa()->gelu_erf_f32 : NULL);
}
void kiln__cpu_scale(const kiln_cpu_args *a) { unary_rows(a, scale_fn, KILN_ACT_NONE, NULL); }
void kiln__cpu_tanh(const kiln_cpu_args *a) { unary_rows(a, tanh_fn, KILN_ACT_NONE, NULL); }
void kiln__cpu_relu(const kiln_cpu_args *a) { unary_rows(a, relu_fn, KILN_ACT_RELU, NULL); }
void kiln__cpu_gelu(const kiln_cpu_args *a) { unary_rows(a, gelu_fn, KILN_ACT_GELU, NULL); }

void kiln__cpu_concat(const kiln_cpu_args *a) {
    size_t row = a->dst->nb[1];
    int64_t r0, r1;
    kiln__cpu_split(a->dst->ne[1], a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t local = r;
        int i = 0;
        while (local >= a->dst->src[i]->ne[1]) local -= a->dst->src[i++]->ne[1];
        memcpy(kiln__cpu_row(a->dst, r, 0, 0), kiln__cpu_row(a->dst->src[i], local, 0, 0), row);
    }
}

/* out[n, m] = alpha * sum_k W[k, n] x[k, m] (+ bias[n]), activation; W read transposed when flagged. */
void kiln__cpu_linear(const kiln_cpu_args *a) {
    const kiln_tensor *w = a->dst->src[0], *x = a->dst->src[1], *bias = a->dst->src[2];
    bool trans = (a->dst->ip[1] & KILN_LINEAR_TRANS0) != 0;
    int64_t K = x->ne[0], N = a->dst->ne[0], M = x->ne[1];
    int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3], n0, n1;
    float alpha = a->dst->fp[0];
    kiln__cpu_split(N, a->ith, a->nth, &n0, &n1);
    for (int64_t i3 = 0; i3 < x->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < x->ne[2]; i2++)
            for (int64_t n = n0; n < n1; n++) {
                float *wf = a->scratch;
                if (trans) {
                    const char *base = kiln__cpu_row(w, 0, i2 / r2, i3 / r3) + n * (int64_t)w->nb[0];
                    for (int64_t k = 0; k < K; k++) wf[k] = *(const float *)(base + k * (int64_t)w->nb[1]);
                } else {
                    kiln__dequantize_row(w->type, kiln__cpu_row(w, n, i2 / r2, i3 / r3), wf, K);
                }
                for (int64_t m = 0; m < M; m++) {
                    float v = kiln__cpu_dot_f32(wf, (const float *)kiln__cpu_row(x, m, i2, i3), K);
                    if (alpha != 1.0f) v *= alpha;
                    if (bias) v += ((const float *)bias->data)[n];
                    ((float *)kiln__cpu_row(a->dst, m, i2, i3))[n] = kiln__act_apply(a->dst->ip[0], v);
                }
            }
}

/* Shared loop of the broadcasting binary fused ops: out = f(x, y) elementwise. */
typedef float (*binary_fn)(const kiln_tensor *node, float x, float y);

static void binary_rows(const kiln_cpu_args *a, binary_fn f) {
    const kiln_tensor *x = a->dst->src[0], *y = a->dst->src[1];
    int64_t r0, r1;
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        const char *xr = kiln__cpu_row(x, i1, i2, i3);
        const char *yr = kiln__cpu_row(y, i1 % y->ne[1], i2 % y->ne[2], i3 % y->ne[3]);
        float *out = (float *)kiln__cpu_row(a->dst, i1, i2, i3);
        for (int64_t i = 0; i < x->ne[0]; i++)
            out[i] = f(a->dst, *(const float *)(xr + i * (int64_t)x->nb[0]),
                       *(const float *)(yr + (i % y->ne[0]) * (int64_t)y->nb[0]));
    }
}

static float add_act_fn(const kiln_tensor *n, float x, float y) { return kiln__act_apply(n->ip[0], x + y); }
static float swiglu_fn(const kiln_tensor *n, float g, float u) {
    (void)n;
    return kiln__act_apply(KILN_ACT_SILU, g) * u;
}

void kiln__cpu_add_act(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0], *y = a->dst->src[1];
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    int64_t r0, r1;
    if (x->nb[0] != sizeof(float) || y->nb[0] != sizeof(float) || y->ne[0] != x->ne[0]) {
        binary_rows(a, add_act_fn);
        return;
    }
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) { /* contiguous rows: the sum, then the activation in place */
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        float *out = (float *)kiln__cpu_row(a->dst, i1, i2, i3);
        isa->add_f32(out, (const float *)kiln__cpu_row(x, i1, i2, i3),
                     (const float *)kiln__cpu_row(y, i1 % y->ne[1], i2 % y->ne[2], i3 % y->ne[3]), x->ne[0]);
        kiln__act_row(isa, a->dst->ip[0], out, out, x->ne[0]);
    }
}

void kiln__cpu_swiglu(const kiln_cpu_args *a) {
    const kiln_tensor *g = a->dst->src[0], *u = a->dst->src[1];
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    int64_t r0, r1;
    if (g->nb[0] != sizeof(float) || u->nb[0] != sizeof(float) || u->ne[0] != g->ne[0]) {
        binary_rows(a, swiglu_fn);
        return;
    }
    kiln__cpu_split(kiln__tensor_nrows(g), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) { /* contiguous rows: the level's row helper */
        int64_t i1, i2, i3;
        kiln__cpu_row_index(g, r, &i1, &i2, &i3);
        isa->swiglu_f32((float *)kiln__cpu_row(a->dst, i1, i2, i3), (const float *)kiln__cpu_row(g, i1, i2, i3),
                        (const float *)kiln__cpu_row(u, i1 % u->ne[1], i2 % u->ne[2], i3 % u->ne[3]), g->ne[0]);
    }
}

void kiln__cpu_rms_norm_mul(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0], *w = a->dst->src[1];
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    bool w_contiguous = w->nb[0] == sizeof(float) && w->ne[0] == x->ne[0];
    float eps = a->dst->fp[0];
    int64_t r0, r1, n = x->ne[0];
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        const float *xr = (const float *)kiln__cpu_row(x, i1, i2, i3);
        const char *wr = kiln__cpu_row(w, i1 % w->ne[1], i2 % w->ne[2], i3 % w->ne[3]);
        float *out = (float *)kiln__cpu_row(a->dst, i1, i2, i3);
        float ss = isa->sum_sq_f32(xr, n);
        ss /= (float)n;
        ss += eps;
        ss = 1.0f / sqrtf(ss);
        if (w_contiguous) {
            isa->scale_mul_f32(out, ss, xr, (const float *)wr, n);
            continue;
        }
        for (int64_t i = 0; i < n; i++) out[i] = (ss * xr[i]) * *(const float *)(wr + (i % w->ne[0]) * (int64_t)w->nb[0]);
    }
}

/* set and acc: each thread copies its rows of the destination (unless computing in place) and then
 * applies the region's elements that fall in those rows, so no row is touched by two threads. */
static void set_or_acc(const kiln_cpu_args *a, bool add) {
    const kiln_tensor *d = a->dst->src[0], *x = a->dst->src[1];
    size_t row_bytes = a->dst->nb[1];
    int64_t r0, r1;
    kiln__cpu_split(kiln__tensor_nrows(a->dst), a->ith, a->nth, &r0, &r1);
    if (a->dst->data != d->data)
        memcpy((char *)a->dst->data + (size_t)r0 * row_bytes, (const char *)d->data + (size_t)r0 * row_bytes,
               (size_t)(r1 - r0) * row_bytes);
    for (int64_t r = 0; r < kiln__tensor_nrows(x); r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        size_t base = a->dst->offset + (size_t)i1 * (size_t)a->dst->ip[0] + (size_t)i2 * (size_t)a->dst->ip[1] +
                      (size_t)i3 * (size_t)a->dst->ip[2];
        const float *xr = (const float *)kiln__cpu_row(x, i1, i2, i3);
        for (int64_t i = 0; i < x->ne[0]; i++) {
            size_t at = base + (size_t)i * sizeof(float);
            int64_t row = (int64_t)(at / row_bytes);
            if (row < r0 || row >= r1) continue;
            float *o = (float *)((char *)a->dst->data + at);
            *o = add ? *o + xr[i] : xr[i];
        }
    }
}

void kiln__cpu_set(const kiln_cpu_args *a) { set_or_acc(a, false); }
void kiln__cpu_acc(const kiln_cpu_args *a) { set_or_acc(a, true); }
