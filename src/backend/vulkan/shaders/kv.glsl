// kv.glsl - reading one element of a K or V row for attention.comp and attention_tile.comp. Needs the KV
// specialization constant: 0 F32 (word (row >> 2) + e), 1 F16, 2 Q8_0 cache rows (34-byte blocks: a half
// scale, then 32 int8 quants), dequantized to float as kernels_kv.c does (Q8_0: d * q). `row` is a byte
// offset; F16/Q8_0 rows need not be word aligned.
#define KV_ELEM(NAME, B)                                                                                  \
    float NAME(uint row, uint e) {                                                                        \
        if (KV == 0u) return uintBitsToFloat(B[(row >> 2) + e]);                                         \
        if (KV == 1u) {                                                                                   \
            uint o = row + 2u * e;                                                                        \
            return unpackHalf2x16((B[o >> 2] >> ((o & 2u) * 8u)) & 0xffffu).x;                           \
        }                                                                                                 \
        uint b = row + (e / 32u) * 34u, o = b + 2u + e % 32u;                                             \
        float dq = unpackHalf2x16((B[b >> 2] >> ((b & 2u) * 8u)) & 0xffffu).x;                            \
        return dq * float(int(((B[o >> 2] >> ((o & 3u) * 8u)) & 0xffu) << 24) >> 24);                   \
    }
