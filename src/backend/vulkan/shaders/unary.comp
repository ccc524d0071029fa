#version 450
// unary.comp - d = f(a) elementwise, any strides: copy (cont), scale (p0 * x + p1), an activation (silu,
// gelu, relu), tanh, or a function of imported graphs (KILN_UNARY_*: sigmoid, erf, sqrt, exp, log, neg,
// reciprocal, exact GELU, not, round). One invocation per output element.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(push_constant) uniform P {
    uint off_a, off_d, op, pad; // op: 0 copy, 1 scale, 2 activation (bits 8..15), 3 tanh, 4 function (bits 8..15)
    uint ne0, ne1, ne2, ne3;
    uint a_nb0, a_nb1, a_nb2, a_nb3;
    uint d_nb0, d_nb1, d_nb2, d_nb3;
    float p0, p1;
} p;

// erf by Abramowitz and Stegun 7.1.26: |error| <= 1.5e-7 (GLSL has no erf). A rational approximation in
// float: the result differs from libm's erff by about that, well inside test_backend_ops' 1e-6 of max |ref|.
float erf_as(float x) {
    float t = 1.0 / (1.0 + 0.3275911 * abs(x));
    float y = 1.0 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t *
                        exp(-x * x);
    return x < 0.0 ? -y : y;
}

// The KILN_UNARY_* function f of graph.h (the order of its enum).
float unary_fn(uint f, float x) {
    if (f == 0u) return 1.0 / (1.0 + exp(-x));                        // sigmoid
    if (f == 1u) return erf_as(x);                                     // erf
    if (f == 2u) return sqrt(x);                                       // sqrt
    if (f == 3u) return exp(x);                                        // exp
    if (f == 4u) return log(x);                                        // log
    if (f == 5u) return -x;                                            // neg
    if (f == 6u) return 1.0 / x;                                       // reciprocal
    if (f == 7u) return 0.5 * x * (1.0 + erf_as(x * 0.70710678118654752)); // GELU, exact form
    if (f == 8u) return x == 0.0 ? 1.0 : 0.0;                          // not
    return roundEven(x);                                               // round, ties to even
}

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
    else if (kind == 4u) v = unary_fn(p.op >> 8, x);
    d[p.off_d + i0 * p.d_nb0 + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3] = v;
}
