/*
 * kernels_mm_ref.c - scalar reference matmul tiles (see kiln_mm_fn in kernels.h) and the activation
 * quantizer. These define the arithmetic the SIMD variants are tested against:
 *   F32, F16, BF16   sum over k of w[k] * x[k], in float, left to right (weights converted exactly);
 *   bf16 products    (the mm_packed_bf16 tiles) weights and activations rounded to bf16, the sum over
 *                    element pairs gaining the second product, then the first (vdpbf16ps's order);
 *   Q8_0, Q4_0       per 32-block an exact integer dot of the weight quants with the q8 activation
 *                    quants, scaled by d_w * d_x and summed in float block by block;
 *   Q4_K, Q6_K       likewise per 32-block, with the sub-block scales (kernels_mm_kquants_ref.c).
 * Also the float vector helpers of the attention kernel: dot, y += a x, y *= a.
 */
#include "backend/cpu/kernels.h"

#include "tensor/types.h"

#include <math.h>

void kiln__q8_quantize_ref(const float *x, void *row, int64_t k);
void kiln__q8_quantize_sb_ref(const float *x, void *row, int64_t k);

/* q8 rows whose scales are shared by `span` elements (KILN_Q8_BLOCK, or KILN_Q8_SUPERBLOCK). */
static void quantize_spans(const float *x, void *row, int64_t k, int64_t span) {
    int8_t *q = row;
    float *d = (float *)((char *)row + k);
    int32_t *s = (int32_t *)((char *)row + k + k / KILN_Q8_BLOCK * 4);
    for (int64_t b0 = 0; b0 < k; b0 += span) {
        float amax = 0.0f, db, id;
        for (int64_t i = 0; i < span; i++) amax = fmaxf(amax, fabsf(x[b0 + i]));
        db = amax / 127.0f;
        id = db != 0.0f ? 1.0f / db : 0.0f;
        for (int64_t b = b0 / KILN_Q8_BLOCK; b < (b0 + span) / KILN_Q8_BLOCK; b++) {
            int32_t sum = 0;
            for (int i = 0; i < KILN_Q8_BLOCK; i++) {
                /* Clamped before the conversion so that NaN and infinite inputs give a defined value (NaN
                 * goes to -127, as the SIMD max with the bound second does), never an undefined float-to-int
                 * cast. */
                int32_t v = (int32_t)nearbyintf(fminf(fmaxf(x[b * KILN_Q8_BLOCK + i] * id, -127.0f), 127.0f));
                q[b * KILN_Q8_BLOCK + i] = (int8_t)v;
                sum += v;
            }
            d[b] = db;
            s[b] = sum;
        }
    }
}

void kiln__q8_quantize_ref(const float *x, void *row, int64_t k) { quantize_spans(x, row, k, KILN_Q8_BLOCK); }

void kiln__q8_quantize_sb_ref(const float *x, void *row, int64_t k) {
    quantize_spans(x, row, k, KILN_Q8_SUPERBLOCK);
}

static void mm_f32(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                   float *out, size_t os) {
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++)
            out[c * os + r] = kiln__cpu_dot_f32((const float *)((const char *)w + r * ws),
                                                (const float *)((const char *)x + c * xs), k);
}

static void mm_half(bool bf16, int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                    int64_t nc, float *out, size_t os) {
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++) {
            const uint16_t *wr = (const uint16_t *)((const char *)w + r * ws);
            const float *xr = (const float *)((const char *)x + c * xs);
            float sum = 0.0f;
            for (int64_t i = 0; i < k; i++)
                sum += (bf16 ? kiln_bf16_to_fp32(wr[i]) : kiln_fp16_to_fp32(wr[i])) * xr[i];
            out[c * os + r] = sum;
        }
}

static void mm_f16(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                   float *out, size_t os) {
    mm_half(false, k, w, ws, nr, x, xs, nc, out, os);
}

static void mm_bf16(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    mm_half(true, k, w, ws, nr, x, xs, nc, out, os);
}

uint16_t kiln__bf16_round(float f) {
    if (fpclassify(f) == FP_SUBNORMAL) f = copysignf(0.0f, f);
    return kiln_fp32_to_bf16(f);
}

/* x: k bf16 activations per column. Products of two bf16 values are exact in float. */
static void mm_bf16_products(bool bf16, int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                             int64_t nc, float *out, size_t os) {
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++) {
            const uint16_t *wr = (const uint16_t *)((const char *)w + r * ws);
            const uint16_t *xr = (const uint16_t *)((const char *)x + c * xs);
            float sum = 0.0f;
            for (int64_t i = 0; i + 1 < k; i += 2)
                for (int64_t j = i + 1; j >= i; j--) {
                    float wv = bf16 ? kiln_bf16_to_fp32(wr[j]) : kiln_fp16_to_fp32(wr[j]);
                    sum += kiln_bf16_to_fp32(kiln__bf16_round(wv)) * kiln_bf16_to_fp32(xr[j]);
                }
            out[c * os + r] = sum;
        }
}

