/*
 * fp16.c - IEEE binary16 and bfloat16 conversions, bit-exact and portable (no F16C needed). Rounding is
 * to nearest even; NaN stays NaN (its payload's top bits are kept, and it is forced quiet); values too
 * large round to infinity; tiny values become subnormals or zero with correct rounding.
 */
#include "kiln.h"

#include <string.h>

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float kiln_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf or NaN */
    if (exp == 0) {
        /* Zero or subnormal: mant * 2^-24, exact in float. */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t kiln_fp32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu)); /* NaN, quiet */
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: infinity */
    if (abs < 0x38800000u) {
        /* Result is subnormal or zero: value / 2^-24 rounded to nearest even. */
        if (abs < 0x33000000u) return sign; /* below half the smallest subnormal */
        uint32_t exp = abs >> 23;
        uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp; /* 14..24 */
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    /* Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even. */
    uint32_t r = abs - 0x38000000u; /* exponent rebias 127 -> 15 */
    uint32_t q = r >> 13;
    uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

float kiln_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t kiln_fp32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN, quiet */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
