#version 450
// cache_write.comp - row r of x [W, T] into row (cell) idx[r] of a cache [W, C] of type KV (0 F32, 1 F16,
// 2 Q8_0), converted as the CPU's kiln__cpu_cache_write_kv does: F16 rounded to nearest even
// (kiln_fp32_to_fp16, done here on the bits: the rounding of packHalf2x16 is not specified), Q8_0 one
// 32-element block as kiln__quantize_q8_0 (d = amax / 127 stored as F16, q = roundf(x / d) half away from
// zero). A negative (or out of range) cell skips the row (padding). One invocation per unit: an element
// (F32, F16) or a block (Q8_0). The cache is words; a unit's bytes may share a word with another unit's
// (F16 pairs, Q8_0's 34-byte blocks, any row length), so partial words are written with an atomicAnd
// clearing its bytes and an atomicOr setting them: on disjoint bytes these commute, so no race.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint KV = 0u;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Idx { int idx[]; };
layout(std430, set = 0, binding = 3) buffer Cache { uint cache[]; };
layout(push_constant) uniform P {
    uint off_x, off_idx, off_d, W; // off_d in bytes
    uint T, C, x_nb0, x_nb1;
    uint idx_nb0, row_bytes;
} p;

// kiln_fp32_to_fp16 (src/tensor/fp16.c) on the bits.
uint f32_to_f16(float f) {
    uint u = floatBitsToUint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u | ((a >> 13) & 0x3ffu);
    if (a >= 0x477ff000u) return sign | 0x7c00u;
    if (a < 0x38800000u) {
        if (a < 0x33000000u) return sign;
        uint mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
        uint q = mant >> shift, rem = mant & ((1u << shift) - 1u), half_ = 1u << (shift - 1u);
        if (rem > half_ || (rem == half_ && (q & 1u) != 0u)) q++;
        return sign | q;
    }
    uint r = a - 0x38000000u, q = r >> 13, rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u) != 0u)) q++;
    return sign | q;
}

// Bytes [off, off + n) (n <= 4, within one word) set to the low bytes of v.
void put(uint off, uint n, uint v) {
    uint sh = (off & 3u) * 8u, w = off >> 2;
    uint mask = (n == 4u ? 0xffffffffu : ((1u << (n * 8u)) - 1u)) << sh;
    if (mask == 0xffffffffu) {
        cache[w] = v;
        return;
    }
    atomicAnd(cache[w], ~mask);
    atomicOr(cache[w], (v << sh) & mask);
}

// a / b correctly rounded, for a >= 0, b > 0 (as the CPU's division): the driver may compute a / b as
// a * (1 / b), so the quotient's neighbours are tried against the exact residual fma(-c, b, a).
float div_rn(float a, float b) {
    precise float q = a / b;
    if (q <= 0.0 || isinf(q)) return q;
    float lo = uintBitsToFloat(floatBitsToUint(q) - 1u), hi = uintBitsToFloat(floatBitsToUint(q) + 1u);
    precise float rq = abs(fma(-q, b, a)), rl = abs(fma(-lo, b, a)), rh = abs(fma(-hi, b, a));
    return rl < rq ? lo : rh < rq ? hi : q;
}

// roundf: half away from zero (x - trunc(x) is exact).
float round_away(float v) {
    float t = trunc(v);
    return abs(v - t) >= 0.5 ? t + sign(v) : t;
}

void main() {
    uint per = KV == 2u ? p.W / 32u : p.W;
    uint i = wg_index() * 256u + gl_LocalInvocationID.x;
    if (i >= per * p.T) return;
    uint e = i % per, r = i / per;
    int cell = idx[p.off_idx + r * p.idx_nb0];
    if (cell < 0 || uint(cell) >= p.C) return;
    uint row = p.off_d + uint(cell) * p.row_bytes, xr = p.off_x + r * p.x_nb1;
    if (KV == 0u) {
        put(row + 4u * e, 4u, floatBitsToUint(x[xr + e * p.x_nb0]));
    } else if (KV == 1u) {
        put(row + 2u * e, 2u, f32_to_f16(x[xr + e * p.x_nb0]));
    } else {
        uint x0 = xr + 32u * e * p.x_nb0, b = row + 34u * e;
        float amax = 0.0;
        for (uint j = 0u; j < 32u; j++) amax = abs(x[x0 + j * p.x_nb0]) > amax ? abs(x[x0 + j * p.x_nb0]) : amax;
        float d = div_rn(amax, 127.0), id = d != 0.0 ? div_rn(1.0, d) : 0.0;
        uint bytes[34];
        uint h = f32_to_f16(d);
        bytes[0] = h & 0xffu;
        bytes[1] = h >> 8;
        for (uint j = 0u; j < 32u; j++) {
            float v = round_away(x[x0 + j * p.x_nb0] * id);
            int qv = v > 127.0 ? 127 : v < -127.0 ? -127 : isnan(v) ? 0 : int(v);
            bytes[2u + j] = uint(qv) & 0xffu;
        }
        // Whole words where they lie inside the block, partial words at its two ends.
        uint k = 0u;
        while (k < 34u) {
            uint off = b + k, n = min(4u - (off & 3u), 34u - k), v = 0u;
            for (uint j = 0u; j < n; j++) v |= bytes[k + j] << (8u * j);
            put(off, n, v);
            k += n;
        }
    }
}
