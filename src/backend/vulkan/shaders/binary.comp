#version 450
// binary.comp - d = f(a, b) elementwise with b broadcast (each b dim divides a's), any strides: add, mul,
// swiglu (silu(a) * b), add_act (act(a + b)), sub and div. One invocation per output element.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(push_constant) uniform P {
    uint off_a, off_b, off_d, op; // op: 0 add, 1 mul, 2 swiglu, 3 add_act (activation in bits 8..15), 4 sub, 5 div
    uint ne0, ne1, ne2, ne3;
    uint a_nb0, a_nb1, a_nb2, a_nb3; // strides in elements
    uint b_ne0, b_ne1, b_ne2, b_ne3;
    uint b_nb0, b_nb1, b_nb2, b_nb3;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
} p;

void main() {
    uint i = wg_index() * 256u + gl_LocalInvocationID.x;
    if (i >= p.ne0 * p.ne1 * p.ne2 * p.ne3) return;
    uint i0 = i % p.ne0, r = i / p.ne0, i1 = r % p.ne1;
    r /= p.ne1;
    uint i2 = r % p.ne2, i3 = r / p.ne2;
    float x = a[p.off_a + i0 * p.a_nb0 + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3];
    float y = b[p.off_b + (i0 % p.b_ne0) * p.b_nb0 + (i1 % p.b_ne1) * p.b_nb1 + (i2 % p.b_ne2) * p.b_nb2 +
                (i3 % p.b_ne3) * p.b_nb3];
    uint kind = p.op & 255u;
    float v;
    if (kind == 0u) v = x + y;
    else if (kind == 1u) v = x * y;
    else if (kind == 2u) v = act(3u, x) * y;
    else if (kind == 4u) v = x - y;
    else if (kind == 5u) v = x / y;
    else v = act(p.op >> 8, x + y);
    d[p.off_d + i0 * p.d_nb0 + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3] = v;
}
