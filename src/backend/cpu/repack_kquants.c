/*
 * repack_kquants.c - Q4_K and Q6_K weights rewritten for the packed VNNI tiles (x86/avx512_kquants.c; the
 * AVX2 tiles of x86/avx2_packed_kquants.c read the same layout as two 8-row halves per vector):
 * like repack.c's Q8_0/Q4_0 layouts, 16 rows interleaved so that one 64-byte load holds 4 quants of each
 * of 16 rows and one broadcast of 4 activation bytes feeds all 16 rows. The 6-bit packed Q4_K scales and
 * mins are decoded here once, into one byte per row and sub-block, so the kernels never unpack them.
 * A partial last group (n not a multiple of 16) is padded with zero rows (zero scales: their outputs are
 * 0 and the tiles do not store them).
 *
 * Per group of 16 rows and per super-block of 256 elements, 64-byte aligned sizes, in order:
 *   Q4_K  2368 bytes: sc[8][16] and m[8][16] (sub-block, row: the 6-bit scales and mins, uint8), d[16]
 *         and dmin[16] (half floats), then per sub-block g (32 elements) 4 vectors of 64 bytes: vector j
 *         holds, for row r, 4 bytes whose low nibbles are elements 32g + 4j + i and high nibbles elements
 *         32g + 16 + 4j + i (i = 0..3) - the Q4_0 arrangement, one q8 block per 256 bytes.
 *   Q6_K  3392 bytes: sc[16][16] (16-element sub-block, row: int8), d[16] (half floats), 32 bytes of
 *         zeros, then per 32 elements (one q8 block) 384 bytes: 4 vectors of low nibbles (vector j, row
 *         r, byte i: element 4j + i in the low nibble, 16 + 4j + i in the high one) and 2 vectors of high
 *         bit pairs (vector h, row r, byte i: bits 2j, 2j + 1 hold the top two bits of element
 *         16h + 4j + i, j = 0..3). Quants are stored unsigned (0..63); the tiles subtract the 32.
 * Group g starts at g * (K / 256) * super-block bytes.
 */
#include "backend/cpu/kernels.h"

#include "tensor/types.h"

#include <string.h>

#define Q4K_BYTES 2368
#define Q6K_BYTES 3392

size_t kiln__repack_kquants_group_bytes(kiln_type type, int64_t k) {
    size_t per = type == KILN_TYPE_Q4_K ? Q4K_BYTES : type == KILN_TYPE_Q6_K ? Q6K_BYTES : 0;
    return per * (size_t)(k / KILN_QK_K);
}

/* Elements u[0..255] of a block interleaved into one group's quant vectors (see above): vector j of the
 * 32 elements from e0 holds, for row r, bytes u[e0 + 4j + i] | u[e0 + 16 + 4j + i] << 4 (low nibbles). */
static void put_nibbles(const uint8_t *u, int r, unsigned char *out, int block_stride) {
    for (int b = 0; b < 8; b++)
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 4; i++) {
                const uint8_t *e = u + 32 * b + 4 * j + i;
                out[block_stride * b + 64 * j + 4 * r + i] =
                    (unsigned char)((e[0] & 0xf) | (e[16] & 0xf) << 4);
            }
}

/* Row r of one group's super-block from a Q4_K block. */
static void put_q4_k(const kiln_block_q4_k *blk, int r, unsigned char *out) {
    uint8_t u[KILN_QK_K];
    for (int g = 0; g < 8; g++) {
        uint8_t sc, m;
        kiln__kquant_scale_min(g, blk->scales, &sc, &m);
        out[16 * g + r] = sc;
        out[128 + 16 * g + r] = m;
    }
    memcpy(out + 256 + 2 * r, &blk->d, 2);
    memcpy(out + 288 + 2 * r, &blk->dmin, 2);
    for (int c = 0; c < 4; c++) /* per 64 elements: element l in the low nibble, l + 32 in the high one */
        for (int l = 0; l < 32; l++) {
            u[64 * c + l] = blk->qs[32 * c + l] & 0xf;
            u[64 * c + 32 + l] = blk->qs[32 * c + l] >> 4;
        }
    put_nibbles(u, r, out + 320, 256);
}

static void put_q6_k(const kiln_block_q6_k *blk, int r, unsigned char *out) {
    uint8_t u[KILN_QK_K]; /* unsigned quants 0..63, layout as in src/tensor/dequant_kquants.c */
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                int lo = (blk->ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xf;
                int hi = (blk->qh[32 * h + l] >> (2 * k)) & 3;
                u[128 * h + 32 * k + l] = (uint8_t)(lo | hi << 4);
            }
    for (int j = 0; j < 16; j++) out[16 * j + r] = (unsigned char)blk->scales[j];
    memcpy(out + 256 + 2 * r, &blk->d, 2);
    put_nibbles(u, r, out + 320, 384);
    for (int b = 0; b < 8; b++)
        for (int i = 0; i < 4; i++) {
            unsigned char h0 = 0, h1 = 0;
            for (int j = 0; j < 4; j++) {
                h0 |= (unsigned char)((u[32 * b + 4 * j + i] >> 4) << (2 * j));
                h1 |= (unsigned char)((u[32 * b + 16 + 4 * j + i] >> 4) << (2 * j));
            }
            out[320 + 384 * b + 256 + 4 * r + i] = h0;
            out[320 + 384 * b + 320 + 4 * r + i] = h1;
        }
}

void kiln__repack_kquants(kiln_type type, const void *src, size_t row_bytes, int64_t k, int64_t n,
                          void *dst) {
    size_t per = type == KILN_TYPE_Q4_K ? Q4K_BYTES : Q6K_BYTES, bb = kiln__type_traits(type)->block_bytes;
    int64_t nsb = k / KILN_QK_K;
    unsigned char *out = dst;
    if (n % 16) /* the padding rows of a partial last group: zero scales */
        memset(out + (size_t)(n / 16) * per * (size_t)nsb, 0, per * (size_t)nsb);
    for (int64_t g = 0; g < (n + 15) / 16; g++)
        for (int64_t i = 0; i < nsb; i++, out += per) {
            if (type == KILN_TYPE_Q6_K) memset(out + 288, 0, 32);
            for (int r = 0; r < 16 && g * 16 + r < n; r++) {
                const unsigned char *blk =
                    (const unsigned char *)src + (size_t)(g * 16 + r) * row_bytes + (size_t)i * bb;
                if (type == KILN_TYPE_Q4_K) put_q4_k((const kiln_block_q4_k *)blk, r, out);
                else put_q6_k((const kiln_block_q6_k *)blk, r, out);
            }
        }
}
