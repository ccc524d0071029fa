// qblock.glsl - one 32-element block of a quantized weight row, decoded for integer dots with the int8
// activation blocks that quantize_q8.comp writes (the CPU's q8 rows, kernels_mm_ref.c; mul_mv.comp), or
// into floats (mul_mm.comp: element i is f.x * q - f.z for i < 16, f.y * q - f.z after). Needs quant.glsl
// (w_byte, w_f16, q4k_scale_min over the including shader's `uint W[]`) and the WTYPE specialization
// constant (2 Q8_0, 3 Q4_0, 4 Q4_K, 5 Q6_K). Offsets are in bytes and need not be word aligned.
//
// A block is q[0..7], elements 4j..4j+3 in q[j], as integers with the format's offset applied (Q4_0 - 8,
// Q6_K - 32; Q4_K's quants stay 0..15, its min enters through the activation sum), and f, its factors:
//   Q8_0, Q4_0  f = (d, d, 0)              term = d * dx * I
//   Q4_K        f = (d sc, d sc, dmin m)   term = dx * (f.x * I - f.z * S)
//   Q6_K        f = (d sc_j, d sc_j+1, 0)  term = dx * (f.x * I0 + f.y * I1), I0 over elements 0..15
// with I the integer dot of the block with the activation quants, S their sum (kernels_mm_ref.c,
// kernels_mm_kquants_ref.c: the same products in the same order).

// The four bytes at byte offset off (any alignment) as one word, the first byte lowest. The next word is
// read only when off is unaligned, so a word-aligned read never touches a word past the binding.
uint w_word_at(uint off) {
    uint sh = (off & 3u) * 8u, lo = W[off >> 2];
    if (sh != 0u) lo = (lo >> sh) | (W[(off >> 2) + 1u] << (32u - sh));
    return lo;
}

ivec4 nibbles(uint v, uint shift) {
    v >>= shift;
    return ivec4(v & 15u, (v >> 8) & 15u, (v >> 16) & 15u, (v >> 24) & 15u);
}

ivec4 bytes_signed(uint v) {
    return ivec4(int(v << 24) >> 24, int(v << 16) >> 24, int(v << 8) >> 24, int(v) >> 24);
}

// Block blk (of 32 elements) of the weight row that starts at byte row.
void load_block(uint row, uint blk, out ivec4 q[8], out vec3 f) {
    if (WTYPE == 2u) {
        uint b = row + blk * 34u;
        float d = w_f16(b);
        for (uint j = 0u; j < 8u; j++) q[j] = bytes_signed(w_word_at(b + 2u + 4u * j));
        f = vec3(d, d, 0.0);
    } else if (WTYPE == 3u) {
        uint b = row + blk * 18u;
        float d = w_f16(b);
        for (uint j = 0u; j < 4u; j++) {
            uint v = w_word_at(b + 2u + 4u * j);
            q[j] = nibbles(v, 0u) - 8;
            q[j + 4u] = nibbles(v, 4u) - 8;
        }
        f = vec3(d, d, 0.0);
    } else if (WTYPE == 4u) {
        uint sb = row + (blk / 8u) * 144u, g = blk % 8u;
        uvec2 sm = q4k_scale_min(sb + 4u, g);
        float dl = w_f16(sb) * float(sm.x), ml = w_f16(sb + 2u) * float(sm.y);
        for (uint j = 0u; j < 8u; j++) q[j] = nibbles(w_word_at(sb + 16u + 32u * (g / 2u) + 4u * j), 4u * (g % 2u));
        f = vec3(dl, dl, ml);
    } else {
        uint sb = row + (blk / 8u) * 210u, g = blk % 8u, h = g / 4u, k = g % 4u;
        float d6 = w_f16(sb + 208u);
        for (uint j = 0u; j < 8u; j++) {
            uint lo = w_word_at(sb + 64u * h + 32u * (k % 2u) + 4u * j) >> (4u * (k / 2u));
            uint hi = w_word_at(sb + 128u + 32u * h + 4u * j) >> (2u * k);
            uint v = (lo & 0x0f0f0f0fu) | ((hi & 0x03030303u) << 4);
            q[j] = ivec4(v & 63u, (v >> 8) & 63u, (v >> 16) & 63u, v >> 24) - 32;
        }
        f = vec3(d6 * float(w_i8(sb + 192u + 2u * g)), d6 * float(w_i8(sb + 193u + 2u * g)), 0.0);
    }
}

int idot4(ivec4 a, ivec4 b) {
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

// The block's float term from its integer dots over elements 0..15 (i0) and 16..31 (i1), the activation
// block's scale dx and quant sum s.
float block_term(vec3 f, int i0, int i1, float dx, int s) {
    if (WTYPE == 4u) return dx * (f.x * float(i0 + i1) - f.z * float(s));
    if (WTYPE == 5u) return dx * (f.x * float(i0) + f.y * float(i1));
    return f.x * dx * float(i0 + i1);
}
