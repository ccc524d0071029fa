/*
 * repack_half.c - F16 and BF16 weights rewritten once into 16-row groups of element pairs, the layout of
 * the packed half-float tiles (x86/avx512_half.c).
 *
 * Group g holds rows 16g .. 16g + 15. For each pair of elements p (elements 2p, 2p + 1), 64 bytes:
 * row 0's two values, row 1's two values, ..., row 15's two values. One 64-byte load thus holds two
 * elements of every row of the group: its low half converts to 16 floats for rows 0-7 (pair lanes), its
 * high half to rows 8-15, and one broadcast activation pair feeds both. This is also the VNNI pair layout
 * of AMX-BF16 B tiles (16 rows of 64 bytes = 32 elements of 16 weight rows), so a later AMX kernel can
 * load BF16 groups as they are.
 *
 * A group is K * 32 bytes; the packed copy has the size of the original rounded up to whole groups:
 * the rows past n in the last group are zeros, and the tiles never store their outputs. K must be a
 * multiple of 32 (a whole number of AMX steps; the AVX-512 tiles need only pairs).
 */
#include "backend/cpu/kernels.h"

#include <string.h>

size_t kiln__repack_half_group_bytes(int64_t k) { return (size_t)k * 16 * sizeof(uint16_t); }

bool kiln__repack_half_supported(int64_t k, int64_t n) { return k > 0 && k % 32 == 0 && n > 0; }

void kiln__repack_half(const void *src, size_t row_bytes, int64_t k, int64_t n, void *dst) {
    uint32_t *out = dst;
    for (int64_t g = 0; g < (n + 15) / 16; g++, out += k * 8) {
        /* Row by row, so each source row is read sequentially; the writes stride by 64 bytes. */
        for (int r = 0; r < 16; r++) {
            int64_t row = g * 16 + r;
            if (row >= n) {
                for (int64_t p = 0; p < k / 2; p++) out[p * 16 + r] = 0;
                continue;
            }
            const unsigned char *s = (const unsigned char *)src + (size_t)row * row_bytes;
            for (int64_t p = 0; p < k / 2; p++) memcpy(&out[p * 16 + r], s + 4 * p, 4);
        }
    }
}
