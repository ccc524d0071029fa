#version 450
// attention_tile.comp - the same masked attention as attention.comp (same inputs, push constants and
// result), tiled for prefill: a workgroup of 128 takes BR = 16 consecutive queries of one head and walks
// the cells BC = 32 at a time, so each key and value it stages in shared memory serves 16 queries rather
// than one, and the products run out of shared memory four floats a load. A key no query sees may be read
// (its score is replaced by -inf, not added to), its value never: an unwritten cache cell may hold NaN,
// and 0 * NaN would poison the sum.
//
// Per tile of cells: the mask tile first (a tile every query of the workgroup is masked from, as the upper
// half of a causal prefill is, is skipped whole); the keys, dequantized to float; the scores s = scale *
// q.k + mask, each invocation 4 of them (query r = t / 8, cells t % 8 + 8 j); the online softmax of each
// query (its running maximum m and sum l, the factor exp(m_old - m_new) for what it has accumulated) by
// invocation r while the others stage the values; then each invocation adds the weighted values into its
// share of the query's output (dimensions 4 (t % 8 + 8 i) .. + 3). The output is acc / l, zeros for a
// query that sees no cell. Sums run in another order than the CPU's, so results differ from it in
// rounding only (test_backend_ops states the tolerance).
//
// Head sizes up to DMAX = 128 that are a multiple of 4 (the backend uses attention.comp for others);
// about 28 KB of shared memory (the backend checks the device's maxComputeSharedMemorySize).
#include "common.glsl"
#define BR 16u
#define BC 32u
#define DMAX 128u
#define DS4 (DMAX / 4u + 1u) // the row stride of the staged rows in vec4s: padded against bank conflicts
#define PS (BC + 1u)         // and of the score tile in floats
layout(local_size_x = 128) in;
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

shared vec4 qs[BR * DS4];  // the queries
shared vec4 kvs[BC * DS4]; // the tile's keys, then its values
shared float ps[BR * PS];  // the tile's mask, then scores, then exp(s - m)
shared float rescale[BR];  // each query's exp(m_old - m_new) for this tile
shared float sums[BR];     // and at the end its l
// The tile's index (from 1) when some query of the workgroup sees a cell of it: set with atomicMax by the
// invocations that find one, in one of two slots by the tile's parity, so that an invocation that skips a
// tile and starts the next one never writes the slot the slower ones are still reading.
shared uint seen[2];
shared uint cell_seen[BC]; // and per cell (one writer each): values of cells no query sees are never read

