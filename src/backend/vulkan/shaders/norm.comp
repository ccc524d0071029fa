#version 450
// norm.comp - row-wise norms, one workgroup per row of x (rows contiguous): rms_norm, rms_norm_mul (times
// w broadcast as mul) and norm (LayerNorm without its affine part). Sums reduce by reduce.glsl
// (shared memory, or subgroup arithmetic in norm_subgroup.spv). The workgroup size is the specialization
// constant 0 (a power of two): 512 on a GPU, where a decode step's one row is the whole dispatch and its
// time the latency of each invocation's share of the row (docs/vulkan.md, Profiling: on an H200, 128
// invocations took 12.7 us a call for 2048 elements, 512 took 6.6); 128 on a CPU device such as lavapipe,
// which runs a workgroup's invocations a SIMD width at a time and only loses by more.
#include "common.glsl"
layout(local_size_x_id = 0) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(push_constant) uniform P {
    uint off_x, off_w, off_d, op; // op: 0 rms_norm, 1 rms_norm_mul, 2 norm
    uint ne0, ne1, ne2, ne3;
    uint x_nb1, x_nb2, x_nb3, pad;
    uint w_ne0, w_ne1, w_ne2, w_ne3;
    uint w_nb0, w_nb1, w_nb2, w_nb3;
    uint d_nb1, d_nb2, d_nb3;
    float eps;
} p;

#include "reduce.glsl"

void main() {
    uint row = wg_index();
    if (row >= p.ne1 * p.ne2 * p.ne3) return;
    uint i1 = row % p.ne1, i2 = (row / p.ne1) % p.ne2, i3 = row / (p.ne1 * p.ne2);
    uint xr = p.off_x + i1 * p.x_nb1 + i2 * p.x_nb2 + i3 * p.x_nb3;
    uint dr = p.off_d + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
    uint t = gl_LocalInvocationID.x;
    float n = float(p.ne0), mean = 0.0, s = 0.0;
    if (p.op == 2u) {
        for (uint i = t; i < p.ne0; i += gl_WorkGroupSize.x) s += x[xr + i];
        mean = wg_sum(s) / n;
        s = 0.0;
    }
    for (uint i = t; i < p.ne0; i += gl_WorkGroupSize.x) {
        float v = x[xr + i] - mean;
        s += v * v;
    }
    float scale = 1.0 / sqrt(wg_sum(s) / n + p.eps);
    uint wr = p.off_w + (i1 % p.w_ne1) * p.w_nb1 + (i2 % p.w_ne2) * p.w_nb2 + (i3 % p.w_ne3) * p.w_nb3;
    for (uint i = t; i < p.ne0; i += gl_WorkGroupSize.x) {
        float v = (x[xr + i] - mean) * scale;
        if (p.op == 1u) v *= w[wr + (i % p.w_ne0) * p.w_nb0];
        d[dr + i] = v;
    }
}
