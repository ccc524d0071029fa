/*
 * kernels.h - the CPU backend's kernels. Each op has a scalar reference kernel (kernels_*.c), always
 * compiled; SIMD variants (a later issue) live in per-ISA folders and are tested against these.
 *
 * A kernel computes its share of one node: thread ith of nth takes a contiguous range of rows (see
 * kiln__cpu_split) so results never depend on the thread count. Every source row is read through its
 * byte strides, so kernels accept views.
 */
#ifndef KILN_CPU_KERNELS_H
#define KILN_CPU_KERNELS_H

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/threadpool.h"
#include "graph/graph.h"

typedef struct kiln_cpu_args {
    kiln_tensor *dst; /* the node; dst->src[] are its inputs; dst->data is planned */
    int ith, nth;     /* this thread's index and the thread count */
    float *scratch;   /* this thread's scratch, kiln__cpu_scratch_floats(dst) floats */
    void *shared;     /* kiln__cpu_shared_bytes(dst) bytes shared by all threads, 64-byte aligned */
    kiln_pool *pool;  /* for kiln__pool_barrier() inside a kernel (every thread must reach it) */
    const void *packed; /* matmul/linear: the weight repacked for the active level (repack.c), or NULL */
} kiln_cpu_args;

typedef void (*kiln_cpu_kernel)(const kiln_cpu_args *a);

/* The kernel for an op, or NULL for views (which compute nothing). */
kiln_cpu_kernel kiln__cpu_kernel(kiln_op op);

/* Floats of per-thread scratch a node's kernel needs, and bytes of scratch shared by its threads. */
size_t kiln__cpu_scratch_floats(const kiln_tensor *node);
size_t kiln__cpu_shared_bytes(const kiln_tensor *node);

/* Thread ith's share [*begin, *end) of n items. */
static inline void kiln__cpu_split(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    *begin = n * ith / nth;
    *end = n * (ith + 1) / nth;
}

/* Row r of t (rows counted over dims 1..3) as indexes (i1, i2, i3). */
static inline void kiln__cpu_row_index(const kiln_tensor *t, int64_t r, int64_t *i1, int64_t *i2, int64_t *i3) {
    *i1 = r % t->ne[1];
    *i2 = (r / t->ne[1]) % t->ne[2];
    *i3 = r / (t->ne[1] * t->ne[2]);
}

/* Address of row (i1, i2, i3) of t. */
static inline char *kiln__cpu_row(const kiln_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
    return (char *)t->data + i1 * (int64_t)t->nb[1] + i2 * (int64_t)t->nb[2] + i3 * (int64_t)t->nb[3];
}

/* Reference kernels. */
void kiln__cpu_get_rows(const kiln_cpu_args *a);
void kiln__cpu_rms_norm(const kiln_cpu_args *a);
void kiln__cpu_add(const kiln_cpu_args *a);
void kiln__cpu_sub(const kiln_cpu_args *a);
void kiln__cpu_where(const kiln_cpu_args *a);
void kiln__cpu_reduce_max(const kiln_cpu_args *a);
void kiln__cpu_div(const kiln_cpu_args *a);
void kiln__cpu_mul(const kiln_cpu_args *a);
void kiln__cpu_matmul(const kiln_cpu_args *a);
void kiln__cpu_rope(const kiln_cpu_args *a);
void kiln__cpu_attention(const kiln_cpu_args *a);
void kiln__cpu_silu(const kiln_cpu_args *a);
void kiln__cpu_softmax(const kiln_cpu_args *a);
void kiln__cpu_cont(const kiln_cpu_args *a);
void kiln__cpu_cache_write(const kiln_cpu_args *a);

static inline int64_t kiln__cpu_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The keys an attention query may see: the first and last entries of its additive mask row m[0..n)
 * that are not -inf, as [*lo, *hi]; false, with an empty range (hi < lo), when every key is hidden.
 * Every attention kernel bounds its key loop by this (kernels_attention.c). */
bool kiln__cpu_mask_range(const float *m, int64_t n, int64_t *lo, int64_t *hi);

/* Attention, flash style (kernels_flash_attention.c); kiln__cpu_attention is its reference. */
void kiln__cpu_flash_attention(const kiln_cpu_args *a);
size_t kiln__cpu_flash_attention_scratch_floats(const kiln_tensor *node);

/* The fused linear op through the matmul tiles (kernels_matmul.c); the reference is kiln__cpu_linear. */
void kiln__cpu_linear_fast(const kiln_cpu_args *a);

