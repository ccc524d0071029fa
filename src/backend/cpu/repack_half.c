/*
 * repack_half.c - F16 and BF16 weights rewritten once into 16-row groups of element pairs, the layout of
 * the packed half-float tiles (x86/avx512_half.c, x86/avx2_half.c).
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
    const int64_t np = k / 2; /* a multiple of 16 */
    uint32_t *out = dst;
    for (int64_t g = 0; g < (n + 15) / 16; g++, out += np * 16) {
        const unsigned char *rows[16];
        for (int r = 0; r < 16; r++)
            rows[r] = g * 16 + r < n ? (const unsigned char *)src + (size_t)(g * 16 + r) * row_bytes : NULL;
        /* 16 x 16 blocks of pairs, transposed in cache: the 16 source rows and the output are each
         * read or written sequentially, which keeps this memory-bound even for multi-GB weights. */
        for (int64_t p0 = 0; p0 < np; p0 += 16) {
            uint32_t block[16][16];
            for (int r = 0; r < 16; r++) {
                if (rows[r]) memcpy(block[r], rows[r] + 4 * p0, sizeof block[r]);
                else memset(block[r], 0, sizeof block[r]);
            }
            for (int p = 0; p < 16; p++)
                for (int r = 0; r < 16; r++) out[(p0 + p) * 16 + r] = block[r][p];
        }
    }
}
