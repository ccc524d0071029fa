// common.glsl - helpers every Kiln compute shader shares (included by glslc -I; see docs/vulkan.md).
// Buffers are bound at offsets aligned down to minStorageBufferOffsetAlignment; the remainder arrives in
// the push constants as an element (or, for packed weights, byte) offset.

// The flat index of this workgroup in a 2D grid (x wraps at the dispatch's x count).
uint wg_index() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

// tanh that stays finite for large |x| whatever the driver's formula (tanh(15) is 1 in float).
float safe_tanh(float x) { return tanh(clamp(x, -15.0, 15.0)); }

// The activations of src/backend/cpu/kernels_fused.c (kiln__act_apply): 1 relu, 2 gelu (tanh), 3 silu.
float act(uint kind, float x) {
    if (kind == 1u) return x > 0.0 ? x : 0.0;
    if (kind == 2u) return 0.5 * x * (1.0 + safe_tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    if (kind == 3u) return x * (1.0 / (1.0 + exp(-x)));
    return x;
}
