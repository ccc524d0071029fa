#version 450
// cast.comp - an F32, F16 or Q8_0 tensor [ne0, ne1, ne2, ne3] (rows contiguous; row strides in bytes) to a
// contiguous F32 one, element by element as the CPU's dequantizer (F16 exact, Q8_0 d * q): the plain form
// of attention over an F16/Q8_0 KV cache reads the cache through it. TYPE: 0 F32, 1 F16, 2 Q8_0 (the
// weight-type numbering of quant.glsl). One invocation per element.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint TYPE = 0u;
layout(std430, set = 0, binding = 0) readonly buffer Wb { uint W[]; };
layout(std430, set = 0, binding = 3) buffer Dst { float d[]; };
#include "quant.glsl"
layout(push_constant) uniform P {
    uint off_x, off_d, ne0, ne1; // off_x in bytes, off_d in elements
    uint ne2, nb1, nb2, nb3;
    uint n;
} p;

void main() {
    uint i = wg_index() * 256u + gl_LocalInvocationID.x;
    if (i >= p.n) return;
    uint e = i % p.ne0, r = i / p.ne0;
    uint row = p.off_x + (r % p.ne1) * p.nb1 + ((r / p.ne1) % p.ne2) * p.nb2 + (r / (p.ne1 * p.ne2)) * p.nb3;
    d[p.off_d + i] = w_elem(TYPE, row, e);
}
