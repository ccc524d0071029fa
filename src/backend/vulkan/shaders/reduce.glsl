// reduce.glsl - workgroup-wide sum and max of one float per invocation, the result returned to every
// invocation; called from uniform control flow (every invocation of the workgroup), after the shader's
// local_size_x layout (gl_WorkGroupSize.x, a power of two, sizes the shared array).
//
// Each shader that includes this is compiled twice by cmake/vulkan.cmake: NAME.spv, the portable variant,
// a shared-memory tree (log2(size) barriers), and NAME_subgroup.spv with -DKILN_SUBGROUP=1, which reduces
// within each subgroup with GL_KHR_shader_subgroup_arithmetic and then sums the gl_NumSubgroups partials
// through shared memory (two barriers). The backend picks the subgroup module only on a device whose
// subgroup properties list arithmetic operations in the compute stage (docs/vulkan.md); the two variants
// add in different orders, so results differ in rounding only.
#ifdef KILN_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

shared float red[gl_WorkGroupSize.x]; // one partial per subgroup (at most one per invocation)

float wg_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = v;
    barrier();
    float total = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) total += red[i];
    barrier();
    return total;
}

float wg_max(float v) {
    v = subgroupMax(v);
    if (subgroupElect()) red[gl_SubgroupID] = v;
    barrier();
    float m = red[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) m = max(m, red[i]);
    barrier();
    return m;
}
#else
shared float red[gl_WorkGroupSize.x];

float wg_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    red[t] = v;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        barrier();
    }
    float total = red[0];
    barrier();
    return total;
}

float wg_max(float v) {
    uint t = gl_LocalInvocationID.x;
    red[t] = v;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2u; s > 0u; s >>= 1) {
        if (t < s) red[t] = max(red[t], red[t + s]);
        barrier();
    }
    float m = red[0];
    barrier();
    return m;
}
#endif
