#version 450
// softmax.comp - softmax(scale * x) along dim 0, one workgroup per row (rows contiguous); a row that is
// all -inf gives zeros, as the CPU's does. The
// row's max and sum reduce by reduce.glsl (shared memory, or subgroup arithmetic in softmax_subgroup.spv).
#include "common.glsl"
layout(local_size_x = 128) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(push_constant) uniform P {
    uint off_x, off_d, pad0, pad1;
    uint ne0, ne1, ne2, ne3;
    uint x_nb1, x_nb2, x_nb3, pad2;
    uint d_nb1, d_nb2, d_nb3;
    float scale;
} p;

#include "reduce.glsl"

void main() {
    uint row = wg_index();
    if (row >= p.ne1 * p.ne2 * p.ne3) return;
    uint i1 = row % p.ne1, i2 = (row / p.ne1) % p.ne2, i3 = row / (p.ne1 * p.ne2);
    uint xr = p.off_x + i1 * p.x_nb1 + i2 * p.x_nb2 + i3 * p.x_nb3;
    uint dr = p.off_d + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
    uint t = gl_LocalInvocationID.x;
    float m = uintBitsToFloat(0xff800000u); // -inf
    for (uint i = t; i < p.ne0; i += 128u) m = max(m, p.scale * x[xr + i]);
    m = wg_max(m);
    if (isinf(m) && m < 0.0) {
        for (uint i = t; i < p.ne0; i += 128u) d[dr + i] = 0.0;
        return;
    }
    float sum = 0.0;
    for (uint i = t; i < p.ne0; i += 128u) sum += exp(p.scale * x[xr + i] - m);
    sum = wg_sum(sum);
    for (uint i = t; i < p.ne0; i += 128u) d[dr + i] = exp(p.scale * x[xr + i] - m) / sum;
}