/* Scratch of the matmul kernel (kernels_matmul.c), for matmul and linear nodes. */
size_t kiln__cpu_matmul_scratch_floats(const kiln_tensor *node);
size_t kiln__cpu_matmul_shared_bytes(const kiln_tensor *node);

/* Shared row helpers. */
float kiln__cpu_dot_f32(const float *x, const float *y, int64_t n);
void kiln__cpu_softmax_row(float *x, int64_t n);

/* ---------------------------------------------------------------------------------------------------
 * Row kernels behind the dispatch table. Every entry has a scalar reference (kernels_mm_ref.c,
 * kernels_vec_ref.c) and SIMD variants per level (x86/avx2_*.c, x86/avx512_*.c, arm/neon_*.c), compiled
 * with target attributes or per-file flags so that one binary runs on any x86-64 or any aarch64.
 *
 * Activations multiplied with quantized weights are first quantized to 8-bit rows ("q8 rows"): for K
 * elements (a multiple of 32), K int8 quants, then K/32 float scales d, then K/32 int32 block sums s
 * (the sum of the block's quants). Block b holds x[i] ~= d[b] * q[i]; q = round-to-nearest-even of
 * x / d with d = max|x| / 127, so every level produces the same quants.
 * ------------------------------------------------------------------------------------------------- */

#define KILN_Q8_BLOCK 32

/* Super-block q8 rows, the activations of Q4_K and Q6_K weights at every level and on the Vulkan backend
 * (kiln_cpu_isa.q8_superblock, set by the reference level and inherited): the same layout, but quantized
 * with one scale per 256 elements (max|x| of the 256 / 127, then round-to-nearest-even of x / d per
 * element, as llama.cpp's q8_K for its K-quant dots), so the 8 scales d of each super-block are equal and
 * a tile may sum a super-block's 8 blocks in integers (x86/avx2_packed_kquants.c); the block sums s stay
 * per 32. K is a multiple of 256. An element's rounding is up to half the super-block's scale instead of
 * its block's. */
#define KILN_Q8_SUPERBLOCK 256

static inline size_t kiln__q8_row_bytes(int64_t k) {
    return ((size_t)k + (size_t)k / KILN_Q8_BLOCK * 8 + 63) & ~(size_t)63;
}
static inline const float *kiln__q8_row_d(const void *row, int64_t k) {
    return (const float *)((const char *)row + k);
}
static inline const int32_t *kiln__q8_row_s(const void *row, int64_t k) {
    return (const int32_t *)((const char *)row + k + k / KILN_Q8_BLOCK * 4);
}

/* A matmul tile: out[c * os + r] = dot(weight row r, activation column c) for r < nr, c < nc. Weight row
 * r starts at w + r * ws bytes; activation column c at x + c * xs bytes: a float row for F32, F16 and
 * BF16 weights, a q8 row for quantized weights. The result for one (r, c) does not depend on nr or on
 * where the tile starts, so any split of rows over threads gives identical outputs. Nor does it depend
 * on nc, with one exception: the packed Q8_0/Q4_0 tiles (x86/avx512_packed.c) sum a lone column
 * (nc == 1, decode) in kiln__cpu_decode_streams() interleaved block segments (4, or 1 on AMD), which keeps
 * that many memory streams in flight, while several columns sum their blocks in order (as the AMX tiles
 * do, bit for bit); the two differ within float rounding of the block sum. */
typedef void (*kiln_mm_fn)(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                           int64_t nc, float *out, size_t os);

