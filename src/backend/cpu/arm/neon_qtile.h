/*
 * neon_qtile.h - the Q8_0 / Q4_0 register tile of the neon level, shared by neon_mm.c (widening
 * multiplies, any aarch64) and neon_dot.c (sdot, built for armv8.2-a+dotprod), which differ only in how
 * one 32-element block's integer dot is formed. Both give the reference's exact integer per block
 * (kernels_mm_ref.c) and then do its float arithmetic in its order, sum += d_w * d_x * isum block by
 * block, so the outputs equal the reference's bit for bit. (Keeping 4-lane float partial sums instead
 * saves the horizontal add per block but moves outputs by a few ulp of the block terms, which on rows
 * whose blocks cancel exceeds the relative bounds the level tests hold every level to.)
 *
 * Every (row, column) accumulator runs the same instruction sequence whatever the tile shape, so results
 * do not depend on how rows are split over threads. Include only inside `#if defined(__aarch64__)`.
 */
#ifndef KILN_CPU_ARM_NEON_QTILE_H
#define KILN_CPU_ARM_NEON_QTILE_H

#include "backend/cpu/arm/neon.h"

#include "tensor/types.h"

#define KILN_NEON_INLINE static inline __attribute__((always_inline))

/* Four lane sums of w . x over one block (w0, x0: elements 0..15; w1, x1: 16..31); their total is the
 * block's exact integer dot. */
KILN_NEON_INLINE int32x4_t kiln__neon_block_dot(bool sdot, int8x16_t w0, int8x16_t w1, int8x16_t x0,
                                                int8x16_t x1) {
#if defined(__ARM_FEATURE_DOTPROD)
    if (sdot) return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1);
#endif
    (void)sdot;
    /* Two products per int16 lane: |w| <= 128 and |x| <= 127, so |sum| <= 32512 cannot overflow. */
    int16x8_t p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), w0, x0);
    int16x8_t p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), w1, x1);
    return vpadalq_s16(vpaddlq_s16(p0), p1);
}

/* Block b of weight row `row` as signed quants (Q4_0 nibbles minus 8: the same integer dot as the
 * reference's nibbles-then-subtract-8-times-the-block-sum) and its scale. */
KILN_NEON_INLINE float kiln__neon_weight_block(int type, const char *row, int64_t b, int8x16_t *w0,
                                               int8x16_t *w1) {
    if (type == KILN_TYPE_Q8_0) {
        const kiln_block_q8_0 *blk = (const kiln_block_q8_0 *)row + b;
        *w0 = vld1q_s8(blk->qs);
        *w1 = vld1q_s8(blk->qs + 16);
        return kiln__neon_h2f(blk->d);
    }
    const kiln_block_q4_0 *blk = (const kiln_block_q4_0 *)row + b;
    uint8x16_t q = vld1q_u8(blk->qs);
    const int8x16_t eight = vdupq_n_s8(8);
    *w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), eight);
    *w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight);
    return kiln__neon_h2f(blk->d);
}

/* An R x C register tile: out[c * os + r] for weight rows at w + r * ws, q8 rows at x + c * xs. */
KILN_NEON_INLINE void kiln__neon_tile_quant(int type, bool sdot, int R, int C, int64_t k, const char *w,
                                            size_t ws, const char *x, size_t xs, float *out, size_t os) {
    float acc[KILN_NEON_RMAX][KILN_NEON_CMAX];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = 0.0f;
    for (int64_t b = 0; b < k / KILN_Q8_BLOCK; b++) {
        int8x16_t x0[KILN_NEON_CMAX], x1[KILN_NEON_CMAX];
        float xd[KILN_NEON_CMAX];
        for (int c = 0; c < C; c++) {
            const int8_t *q = (const int8_t *)(x + c * xs) + b * KILN_Q8_BLOCK;
            x0[c] = vld1q_s8(q);
            x1[c] = vld1q_s8(q + 16);
            xd[c] = kiln__q8_row_d(x + c * xs, k)[b];
        }
        for (int r = 0; r < R; r++) {
            int8x16_t w0, w1;
            float wd = kiln__neon_weight_block(type, w + r * ws, b, &w0, &w1);
            for (int c = 0; c < C; c++) {
                int32_t isum = vaddvq_s32(kiln__neon_block_dot(sdot, w0, w1, x0[c], x1[c]));
                acc[r][c] += wd * xd[c] * (float)isum; /* the reference's expression */
            }
        }
    }
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) out[c * os + r] = acc[r][c];
}

/* Walk an nr x nc tile (kiln_mm_fn) in register tiles, columns outer so a block of weight rows stays in
 * cache; the shapes are constants at each call so the tile specializes. */
KILN_NEON_INLINE void kiln__neon_mm_quant(int type, bool sdot, int64_t k, const void *w, size_t ws,
                                          int64_t nr, const void *x, size_t xs, int64_t nc, float *out,
                                          size_t os) {
    for (int64_t c0 = 0; c0 < nc; c0 += KILN_NEON_CMAX) {
        const char *xc = (const char *)x + c0 * xs;
        bool two = nc - c0 >= 2;
        int64_t r0 = 0;
        for (; r0 + KILN_NEON_RMAX <= nr; r0 += KILN_NEON_RMAX) {
            const char *wr = (const char *)w + r0 * ws;
            if (two) kiln__neon_tile_quant(type, sdot, 4, 2, k, wr, ws, xc, xs, out + c0 * os + r0, os);
            else kiln__neon_tile_quant(type, sdot, 4, 1, k, wr, ws, xc, xs, out + c0 * os + r0, os);
        }
        for (; r0 < nr; r0++) {
            const char *wr = (const char *)w + r0 * ws;
            if (two) kiln__neon_tile_quant(type, sdot, 1, 2, k, wr, ws, xc, xs, out + c0 * os + r0, os);
            else kiln__neon_tile_quant(type, sdot, 1, 1, k, wr, ws, xc, xs, out + c0 * os + r0, os);
        }
    }
}

#endif
