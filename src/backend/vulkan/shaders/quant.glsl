// quant.glsl - reading F16, Q8_0, Q4_0, Q4_K and Q6_K data out of a buffer of 32-bit words named W
// (declared by the including shader). Offsets are in bytes. Block layouts are those of src/tensor/types.h:
// Q8_0 is a half scale and 32 int8 quants (34 bytes); Q4_0 a half scale and 16 bytes of nibbles, element
// i < 16 in the low nibble of byte i and element i + 16 in its high nibble, each minus 8 (18 bytes).
// The K-quants come in super-blocks of 256 elements, read here per 32-element group g (0..7):
//   Q4_K (144 bytes): half d at 0, half dmin at 2, 12 bytes of 6-bit scales and mins at 4 (q4k_scale_min),
//        128 bytes of nibbles at 16: group g is byte 32 (g / 2) + l, low nibble for even g, high for odd;
//        element = d * sc * q - dmin * m.
//   Q6_K (210 bytes): ql[128] at 0, qh[64] at 128, int8 scales[16] at 192 (one per 16 elements), half d at
//        208. Group g = 4h + k: low 4 bits (ql[64h + 32 (k % 2) + l] >> 4 (k / 2)), high 2 bits
//        (qh[32h + l] >> 2k); element = d * scale * (q - 32).

uint w_byte(uint off) { return (W[off >> 2] >> ((off & 3u) * 8u)) & 0xffu; }
int w_i8(uint off) { return int(w_byte(off) << 24) >> 24; }
uint w_u16(uint off) { return (W[off >> 2] >> ((off & 2u) * 8u)) & 0xffffu; } // off is even
float w_f16(uint off) { return unpackHalf2x16(w_u16(off)).x; }

// The 6-bit scale (x) and min (y) of Q4_K group j, scales at byte s (kiln__kquant_scale_min).
uvec2 q4k_scale_min(uint s, uint j) {
    if (j < 4u) return uvec2(w_byte(s + j) & 63u, w_byte(s + j + 4u) & 63u);
    return uvec2((w_byte(s + j + 4u) & 15u) | ((w_byte(s + j - 4u) >> 6) << 4),
                 (w_byte(s + j + 4u) >> 4) | ((w_byte(s + j) >> 6) << 4));
}

// Quant l (0..31) of group g of the super-block at byte sb: Q4_K 0..15, Q6_K 0..63 (before the - 32).
uint q4k_quant(uint sb, uint g, uint l) { return (w_byte(sb + 16u + 32u * (g / 2u) + l) >> (4u * (g % 2u))) & 15u; }
uint q6k_quant(uint sb, uint g, uint l) {
    uint h = g / 4u, k = g % 4u;
    uint lo = (w_byte(sb + 64u * h + 32u * (k % 2u) + l) >> (4u * (k / 2u))) & 15u;
    uint hi = (w_byte(sb + 128u + 32u * h + l) >> (2u * k)) & 3u;
    return lo | (hi << 4);
}

// Element e of the row starting at byte `row` of a table of type t (0 F32, 1 F16, 2 Q8_0, 3 Q4_0, 4 Q4_K,
// 5 Q6_K). The K-quants form their factors as the CPU's dequantizer does (dequant_kquants.c).
float w_elem(uint t, uint row, uint e) {
    if (t == 0u) return uintBitsToFloat(W[(row >> 2) + e]);
    if (t == 1u) return w_f16(row + 2u * e);
    uint blk = e / 32u, i = e % 32u;
    if (t == 2u) {
        uint b = row + blk * 34u;
        return w_f16(b) * float(w_i8(b + 2u + i));
    }
    if (t == 4u) {
        uint sb = row + (e / 256u) * 144u, g = (e % 256u) / 32u;
        uvec2 sm = q4k_scale_min(sb + 4u, g);
        float dl = w_f16(sb) * float(sm.x), ml = w_f16(sb + 2u) * float(sm.y);
        float v = dl * float(q4k_quant(sb, g, i));
        return v - ml;
    }
    if (t == 5u) {
        uint sb = row + (e / 256u) * 210u, g = (e % 256u) / 32u;
        float dl = w_f16(sb + 208u) * float(w_i8(sb + 192u + (e % 256u) / 16u));
        return dl * float(int(q6k_quant(sb, g, i)) - 32);
    }
    uint b = row + blk * 18u;
    uint q = w_byte(b + 2u + (i & 15u));
    return w_f16(b) * float(int(i < 16u ? (q & 15u) : (q >> 4)) - 8);
}
