#version 450
// get_rows.comp - d[:, t] = row ids[t] of the table, converted to F32 (TYPE: 0 F32, 1 F16, 2 Q8_0,
// 3 Q4_0, a specialization constant); an id outside [0, R) gives zeros, as on the CPU. One workgroup per
// token.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint TYPE = 0;
layout(std430, set = 0, binding = 0) readonly buffer Wt { uint W[]; };
layout(std430, set = 0, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(push_constant) uniform P {
    uint off_w, w_nb1, off_ids, ids_nb0; // table offset and row stride in bytes
    uint off_d, d_nb1, E, T;
    uint R;
} p;

#include "quant.glsl"

void main() {
    uint t = wg_index();
    if (t >= p.T) return;
    int id = ids[p.off_ids + t * p.ids_nb0];
    uint dr = p.off_d + t * p.d_nb1;
    for (uint e = gl_LocalInvocationID.x; e < p.E; e += 64u)
        d[dr + e] = id < 0 || uint(id) >= p.R ? 0.0 : w_elem(TYPE, p.off_w + uint(id) * p.w_nb1, e);
}
