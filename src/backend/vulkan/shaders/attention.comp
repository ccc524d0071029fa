#version 450
// attention.comp - masked attention with grouped-query heads (kernels_attention.c), as flash attention:
// query t of head h reads KV head h / group; s_j = scale * q.k_j + mask[t][j], -inf hiding key j;
// softmax over j, then the weighted sum of v; a query that sees no key outputs zeros. q [D, Hq, T]; k and v
// F32 [D, Hkv, C] (KV 0), or F16 (1) / Q8_0 (2) cache rows [Hkv * D, C] as kernels_kv.c reads them: head hk
// is elements hk * D.. of cell j's row (head_el = D, k_nb1 = 0), each dequantized to float (Q8_0 d * q),
// then float arithmetic. Offsets and strides of k and v are in bytes; rows contiguous. mask F32 [C, T].
//
// One workgroup of 64 per (h, t) walks the cells in chunks of 64, one score per invocation, with an online
// softmax: the running maximum m and sum l, and the output accumulator (dimension i kept by invocation
// i % 64, D <= 256) rescaled by exp(m_old - m_new) whenever a chunk raises the maximum; the output is
// acc / l. So any number of cells fits (no scores are kept beyond a chunk), at the cost of the CPU's exact
// order of operations: results differ from it in rounding only (test_backend_ops states the tolerance).
//
// Split over the cells (flash-decoding): with few (h, t) rows and many cells, `split` workgroups per row
// each take `per` consecutive cells and write their (m, l, acc[D]) to the scratch (binding 3) instead of
// the output; attention_combine.comp then merges the parts of each row.
#include "common.glsl"
#define CHUNK 64u
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
    uint head_el, split, per;
} p;

#include "kv.glsl"
KV_ELEM(k_elem, k)
KV_ELEM(v_elem, v)

shared float qs[256];       // the query row
shared float probs[CHUNK];  // the chunk's exp(s_j - m)
shared float part[CHUNK];   // reductions

float chunk_max(uint t, float x) {
    part[t] = x;
    barrier();
    for (uint s = CHUNK / 2u; s > 0u; s >>= 1) {
        if (t < s) part[t] = max(part[t], part[t + s]);
        barrier();
    }
    float r = part[0];
    barrier();
    return r;
}

float chunk_sum(uint t, float x) {
    part[t] = x;
    barrier();
    for (uint s = CHUNK / 2u; s > 0u; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        barrier();
    }
    float r = part[0];
    barrier();
    return r;
}

void main() {
    uint w = wg_index(), t = gl_LocalInvocationID.x, r = w % (p.Hq * p.T), part_i = w / (p.Hq * p.T);
    if (part_i >= p.split) return; // uniform: the whole workgroup
    uint c_begin = part_i * p.per, c_end = min(p.C, c_begin + p.per);
    uint h = r % p.Hq, tok = r / p.Hq, hk = h / p.group;
    uint qr = p.off_q + h * p.q_nb1 + tok * p.q_nb2, mr = p.off_m + tok * p.m_nb1;
    uint dr = p.off_d + h * p.d_nb1 + tok * p.d_nb2;
    for (uint i = t; i < p.D; i += CHUNK) qs[i] = q[qr + i];
    barrier();
    float ninf = uintBitsToFloat(0xff800000u), m = ninf, l = 0.0;
    float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
    for (uint c0 = c_begin; c0 < c_end; c0 += CHUNK) {
        uint j = c0 + t;
        float s = ninf;
        if (j < c_end) {
            float mk = mask[mr + j];
            if (!(isinf(mk) && mk < 0.0)) {
                uint kr = p.off_k + hk * p.k_nb1 + j * p.k_nb2;
                float dot = 0.0;
                for (uint i = 0u; i < p.D; i++) dot += qs[i] * k_elem(kr, hk * p.head_el + i);
                s = dot * p.scale + mk;
            }
        }
        float mc = max(m, chunk_max(t, s));
        if (isinf(mc) && mc < 0.0) continue; // nothing visible yet (uniform: every invocation has mc)
        float e = isinf(s) && s < 0.0 ? 0.0 : exp(s - mc);
        probs[t] = e;
        float rescale = isinf(m) && m < 0.0 ? 0.0 : exp(m - mc);
        l = l * rescale + chunk_sum(t, e); // chunk_sum's barriers also publish probs[]
        m = mc;
        uint n = min(CHUNK, c_end - c0);
        for (uint a = 0u; a < 4u; a++) {
            uint i = t + CHUNK * a;
            if (i >= p.D) break;
            float sum = acc[a] * rescale;
            for (uint jj = 0u; jj < n; jj++)
                if (probs[jj] != 0.0) sum += probs[jj] * v_elem(p.off_v + hk * p.v_nb1 + (c0 + jj) * p.v_nb2, hk * p.head_el + i);
            acc[a] = sum;
        }
        barrier(); // probs[] is rewritten by the next chunk
    }
    if (p.split > 1u) { // this part's (m, l, acc[D]) at row r, part part_i of the scratch
        uint o = p.off_d + (r * p.split + part_i) * (p.D + 2u);
        if (t == 0u) {
            d[o] = m;
            d[o + 1u] = l;
        }
        for (uint a = 0u; a < 4u; a++)
            if (t + CHUNK * a < p.D) d[o + 2u + t + CHUNK * a] = acc[a];
        return;
    }
    for (uint a = 0u; a < 4u; a++) {
        uint i = t + CHUNK * a;
        if (i < p.D) d[dr + i] = l > 0.0 ? acc[a] / l : 0.0;
    }
}
