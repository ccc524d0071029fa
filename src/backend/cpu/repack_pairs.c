/*
 * repack_pairs.c - F32, F16 and BF16 weights rewritten once into 16-row groups of element pairs, the
 * layout of the packed float tiles (x86/avx2_pairs.c for all three; x86/avx512_half.c for F16 and BF16).
 *
 * Group g holds rows 16g .. 16g + 15. For each pair of elements p (elements 2p, 2p + 1): row 0's two
 * values, row 1's two values, ..., row 15's two values (64 bytes for F16/BF16, 128 for F32). One load
 * of a quarter of a pair thus holds two elements of four rows ("pair lanes"), and one broadcast
 * activation pair feeds every quarter. For F16/BF16 this is also the VNNI pair layout of AMX-BF16 B
 * tiles (16 rows of 64 bytes = 32 elements of 16 weight rows), so a later AMX kernel can load BF16
 * groups as they are; an F32 pair is already what the AVX2 tiles widen F16 pairs into.
 *
 * A group is K * 16 elements; the packed copy has the size of the original rounded up to whole groups:
 * the rows past n in the last group are zeros, and the tiles never store their outputs. K must be a
 * multiple of 32 (a whole number of AMX steps; the AVX tiles need only pairs).
 */
#include "backend/cpu/kernels.h"

#include "tensor/types.h"

#include <string.h>

static size_t element_bytes(kiln_type type) { return type == KILN_TYPE_F32 ? 4 : 2; }

size_t kiln__repack_pairs_group_bytes(kiln_type type, int64_t k) { return (size_t)k * 16 * element_bytes(type); }

bool kiln__repack_pairs_supported(int64_t k, int64_t n) { return k > 0 && k % 32 == 0 && n > 0; }

void kiln__repack_pairs(kiln_type type, const void *src, size_t row_bytes, int64_t k, int64_t n, void *dst) {
    const int64_t np = k / 2; /* a multiple of 16 */
    const size_t pb = 2 * element_bytes(type); /* bytes of one row's pair */
    unsigned char *out = dst;
    for (int64_t g = 0; g < (n + 15) / 16; g++, out += (size_t)np * 16 * pb) {
        const unsigned char *rows[16];
        for (int r = 0; r < 16; r++)
            rows[r] = g * 16 + r < n ? (const unsigned char *)src + (size_t)(g * 16 + r) * row_bytes : NULL;
        /* 16 x 16 blocks of pairs, transposed in cache: the 16 source rows and the output are each
         * read or written sequentially, which keeps this memory-bound even for multi-GB weights. */
        for (int64_t p0 = 0; p0 < np; p0 += 16) {
            unsigned char block[16][16 * 8];
            for (int r = 0; r < 16; r++) {
                if (rows[r]) memcpy(block[r], rows[r] + (size_t)p0 * pb, 16 * pb);
                else memset(block[r], 0, 16 * pb);
            }
            for (int p = 0; p < 16; p++)
                for (int r = 0; r < 16; r++) memcpy(out + ((size_t)(p0 + p) * 16 + (size_t)r) * pb, block[r] + p * pb, pb);
        }
    }
}
