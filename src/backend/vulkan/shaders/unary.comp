#version 450
// unary.comp - d = f(a) elementwise, any strides: copy (cont), scale (p0 * x + p1), an activation (silu,
// gelu, relu) or tanh. One invocation per output element.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(push_constant) uniform P {
    uint off_a, off_d, op, pad; // op: 0 copy, 1 scale, 2 activation (bits 8..15), 3 tanh
    uint ne0, ne1, ne2, ne3;
    uint a_nb0, a_nb1, a_nb2, a_nb3;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
    float p0, p1;
} p;

void main() {
    uint i = wg_index() * 256u + gl_LocalInvocationID.x;
    if (i >= p.ne0 * p.ne1 * p.ne2 * p.ne3) return;
    uint i0 = i % p.ne0, r = i / p.ne0, i1 = r % p.ne1;
    r /= p.ne1;
    uint i2 = r % p.ne2, i3 = r / p.ne2;
    float x = a[p.off_a + i0 * p.a_nb0 + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3];
    uint kind = p.op & 255u;
    float v = x;
    if (kind == 1u) v = p.p0 * x + p.p1;
    else if (kind == 2u) v = act(p.op >> 8, x);
    else if (kind == 3u) v = tanh(x);
    d[p.off_d + i0 * p.d_nb0 + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3] = v;
}
