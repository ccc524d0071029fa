#version 450
// attention.comp - masked attention with grouped-query heads (kernels_attention.c): query t of head h
// reads KV head h / group; s_j = scale * q.k_j + mask[t][j], -inf hiding key j; softmax over j, then the
// weighted sum of v; a query that sees no key outputs zeros. q [D, Hq, T], k and v F32 [D, Hkv, C] (rows
// contiguous), mask F32 [C, T]. One workgroup per (h, t); the C scores live in shared memory (C <= 4096).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { float k[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { float v[]; };
layout(std430, set = 0, binding = 3) buffer Dst { float d[]; };
layout(std430, set = 0, binding = 4) readonly buffer M { float mask[]; };
layout(push_constant) uniform P {
    uint off_q, off_k, off_v, off_m;
    uint off_d, D, Hq, T;
    uint C, group, q_nb1, q_nb2;
    uint k_nb1, k_nb2, v_nb1, v_nb2;
    uint m_nb1, d_nb1, d_nb2;
    float scale;
} p;

shared float scores[4096];
shared float part[64];

void main() {
    uint r = wg_index(), t = gl_LocalInvocationID.x;
    if (r >= p.Hq * p.T) return;
    uint h = r % p.Hq, tok = r / p.Hq, hk = h / p.group;
    uint qr = p.off_q + h * p.q_nb1 + tok * p.q_nb2, mr = p.off_m + tok * p.m_nb1;
    uint dr = p.off_d + h * p.d_nb1 + tok * p.d_nb2;
    float ninf = uintBitsToFloat(0xff800000u), m = ninf;
    for (uint j = t; j < p.C; j += 64u) {
        float s = ninf, mk = mask[mr + j];
        if (!(isinf(mk) && mk < 0.0)) {
            uint kr = p.off_k + hk * p.k_nb1 + j * p.k_nb2;
            float dot = 0.0;
            for (uint i = 0u; i < p.D; i++) dot += q[qr + i] * k[kr + i];
            s = dot * p.scale + mk;
        }
        scores[j] = s;
        m = max(m, s);
    }
    part[t] = m;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (t < s) part[t] = max(part[t], part[t + s]);
        barrier();
    }
    m = part[0];
    barrier();
    if (isinf(m) && m < 0.0) {
        for (uint i = t; i < p.D; i += 64u) d[dr + i] = 0.0;
        return;
    }
    float sum = 0.0;
    for (uint j = t; j < p.C; j += 64u) {
        float e = exp(scores[j] - m);
        scores[j] = e;
        sum += e;
    }
    part[t] = sum;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        barrier();
    }
    sum = part[0];
    for (uint i = t; i < p.D; i += 64u) {
        float acc = 0.0;
        for (uint j = 0u; j < p.C; j++)
            if (scores[j] != 0.0) acc += (scores[j] / sum) * v[p.off_v + hk * p.v_nb1 + j * p.v_nb2 + i];
        d[dr + i] = acc;
    }
}