static void mm_f16_bf16_products(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                                 int64_t nc, float *out, size_t os) {
    mm_bf16_products(false, k, w, ws, nr, x, xs, nc, out, os);
}

static void mm_bf16_bf16_products(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                                  int64_t nc, float *out, size_t os) {
    mm_bf16_products(true, k, w, ws, nr, x, xs, nc, out, os);
}

kiln_mm_fn kiln__mm_bf16_ref(kiln_type type) {
    return type == KILN_TYPE_F16 ? mm_f16_bf16_products : type == KILN_TYPE_BF16 ? mm_bf16_bf16_products : NULL;
}

static void f32_to_bf16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kiln__bf16_round(x[i]);
}

static float dot_q8_0(int64_t k, const kiln_block_q8_0 *wb, const void *xrow) {
    const int8_t *q = xrow;
    const float *d = kiln__q8_row_d(xrow, k);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / KILN_Q8_BLOCK; b++) {
        int32_t isum = 0;
        for (int i = 0; i < KILN_Q8_BLOCK; i++) isum += wb[b].qs[i] * q[b * KILN_Q8_BLOCK + i];
        sum += kiln_fp16_to_fp32(wb[b].d) * d[b] * (float)isum;
    }
    return sum;
}

static float dot_q4_0(int64_t k, const kiln_block_q4_0 *wb, const void *xrow) {
    const int8_t *q = xrow;
    const float *d = kiln__q8_row_d(xrow, k);
    const int32_t *s = kiln__q8_row_s(xrow, k);
    float sum = 0.0f;
    for (int64_t b = 0; b < k / KILN_Q8_BLOCK; b++) {
        const int8_t *qb = q + b * KILN_Q8_BLOCK;
        int32_t isum = 0;
        for (int i = 0; i < KILN_Q8_BLOCK / 2; i++)
            isum += (wb[b].qs[i] & 0x0f) * qb[i] + (wb[b].qs[i] >> 4) * qb[i + KILN_Q8_BLOCK / 2];
        isum -= 8 * s[b];
        sum += kiln_fp16_to_fp32(wb[b].d) * d[b] * (float)isum;
    }
    return sum;
}

static void mm_q8_0(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++)
            out[c * os + r] = dot_q8_0(k, (const kiln_block_q8_0 *)((const char *)w + r * ws),
                                       (const char *)x + c * xs);
}

static void mm_q4_0(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++)
            out[c * os + r] = dot_q4_0(k, (const kiln_block_q4_0 *)((const char *)w + r * ws),
                                       (const char *)x + c * xs);
}

static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kiln_fp16_to_fp32(x[i]);
}

static void bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kiln_bf16_to_fp32(x[i]);
}

static void axpy_f32(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void scale_f32(float *y, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}


void kiln__cpu_isa_init_ref(kiln_cpu_isa *t) {
    t->level = KILN_CPU_REF;
    for (int i = 0; i < KILN_TYPE_COUNT; i++) t->mm[i] = t->mm_packed[i] = t->mm_packed_bf16[i] = NULL;
    t->mm[KILN_TYPE_F32] = mm_f32;
    t->mm[KILN_TYPE_F16] = mm_f16;
    t->mm[KILN_TYPE_BF16] = mm_bf16;
    t->mm[KILN_TYPE_Q8_0] = mm_q8_0;
    t->mm[KILN_TYPE_Q4_0] = mm_q4_0;
    kiln__cpu_isa_init_kquants_ref(t); /* Q4_K, Q6_K (kernels_mm_kquants_ref.c) */
    t->quantize_q8 = kiln__q8_quantize_ref;
    t->quantize_q8_sb = kiln__q8_quantize_sb_ref;
    for (int i = 0; i < KILN_TYPE_COUNT; i++) t->q8_superblock[i] = false;
    t->q8_superblock[KILN_TYPE_Q4_K] = true; /* llama.cpp's q8_K for its K-quant dots; every level inherits it */
    t->q8_superblock[KILN_TYPE_Q6_K] = true;
    t->f32_to_bf16 = f32_to_bf16;
    t->bf16_prefill = false;
    t->f16_to_f32 = f16_to_f32;
    t->bf16_to_f32 = bf16_to_f32;
    t->dot_f32 = kiln__cpu_dot_f32;
    t->axpy_f32 = axpy_f32;
    t->scale_f32 = scale_f32;
    kiln__cpu_isa_init_vec_ref(t);
    t->flash_attention = NULL;
    t->flash_attention_scratch_floats = NULL;
}
