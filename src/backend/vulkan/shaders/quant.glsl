// quant.glsl - reading F16, Q8_0 and Q4_0 data out of a buffer of 32-bit words named W (declared by the
// including shader). Offsets are in bytes. Block layouts are those of src/tensor/types.h: Q8_0 is a half
// scale and 32 int8 quants (34 bytes); Q4_0 a half scale and 16 bytes of nibbles, element i < 16 in the
// low nibble of byte i and element i + 16 in its high nibble, each minus 8 (18 bytes).

uint w_byte(uint off) { return (W[off >> 2] >> ((off & 3u) * 8u)) & 0xffu; }
int w_i8(uint off) { return int(w_byte(off) << 24) >> 24; }
uint w_u16(uint off) { return (W[off >> 2] >> ((off & 2u) * 8u)) & 0xffffu; } // off is even
float w_f16(uint off) { return unpackHalf2x16(w_u16(off)).x; }

// Element e of the row starting at byte `row` of a table of type t (0 F32, 1 F16, 2 Q8_0, 3 Q4_0).
float w_elem(uint t, uint row, uint e) {
    if (t == 0u) return uintBitsToFloat(W[(row >> 2) + e]);
    if (t == 1u) return w_f16(row + 2u * e);
    uint blk = e / 32u, i = e % 32u;
    if (t == 2u) {
        uint b = row + blk * 34u;
        return w_f16(b) * float(w_i8(b + 2u + i));
    }
    uint b = row + blk * 18u;
    uint q = w_byte(b + 2u + (i & 15u));
    return w_f16(b) * float(int(i < 16u ? (q & 15u) : (q >> 4)) - 8);
}
