#version 450
// mul_mv.comp - matrix times a few columns (decode, and batches of up to MV_COLS columns: several
// sequences decoding together, speculative verification): d[n, m, b2, b3] = alpha * sum_k W[k, n, b2 / r2,
// b3 / r3] * x[k, m, b2, b3] (+ bias[n]), then an activation. A workgroup of 64 takes MV_ROWS weight rows
// and up to MV_COLS columns of one (b2, b3): each invocation walks every 64th block (or word) of its rows
// and reuses each weight load for every column, then the workgroup sums (subgroup arithmetic, or a
// shared-memory tree in the portable variant, docs/vulkan.md). Consecutive invocations read consecutive
// blocks, so a subgroup's weight loads are coalesced.
//
// WTYPE (specialization constant): 0 F32, 1 F16 (x read as float), 2 Q8_0, 3 Q4_0, 4 Q4_K, 5 Q6_K (x read
// as the q8 rows quantize_q8.comp wrote: the CPU reference's arithmetic, qblock.glsl).
#include "common.glsl"
#define MV_ROWS 2u
#define MV_COLS 8u
#define MV_SIZE 64u
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint WTYPE = 0;
layout(std430, set = 0, binding = 0) readonly buffer Wt { uint W[]; };
layout(std430, set = 0, binding = 0) readonly buffer Wt4 { uvec4 W4[]; }; // the same words, 16 bytes at a time
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer XQ { uint xq[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(push_constant) uniform P {
    uint off_w, off_x, off_d, off_bias; // off_w in bytes, the others in elements (off_x in words of q8 rows)
    uint K, N, M, n_base;               // N rows in this dispatch, starting at row n_base of the output
    uint w_nb1, w_nb2, w_nb3, r2;       // weight strides in bytes
    uint x_nb1, x_nb2, x_nb3, r3;       // float x strides in elements (unused for q8 rows)
    uint d_nb1, d_nb2, d_nb3, B2;
    float alpha;
    uint activation, has_bias, pad;
} p;

#include "quant.glsl"
#include "qblock.glsl"

#ifdef KILN_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
shared float part[MV_ROWS * MV_COLS][MV_SIZE]; // per sum, one partial per invocation (or per subgroup)

float acc[MV_ROWS * MV_COLS];

// Sums acc[r * MV_COLS + c] over the workgroup into part[..][0], for the rows and columns in use only
// (nrows and ncols are uniform, so every invocation takes the same branches).
void reduce_all(uint t, uint nrows, uint ncols) {
#ifdef KILN_SUBGROUP
    for (uint r = 0u; r < nrows; r++)
        for (uint c = 0u; c < ncols; c++) {
            float s = subgroupAdd(acc[r * MV_COLS + c]);
            if (subgroupElect()) part[r * MV_COLS + c][gl_SubgroupID] = s;
        }
    barrier();
    if (t < MV_ROWS * MV_COLS) {
        float s = 0.0;
        for (uint i = 0u; i < gl_NumSubgroups; i++) s += part[t][i];
        part[t][0] = s;
    }
    barrier();
#else
    for (uint r = 0u; r < nrows; r++)
        for (uint c = 0u; c < ncols; c++) part[r * MV_COLS + c][t] = acc[r * MV_COLS + c];
    barrier();
    for (uint s = MV_SIZE / 2u; s > 0u; s >>= 1) {
        if (t < s)
            for (uint r = 0u; r < nrows; r++)
                for (uint c = 0u; c < ncols; c++) part[r * MV_COLS + c][t] += part[r * MV_COLS + c][t + s];
        barrier();
    }
#endif
}

void main() {
    uint t = gl_LocalInvocationID.x, groups_m = (p.M + MV_COLS - 1u) / MV_COLS;
    uint g = wg_index(), n0 = (g / groups_m) * MV_ROWS, m0 = (g % groups_m) * MV_COLS;
    uint b2 = gl_WorkGroupID.z % p.B2, b3 = gl_WorkGroupID.z / p.B2;
    uint ncols = min(MV_COLS, p.M - m0), nrows = n0 < p.N ? min(MV_ROWS, p.N - n0) : 0u;
    for (uint v = 0u; v < MV_ROWS * MV_COLS; v++) acc[v] = 0.0;
    uint wbase = p.off_w + (b2 / p.r2) * p.w_nb2 + (b3 / p.r3) * p.w_nb3;
    if (WTYPE == 1u && p.K % 8u == 0u && wbase % 16u == 0u && p.w_nb1 % 16u == 0u) {
        // F16 rows on 16-byte boundaries (every row of a weight whose K is a multiple of 8): eight weights
        // per load, consecutive invocations on consecutive 16 bytes of the row.
        for (uint r = 0u; r < MV_ROWS; r++) {
            if (r >= nrows) break;
            uint wr = (wbase + (n0 + r) * p.w_nb1) >> 4;
            for (uint k = 8u * t; k < p.K; k += 8u * MV_SIZE) {
                uvec4 q = W4[wr + k / 8u];
                vec2 w0 = unpackHalf2x16(q.x), w1 = unpackHalf2x16(q.y);
                vec2 w2 = unpackHalf2x16(q.z), w3 = unpackHalf2x16(q.w);
                for (uint c = 0u; c < MV_COLS; c++) {
                    if (c >= ncols) break;
                    uint xr = p.off_x + (m0 + c) * p.x_nb1 + b2 * p.x_nb2 + b3 * p.x_nb3 + k;
                    float s = w0.x * x[xr] + w0.y * x[xr + 1u] + w1.x * x[xr + 2u] + w1.y * x[xr + 3u];
                    s += w2.x * x[xr + 4u] + w2.y * x[xr + 5u] + w3.x * x[xr + 6u] + w3.y * x[xr + 7u];
                    acc[r * MV_COLS + c] += s;
                }
            }
        }
    } else if (WTYPE <= 1u) {
        // One weight word per step: an F32 element or two F16 ones.
        uint per = WTYPE == 0u ? 1u : 2u;
        for (uint r = 0u; r < nrows; r++) {
            uint wr = wbase + (n0 + r) * p.w_nb1;
            for (uint k = per * t; k < p.K; k += per * MV_SIZE) {
                vec2 w;
                if (WTYPE == 0u) w = vec2(uintBitsToFloat(W[(wr >> 2) + k]), 0.0);
                else if (k + 1u < p.K) w = unpackHalf2x16(w_word_at(wr + 2u * k));
                else w = vec2(w_f16(wr + 2u * k), 0.0);
                for (uint c = 0u; c < ncols; c++) {
                    uint xr = p.off_x + (m0 + c) * p.x_nb1 + b2 * p.x_nb2 + b3 * p.x_nb3 + k;
                    float s = w.x * x[xr];
                    if (per == 2u && k + 1u < p.K) s += w.y * x[xr + 1u];
                    acc[r * MV_COLS + c] += s;
                }
            }
        }
    } else {
        uint nb = p.K / 32u, row_words = p.K / 4u + 2u * nb;
        for (uint blk = t; blk < nb; blk += MV_SIZE) {
            for (uint r = 0u; r < nrows; r++) {
                ivec4 q[8];
                vec3 f;
                load_block(wbase + (n0 + r) * p.w_nb1, blk, q, f);
                for (uint c = 0u; c < ncols; c++) {
                    uint xr = p.off_x + ((b3 * p.B2 + b2) * p.M + m0 + c) * row_words;
                    int i0 = 0, i1 = 0;
                    for (uint j = 0u; j < 4u; j++) i0 += idot4(q[j], bytes_signed(xq[xr + 8u * blk + j]));
                    for (uint j = 4u; j < 8u; j++) i1 += idot4(q[j], bytes_signed(xq[xr + 8u * blk + j]));
                    float dx = uintBitsToFloat(xq[xr + p.K / 4u + blk]);
                    int s = int(xq[xr + p.K / 4u + nb + blk]);
                    acc[r * MV_COLS + c] += block_term(f, i0, i1, dx, s);
                }
            }
        }
    }
    reduce_all(t, nrows, ncols);
    if (t < nrows * MV_COLS && t % MV_COLS < ncols) {
        uint r = t / MV_COLS, c = t % MV_COLS, row = p.n_base + n0 + r;
        float v = p.alpha * part[t][0];
        if (p.has_bias != 0u) v += bias[p.off_bias + row];
        d[p.off_d + row + (m0 + c) * p.d_nb1 + b2 * p.d_nb2 + b3 * p.d_nb3] = act(p.activation, v);
    }
}