void main() {
    uint t = gl_LocalInvocationID.x, r = t / 8u, cg = t % 8u, D4 = p.D / 4u;
    uint w = wg_index(), h = w % p.Hq, t0 = (w / p.Hq) * BR, hk = h / p.group;
    float ninf = uintBitsToFloat(0xff800000u);
    if (t < 2u) seen[t] = 0u; // the tiles count from 1 (published by the first tile's barrier)
    for (uint e = t; e < BR * D4; e += 128u) {
        uint i = e / D4, c4 = e % D4, tok = t0 + i, o = p.off_q + h * p.q_nb1 + tok * p.q_nb2 + 4u * c4;
        qs[i * DS4 + c4] = tok < p.T ? vec4(q[o], q[o + 1u], q[o + 2u], q[o + 3u]) : vec4(0.0);
    }
    float m = ninf, l = 0.0; // of query t, kept by invocations t < BR
    vec4 acc[DMAX / 32u];
    for (uint i = 0u; i < DMAX / 32u; i++) acc[i] = vec4(0.0);
    uint kbase = p.off_k + hk * p.k_nb1, vbase = p.off_v + hk * p.v_nb1, el0 = hk * p.head_el;
    for (uint c0 = 0u, tile = 1u; c0 < p.C; c0 += BC, tile++) {
        if (t < BC) { // the mask tile, a column (cell) per invocation, -inf past the queries and cells
            bool any = false;
            for (uint i = 0u; i < BR; i++) {
                uint tok = t0 + i;
                float mk = tok < p.T && c0 + t < p.C ? mask[p.off_m + tok * p.m_nb1 + c0 + t] : ninf;
                ps[i * PS + t] = mk;
                any = any || !(isinf(mk) && mk < 0.0);
            }
            cell_seen[t] = any ? tile : 0u;
            if (any) atomicMax(seen[tile & 1u], tile);
        }
        for (uint e = t; e < BC * D4; e += 128u) { // the keys
            uint j = e / D4, c4 = e % D4, row = kbase + (c0 + j) * p.k_nb2, i0 = el0 + 4u * c4;
            kvs[j * DS4 + c4] = c0 + j < p.C ? vec4(k_elem(row, i0), k_elem(row, i0 + 1u), k_elem(row, i0 + 2u),
                                                    k_elem(row, i0 + 3u))
                                             : vec4(0.0);
        }
        barrier();
        if (seen[tile & 1u] != tile) continue; // uniform: every invocation reads the same value
        float s[4];
        for (uint j = 0u; j < 4u; j++) s[j] = 0.0;
        for (uint c4 = 0u; c4 < D4; c4++) {
            vec4 qv = qs[r * DS4 + c4];
            for (uint j = 0u; j < 4u; j++) s[j] += dot(qv, kvs[(cg + 8u * j) * DS4 + c4]);
        }
        for (uint j = 0u; j < 4u; j++) {
            uint o = r * PS + cg + 8u * j;
            float mk = ps[o];
            ps[o] = isinf(mk) && mk < 0.0 ? ninf : s[j] * p.scale + mk;
        }
        barrier();
        if (t < BR) { // query t's online softmax over the tile
            float mx = ninf;
            for (uint j = 0u; j < BC; j++) mx = max(mx, ps[t * PS + j]);
            float mn = max(m, mx), sum = 0.0;
            bool none = isinf(mn) && mn < 0.0; // nothing seen yet: the tile's exps are all zero
            for (uint j = 0u; j < BC; j++) {
                float sj = ps[t * PS + j], e = none || (isinf(sj) && sj < 0.0) ? 0.0 : exp(sj - mn);
                ps[t * PS + j] = e;
                sum += e;
            }
            float f = isinf(m) && m < 0.0 ? 0.0 : exp(m - mn);
            l = l * f + sum;
            m = mn;
            rescale[t] = f;
        }
        for (uint e = t; e < BC * D4; e += 128u) { // the values, beside the softmax
            uint j = e / D4, c4 = e % D4, row = vbase + (c0 + j) * p.v_nb2, i0 = el0 + 4u * c4;
            kvs[j * DS4 + c4] = cell_seen[j] == tile ? vec4(v_elem(row, i0), v_elem(row, i0 + 1u), v_elem(row, i0 + 2u),
                                                    v_elem(row, i0 + 3u))
                                             : vec4(0.0);
        }
        barrier();
        float f = rescale[r];
        for (uint i = 0u; i < DMAX / 32u; i++) {
            uint c4 = cg + 8u * i;
            if (c4 >= D4) break;
            vec4 a = acc[i] * f;
            for (uint j = 0u; j < BC; j++) a += ps[r * PS + j] * kvs[j * DS4 + c4];
            acc[i] = a;
        }
        barrier(); // ps and kvs are rewritten by the next tile
    }
    if (t < BR) sums[t] = l;
    barrier();
    uint tok = t0 + r;
    if (tok >= p.T) return;
    float lr = sums[r];
    uint o = p.off_d + h * p.d_nb1 + tok * p.d_nb2;
    for (uint i = 0u; i < DMAX / 32u; i++) {
        uint c4 = cg + 8u * i;
        if (c4 >= D4) break;
        vec4 out4 = lr > 0.0 ? acc[i] / lr : vec4(0.0);
        d[o + 4u * c4] = out4.x;
        d[o + 4u * c4 + 1u] = out4.y;
        d[o + 4u * c4 + 2u] = out4.z;
        d[o + 4u * c4 + 3u] = out4.w;
    }
}
