#version 450
// rope.comp - rotary position embedding of x [D, H, T] at positions pos [T] (kernels_rope.c): pair i of
// n_rot turns by theta = pos * scale / base^(i / n_rot) (divided by factors[i / 2] when given); NORMAL
// pairs (i, i + 1), NEOX pairs (i / 2, i / 2 + n_rot / 2); elements from n_rot on are copied. One
// invocation per pair (both outputs, so it may run in place) and per copied element.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 2) readonly buffer F { float factors[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(push_constant) uniform P {
    uint off_x, off_pos, off_f, off_d;
    uint D, H, T, n_rot;
    uint x_nb1, x_nb2, d_nb1, d_nb2;
    uint neox, has_factors;
    float base, scale;
} p;

void main() {
    uint i = wg_index() * 256u + gl_LocalInvocationID.x;
    if (i >= p.D * p.H * p.T) return;
    uint j = i % p.D, h = (i / p.D) % p.H, t = i / (p.D * p.H);
    uint xr = p.off_x + h * p.x_nb1 + t * p.x_nb2, dr = p.off_d + h * p.d_nb1 + t * p.d_nb2;
    if (j >= p.n_rot) {
        d[dr + j] = x[xr + j];
        return;
    }
    uint half_rot = p.n_rot / 2u, i0, i1, pair;
    if (p.neox != 0u) {
        if (j >= half_rot) return;
        i0 = j; i1 = j + half_rot; pair = 2u * j;
    } else {
        if ((j & 1u) != 0u) return;
        i0 = j; i1 = j + 1u; pair = j;
    }
    float freq = 1.0 / pow(p.base, float(pair) / float(p.n_rot));
    float theta = p.scale == 1.0 ? float(pos[p.off_pos + t]) * freq : float(pos[p.off_pos + t]) * p.scale * freq;
    if (p.has_factors != 0u) theta /= factors[p.off_f + pair / 2u];
    float c = cos(theta), s = sin(theta);
    float v0 = x[xr + i0], v1 = x[xr + i1];
    d[dr + i0] = v0 * c - v1 * s;
    d[dr + i1] = v0 * s + v1 * c;
}
