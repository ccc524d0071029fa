#version 450
// cache_write.comp - row r of x [W, T] into row (cell) idx[r] of an F32 cache [W, C]; a negative (or out of
// range) cell skips the row (padding), as the CPU's kiln__cpu_cache_write. Cells are distinct, so no two
// invocations write one element. One invocation per element of x.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Idx { int idx[]; };
layout(std430, set = 0, binding = 3) buffer Cache { float cache[]; };
layout(push_constant) uniform P {
    uint off_x, off_idx, off_d, W;
    uint T, C, x_nb0, x_nb1;
    uint idx_nb0;
} p;

void main() {
    uint i = wg_index() * 256u + gl_LocalInvocationID.x;
    if (i >= p.W * p.T) return;
    uint e = i % p.W, r = i / p.W;
    int cell = idx[p.off_idx + r * p.idx_nb0];
    if (cell < 0 || uint(cell) >= p.C) return;
    cache[p.off_d + uint(cell) * p.W + e] = x[p.off_x + r * p.x_nb1 + e * p.x_nb0];
}
