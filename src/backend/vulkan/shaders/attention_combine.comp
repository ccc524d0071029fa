#version 450
// attention_combine.comp - the parts of a split attention (attention.comp with split > 1) merged into its
// output: part s of row r holds (m_s, l_s, acc_s[D]) at ((r * split + s) * (D + 2)) of the scratch; with
// M = max m_s, the output is sum_s acc_s exp(m_s - M) / sum_s l_s exp(m_s - M), and zeros when no part saw
// a key (M = -inf). One workgroup of 64 per row (h, t); d [D, Hq, T] as attention.comp writes it.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer Parts { float parts[]; };
layout(std430, set = 0, binding = 3) buffer Dst { float d[]; };
layout(push_constant) uniform P {
    uint off_parts, off_d, D, Hq;
    uint T, split, d_nb1, d_nb2;
} p;

void main() {
    uint r = wg_index(), t = gl_LocalInvocationID.x;
    if (r >= p.Hq * p.T) return;
    uint h = r % p.Hq, tok = r / p.Hq, dr = p.off_d + h * p.d_nb1 + tok * p.d_nb2;
    uint base = p.off_parts + r * p.split * (p.D + 2u);
    float ninf = uintBitsToFloat(0xff800000u), M = ninf, L = 0.0;
    for (uint s = 0u; s < p.split; s++) M = max(M, parts[base + s * (p.D + 2u)]);
    if (isinf(M) && M < 0.0) {
        for (uint i = t; i < p.D; i += 64u) d[dr + i] = 0.0;
        return;
    }
    for (uint s = 0u; s < p.split; s++) {
        float m = parts[base + s * (p.D + 2u)];
        if (!(isinf(m) && m < 0.0)) L += parts[base + s * (p.D + 2u) + 1u] * exp(m - M);
    }
    for (uint i = t; i < p.D; i += 64u) {
        float acc = 0.0;
        for (uint s = 0u; s < p.split; s++) {
            float m = parts[base + s * (p.D + 2u)];
            if (!(isinf(m) && m < 0.0)) acc += parts[base + s * (p.D + 2u) + 2u + i] * exp(m - M);
        }
        d[dr + i] = acc / L;
    }
}
