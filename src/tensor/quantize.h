/*
 * quantize.h - internal interface of the quantizers (float -> block types): one function per type,
 * grouped by family in quantize_legacy.c, quantize_kquants.c and quantize_nonlinear.c, plus the scale
 * searches the K-quants and IQ4 types share (kquant_search.c). kiln_quantize_row (quantize.c) validates
 * and dispatches. Every function takes n finite floats (a multiple of the block size) and writes
 * n / block_elems blocks; none allocates.
 */
#ifndef KILN_TENSOR_QUANTIZE_H
#define KILN_TENSOR_QUANTIZE_H

#include "tensor/types.h"

void kiln__quantize_q4_0(const float *x, void *dst, int64_t n);
void kiln__quantize_q4_1(const float *x, void *dst, int64_t n);
void kiln__quantize_q5_0(const float *x, void *dst, int64_t n);
void kiln__quantize_q5_1(const float *x, void *dst, int64_t n);
void kiln__quantize_q8_0(const float *x, void *dst, int64_t n);
void kiln__quantize_mxfp4(const float *x, void *dst, int64_t n);
void kiln__quantize_q2_k(const float *x, void *dst, int64_t n);
void kiln__quantize_q3_k(const float *x, void *dst, int64_t n);
void kiln__quantize_q4_k(const float *x, void *dst, int64_t n);
void kiln__quantize_q5_k(const float *x, void *dst, int64_t n);
void kiln__quantize_q6_k(const float *x, void *dst, int64_t n);
void kiln__quantize_q8_k(const float *x, void *dst, int64_t n);
void kiln__quantize_iq4_nl(const float *x, void *dst, int64_t n);
void kiln__quantize_iq4_xs(const float *x, void *dst, int64_t n);

/* Round to nearest, ties to even, as ggml's nearest_int (the 1.5 * 2^23 trick), for |f| <= 4194303.
 * Beyond that (ggml asserts it away, but the quantizers reach it when an fp16 scale overflows) the
 * result is the same defined, bounded value ggml computes: the low mantissa bits minus 2^22, so NaN and
 * infinities give 0 and the output always lies in [-2^22, 2^22). */
int kiln__nearest_int(float f);

/* llama.cpp's scale searches (same names, same arithmetic; see docs/quantization.md):
 * make_qkx2_quants: an affine fit x ~ scale * L - min with L in [0, nmax], minimizing the weighted
 *   squared (or absolute, use_mad) error over nstep trial scales; *the_min receives min (>= 0).
 * make_q3_quants: a symmetric fit x ~ scale * (L - nmax) with L in [0, 2 nmax), refined coordinate-wise
 *   for weighted RMSE (weights x^2) when do_rmse.
 * make_qx_quants: the symmetric fit of Q6_K, trying 18 scales around nmax / max (weights by rmse_type). */
float kiln__make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                             uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad);
float kiln__make_q3_quants(int n, int nmax, const float *x, int8_t *L, bool do_rmse);
float kiln__make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type);

/* The index of the table value nearest to x (ties to the lower index), table sorted ascending. */
int kiln__best_index_int8(int n, const int8_t *table, float x);

#endif
