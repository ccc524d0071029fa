#version 450
// attention.comp - masked attention with grouped-query heads (kernels_attention.c): query t of head h
// reads KV head h / group; s_j = scale * q.k_j + mask[t][j], -inf hiding key j; softmax over j, then the
// weighted sum of v; a query that sees no key outputs zeros. q [D, Hq, T]; k and v F32 [D, Hkv, C] (KV 0),
// or F16 (1) / Q8_0 (2) cache rows [Hkv * D, C] as kernels_kv.c reads them: head hk is elements
// hk * D.. of cell j's row (head_el = D, k_nb1 = 0), each dequantized to float (Q8_0 d * q), then float
// arithmetic. Offsets and strides of k and v are in bytes; rows contiguous. mask F32 [C, T]. One workgroup per (h, t); the C scores live in shared memory (C <= 4096).
#include "common.glsl"
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint KV = 0u;
layout(std430, set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { uint k[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { uint v[]; };
layout(std430, set = 0, binding = 3) buffer Dst { float d[]; };
layout(std430, set = 0, binding = 4) readonly buffer M { float mask[]; };
layout(push_constant) uniform P {
    uint off_q, off_k, off_v, off_m;
    uint off_d, D, Hq, T;
    uint C, group, q_nb1, q_nb2;
    uint k_nb1, k_nb2, v_nb1, v_nb2;
    uint m_nb1, d_nb1, d_nb2;
    float scale;
    uint head_el;
} p;

// Element e of the K (or V) row at byte `row`.
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
KV_ELEM(k_elem, k)
KV_ELEM(v_elem, v)

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
            for (uint i = 0u; i < p.D; i++) dot += q[qr + i] * k_elem(kr, hk * p.head_el + i);
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
            if (scores[j] != 0.0) acc += (scores[j] / sum) * v_elem(p.off_v + hk * p.v_nb1 + j * p.v_nb2, hk * p.head_el + i);
        d[dr + i] = acc;
    }
}