typedef struct kiln_cpu_isa {
    kiln_cpu_level level;
    kiln_mm_fn mm[KILN_TYPE_COUNT]; /* NULL: the weight type has no kernel */
    /* Tiles over repacked weights (repack.c): w is the first row group, ws the group stride
     * (kiln__repack_group_bytes); nr is a multiple of 16 except for types whose repacking pads a partial
     * last group (kiln__repack_pads), whose tiles store only the nr outputs asked for. NULL: this level
     * does not use repacked weights. */
    kiln_mm_fn mm_packed[KILN_TYPE_COUNT];
    /* F16/BF16 prefill over repacked weights (repack_pairs.c) in bf16 arithmetic: x holds nc columns of k
     * bf16 values, xs bytes apart (f32_to_bf16 made them); weights are rounded to bf16 as f32_to_bf16
     * rounds, and each pair of products adds to a float sum (AVX512-BF16's vdpbf16ps). Twice the float
     * FMA's products per instruction, for about 2^-8 relative error per product (kiln__mm_bf16_ref is
     * the reference). NULL: the CPU lacks them. The matmul uses them only when bf16_prefill is set. */
    kiln_mm_fn mm_packed_bf16[KILN_TYPE_COUNT];
    bool bf16_prefill; /* F16/BF16 prefill takes mm_packed_bf16 (kiln__cpu_bf16_prefill) */
    void (*f32_to_bf16)(const float *x, uint16_t *y, int64_t n); /* nearest even; subnormals to zero */
    void (*quantize_q8)(const float *x, void *row, int64_t k);
    void (*quantize_q8_sb)(const float *x, void *row, int64_t k); /* super-block q8 rows (above) */
    /* The weight types whose activations are super-block q8 rows (above): Q4_K and Q6_K. A tile of
     * such a type may read one scale per super-block. */
    bool q8_superblock[KILN_TYPE_COUNT];
    void (*f16_to_f32)(const uint16_t *x, float *y, int64_t n);
    void (*bf16_to_f32)(const uint16_t *x, float *y, int64_t n);
    float (*dot_f32)(const float *x, const float *y, int64_t n);
    void (*axpy_f32)(float *y, float a, const float *x, int64_t n); /* y += a x */
    void (*scale_f32)(float *y, float a, int64_t n);                  /* y *= a */
    /* Elementwise rows of contiguous floats (kernels_vec_ref.c); out may be an input array. */
    void (*exp_f32)(const float *x, float *y, int64_t n); /* y = e^x, within 2.5e-7 relative of expf */
    void (*add_f32)(float *out, const float *x, const float *y, int64_t n);
    void (*mul_f32)(float *out, const float *x, const float *y, int64_t n);
    void (*swiglu_f32)(float *out, const float *g, const float *u, int64_t n); /* silu(g) * u */
    void (*silu_f32)(float *out, const float *x, int64_t n); /* x * (1 / (1 + e^-x)) */
    void (*gelu_f32)(float *out, const float *x, int64_t n); /* tanh-approximation GELU */
    void (*gelu_erf_f32)(float *out, const float *x, int64_t n); /* exact GELU: 0.5 x (1 + erf(x / sqrt 2)) */
    float (*sum_sq_f32)(const float *x, int64_t n);                                 /* sum of x^2 */
    void (*scale_mul_f32)(float *out, float s, const float *x, const float *w, int64_t n); /* (s x) w */
    /* Attention (F32, F16 or Q8_0 K/V, with the mask) with kiln__cpu_flash_attention's contract, or false
     * when it does not take the node's shape (the generic kernel then runs), and its per-thread scratch.
     * NULL: the generic kernel. */
    bool (*flash_attention)(const kiln_cpu_args *a);
    size_t (*flash_attention_scratch_floats)(const kiln_tensor *node);
} kiln_cpu_isa;

/* Repacking (repack.c): whether a [k, n] weight of this type can be repacked, bytes per group of 16
 * rows, and the rewrite itself (row_bytes is the source row stride). The copy holds (n + 15) / 16 groups;
 * only the types kiln__repack_pads names (F32, F16, BF16, Q4_K, Q6_K) accept n that is not a multiple of 16
 * (their last group is zero-padded). */
bool kiln__repack_supported(kiln_type type, int64_t k, int64_t n);
bool kiln__repack_pads(kiln_type type); /* whether n need not be a multiple of 16 (zero rows pad) */
size_t kiln__repack_kquants_group_bytes(kiln_type type, int64_t k); /* Q4_K, Q6_K (repack_kquants.c) */
void kiln__repack_kquants(kiln_type type, const void *src, size_t row_bytes, int64_t k, int64_t n, void *dst);
size_t kiln__repack_group_bytes(kiln_type type, int64_t k);
void kiln__repack(kiln_type type, const void *src, size_t row_bytes, int64_t k, int64_t n, void *dst);
/* The F32/F16/BF16 layout (repack_pairs.c): 16-row groups of element pairs. */
bool kiln__repack_pairs_supported(int64_t k, int64_t n);
size_t kiln__repack_pairs_group_bytes(kiln_type type, int64_t k);
void kiln__repack_pairs(kiln_type type, const void *src, size_t row_bytes, int64_t k, int64_t n, void *dst);

/* The reference of the mm_packed_bf16 tiles for an F16 or BF16 weight (NULL for others), on unpacked
 * rows: each weight rounded as f32_to_bf16 rounds, and per element pair the sum gains the second
 * product, then the first, each product exact and each sum rounded (kernels_mm_ref.c). */
