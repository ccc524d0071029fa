#version 450
// rope.comp - rotary position embedding of x [D, H, T] at positions pos [T] (kernels_rope.c): pair i of
// n_rot turns by theta = pos * scale / base^(i / n_rot) (divided by factors[i / 2] when given); NORMAL
// pairs (i, i + 1), NEOX pairs (i / 2, i / 2 + n_rot / 2); elements from n_rot on are copied. One
// invocation per pair (both outputs, so it may run in place) and per copied element.
//
// The angle is the CPU's to the bit, on any device: a device's pow may be tens of ulps off (the Vulkan
// spec allows it), and at pos 511 one ulp of theta moves sin and cos by 3e-5. So the frequencies
// 1 / base^(i / n_rot) come from the host, computed by the CPU kernel's own expression (freqs [n_rot / 2],
// binding 4); theta = pos * freq and pos * scale * freq are correctly rounded products in Vulkan, as on
// the CPU; the division by a factor is rounded correctly (div_rn). sin and cos are not the driver's
// either (the spec allows 2^-11 absolute inside [-pi, pi], and less beyond): theta is reduced by pi / 2
// in four exact parts (Cody-Waite: k * P1, P2, P3 are exact for k < 2^16, i.e. theta < 1e5), and the
// quadrant's polynomials give sin and cos to a few ulps.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 2) readonly buffer F { float factors[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(std430, set = 0, binding = 4) readonly buffer Freq { float freqs[]; };
layout(push_constant) uniform P {
    uint off_x, off_pos, off_f, off_d;
    uint D, H, T, n_rot;
    uint x_nb1, x_nb2, d_nb1, d_nb2;
    uint neox, has_factors, off_freq;
    float scale;
} p;

// a / b correctly rounded (b != 0): the quotient's neighbours are tried against the exact residual.
float div_rn(float a, float b) {
    precise float c = a / b;
    if (c == 0.0 || isinf(c) || isnan(c)) return c;
    float lo = uintBitsToFloat(floatBitsToUint(c) - 1u), hi = uintBitsToFloat(floatBitsToUint(c) + 1u);
    precise float rc = abs(fma(-c, b, a)), rl = abs(fma(-lo, b, a)), rh = abs(fma(-hi, b, a));
    return rl < rc ? lo : rh < rc ? hi : c;
}

// (sin theta, cos theta) for |theta| < 1e5.
vec2 sincos_reduced(float theta) {
    precise float k = roundEven(theta * 0.63661975);
    precise float r = ((theta - k * 1.5703125) - k * 4.825592041015625e-4) - k * 1.2665987014770508e-6;
    r = r - k * 9.920936e-10;
    precise float r2 = r * r;
    precise float s = r + r * r2 * (-1.6666654611e-1 + r2 * (8.3321608736e-3 + r2 * -1.9515295891e-4));
    precise float c = 1.0 - 0.5 * r2 + r2 * r2 * (4.166664568298827e-2 + r2 * (-1.388731625493765e-3 + r2 * 2.443315711809948e-5));
    int q = int(k) & 3;
    return q == 0 ? vec2(s, c) : q == 1 ? vec2(c, -s) : q == 2 ? vec2(-s, -c) : vec2(-c, s);
}

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
    float freq = freqs[p.off_freq + pair / 2u];
    precise float theta = p.scale == 1.0 ? float(pos[p.off_pos + t]) * freq
                                         : float(pos[p.off_pos + t]) * p.scale * freq;
    if (p.has_factors != 0u) theta = div_rn(theta, factors[p.off_f + pair / 2u]);
    vec2 sc = sincos_reduced(theta);
    float v0 = x[xr + i0], v1 = x[xr + i1];
    d[dr + i0] = v0 * sc.y - v1 * sc.x;
    d[dr + i1] = v0 * sc.x + v1 * sc.y;
}
