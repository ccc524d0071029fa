/*
 * repack.c - weights rewritten once into the layout of the "packed" matmul kernels: 16 rows interleaved
 * so that one 64-byte load holds 4 bytes of each of 16 rows, and one broadcast activation word feeds all
 * 16 rows (x86/avx512_packed.c; the AVX2 tiles, x86/avx2_packed.c, read each 64-byte vector as two 8-row
 * halves). The packed copy has exactly the size of the original.
 *
 * Per group of 16 rows and per 32-block b, in order:
 *   Q8_0  8 x 64 bytes: vector j holds, for row r = 0..15, bytes 4j..4j+3 of the row's quants, each
 *         stored as q + 128 (unsigned); then the 16 rows' half-float scales (32 bytes). 544 bytes.
 *   Q4_0  4 x 64 bytes: vector j holds, for row r, bytes 4j..4j+3 of the row's qs (low nibbles are
 *         elements 4j..4j+3, high nibbles elements 16+4j..16+4j+3); then the 16 scales. 288 bytes.
 * Group g starts at g * (K / 32) * block_group_bytes.
 * F32, F16 and BF16 weights have their own layout (repack_pairs.c), Q4_K and Q6_K theirs (repack_kquants.c);
 * these entry points route them there.
 */
#include "backend/cpu/kernels.h"

#include "tensor/types.h"

#include <string.h>

static bool is_kquant(kiln_type type) { return type == KILN_TYPE_Q4_K || type == KILN_TYPE_Q6_K; }

static bool is_float(kiln_type type) {
    return type == KILN_TYPE_F32 || type == KILN_TYPE_F16 || type == KILN_TYPE_BF16;
}

size_t kiln__repack_group_bytes(kiln_type type, int64_t k) {
    if (is_float(type)) return kiln__repack_pairs_group_bytes(type, k);
    if (is_kquant(type)) return kiln__repack_kquants_group_bytes(type, k);
    size_t per_block = type == KILN_TYPE_Q8_0 ? 16 * 34 : type == KILN_TYPE_Q4_0 ? 16 * 18 : 0;
    return per_block * (size_t)(k / KILN_Q8_BLOCK);
}

bool kiln__repack_pads(kiln_type type) {
    return is_float(type) || is_kquant(type);
}

bool kiln__repack_supported(kiln_type type, int64_t k, int64_t n) {
    if (is_float(type)) return kiln__repack_pairs_supported(k, n);
    if (is_kquant(type)) return k % KILN_QK_K == 0 && k > 0 && n > 0;
    return (type == KILN_TYPE_Q8_0 || type == KILN_TYPE_Q4_0) && k % KILN_Q8_BLOCK == 0 && n % 16 == 0 && n > 0;
}

void kiln__repack(kiln_type type, const void *src, size_t row_bytes, int64_t k, int64_t n, void *dst) {
    if (is_float(type)) {
        kiln__repack_pairs(type, src, row_bytes, k, n, dst);
        return;
    }
    if (is_kquant(type)) {
        kiln__repack_kquants(type, src, row_bytes, k, n, dst);
        return;
    }
    int64_t nb = k / KILN_Q8_BLOCK;
    unsigned char *out = dst;
    for (int64_t g = 0; g < n / 16; g++)
        for (int64_t b = 0; b < nb; b++) {
            for (int r = 0; r < 16; r++) {
                const unsigned char *row = (const unsigned char *)src + (size_t)(g * 16 + r) * row_bytes;
                if (type == KILN_TYPE_Q8_0) {
                    const kiln_block_q8_0 *blk = (const kiln_block_q8_0 *)row + b;
                    for (int j = 0; j < 8; j++)
                        for (int i = 0; i < 4; i++)
                            out[j * 64 + r * 4 + i] = (unsigned char)((uint8_t)blk->qs[4 * j + i] ^ 0x80u);
                    memcpy(out + 512 + r * 2, &blk->d, 2);
                } else {
                    const kiln_block_q4_0 *blk = (const kiln_block_q4_0 *)row + b;
                    for (int j = 0; j < 4; j++) memcpy(out + j * 64 + r * 4, blk->qs + 4 * j, 4);
                    memcpy(out + 256 + r * 2, &blk->d, 2);
                }
            }
            out += type == KILN_TYPE_Q8_0 ? 544 : 288;
        }
}