kiln_mm_fn kiln__mm_bf16_ref(kiln_type type);
/* f32_to_bf16 of one value: subnormals to signed zero, then kiln_fp32_to_bf16 (VCVTNEPS2BF16's rule). */
uint16_t kiln__bf16_round(float f);
/* Bytes of one bf16 activation column of k values in the matmul's shared scratch (64-byte aligned). */
static inline size_t kiln__bf16_row_bytes(int64_t k) { return ((size_t)k * 2 + 63) & ~(size_t)63; }

/* Whether matmul with this weight type takes q8 activation rows. */
static inline bool kiln__mm_wants_q8(kiln_type t) {
    return t == KILN_TYPE_Q8_0 || t == KILN_TYPE_Q4_0 || t == KILN_TYPE_Q4_K || t == KILN_TYPE_Q6_K;
}

/* The table of the active level (kiln__cpu_level()), and of a given level (NULL when that level is not
 * compiled in or the CPU lacks it). */
const kiln_cpu_isa *kiln__cpu_isa(void);
const kiln_cpu_isa *kiln__cpu_isa_for(kiln_cpu_level level);

/* Level tables; each starts from the one below it and replaces what it accelerates. */
void kiln__cpu_isa_init_ref(kiln_cpu_isa *t);
void kiln__cpu_isa_init_kquants_ref(kiln_cpu_isa *t); /* part of ref: the Q4_K/Q6_K tiles */
void kiln__cpu_isa_init_avx2(kiln_cpu_isa *t);
void kiln__cpu_isa_init_avx2_vec(kiln_cpu_isa *t);
void kiln__cpu_isa_init_avx2_kquants(kiln_cpu_isa *t);
/* The AVX2 tiles over repacked weights (mm_packed; the AVX-512 level replaces every one of them):
 * Q8_0/Q4_0 (x86/avx2_packed.c), Q4_K/Q6_K (x86/avx2_packed_kquants.c), F32/F16/BF16 (x86/avx2_pairs.c). */
void kiln__cpu_isa_init_avx2_packed(kiln_cpu_isa *t);
void kiln__cpu_isa_init_avx2_packed_kquants(kiln_cpu_isa *t);
void kiln__cpu_isa_init_avx2_pairs(kiln_cpu_isa *t);
/* The fused flash-attention kernel with 8 queries in the lanes (x86/avx2_attention.c; the AVX-512 level's
 * 16-lane kernel replaces it). */
void kiln__cpu_isa_init_avx2_attention(kiln_cpu_isa *t);
void kiln__cpu_isa_init_avx512(kiln_cpu_isa *t);
void kiln__cpu_isa_init_avx512_packed(kiln_cpu_isa *t);
void kiln__cpu_isa_init_avx512_half(kiln_cpu_isa *t);
void kiln__cpu_isa_init_avx512_bf16(kiln_cpu_isa *t); /* the mm_packed_bf16 tiles, where the CPU has AVX512-BF16 */
/* The AVX-512 packed tile for Q8_0, Q4_0, F16, BF16, Q4_K or Q6_K whose decode walks `streams` weight
 * streams: 1 (one sequential run, with no software prefetch except for Q8_0), or 0 for the tile's own
 * count (4 for Q8_0/Q4_0, 8 for F16/BF16, 1 for the K-quants) with prefetches; NULL for other types or
 * off x86-64. The
 * table takes the variant kiln__cpu_decode_streams() names; tests check both on any machine. */
kiln_mm_fn kiln__cpu_avx512_packed_variant(kiln_type type, int streams);
kiln_mm_fn kiln__cpu_avx512_half_variant(kiln_type type, int streams); /* its F16/BF16 part (avx512_half.c) */
kiln_mm_fn kiln__cpu_avx512_kquants_variant(kiln_type type, int streams); /* Q4_K/Q6_K (avx512_kquants.c) */
void kiln__cpu_isa_init_avx512_kquants(kiln_cpu_isa *t);
void kiln__cpu_isa_init_avx512_attention(kiln_cpu_isa *t);
void kiln__cpu_isa_init_avx512_vec(kiln_cpu_isa *t);
void kiln__cpu_isa_init_vec_ref(kiln_cpu_isa *t);
void kiln__cpu_isa_init_amx(kiln_cpu_isa *t);
void kiln__cpu_isa_init_neon(kiln_cpu_isa *t); /* arm/neon_*.c; stubs elsewhere */

#endif
