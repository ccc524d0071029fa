/*
 * vk_ops.c - what the Vulkan backend runs, and recording each node as a dispatch (shaders/NAME.comp).
 *
 * supports_op accepts only the exact types and layouts below; everything else falls back to the CPU
 * through the scheduler. The table (docs/vulkan.md keeps it in prose):
 *   get_rows                       table F32, F16, Q8_0, Q4_0, Q4_K or Q6_K [E, R], ids I32 [T]
 *   matmul, linear                 weight F32, F16, Q8_0, Q4_0, Q4_K or Q6_K (K a multiple of the block:
 *                                  32, or 256 for the K-quants), rows contiguous; x F32
 *                                  with contiguous rows; linear without the transposed-weight flag. A
 *                                  weight over maxStorageBufferRange (2D) is bound in row ranges
 *   rms_norm, rms_norm_mul, norm   F32, rows contiguous
 *   softmax                        F32, rows contiguous
 *   rope                           F32 [D, H, T] rows contiguous, NORMAL or NEOX, optional factors
 *   attention                      q F32, k, v F32 [D, Hkv, C] or F16/Q8_0 cache rows [Hkv * D, C]
 *                                  (rows contiguous, GQA), mask F32 [C, T], any C (flash attention:
 *                                  an online softmax over chunks of cells), head size D <= 256
 *   cast                           F32, F16 or Q8_0 (rows contiguous) to a contiguous F32 tensor
 *   add, mul, add_act, swiglu      F32, any strides, the second broadcast
 *   scale, silu, gelu, relu, tanh, cont   F32, any strides
 *   cache_write                    x F32 [W, T] (any strides) into an F32, F16 or Q8_0 cache [W, C],
 *                                  idx I32
 * Every tensor a kernel reads or writes (but a row-ranged weight) must span at most
 * maxStorageBufferRange bytes, and every count and stride fit in 32 bits. A context's KV cache lives on
 * the device when kiln__vk_holds_kv says so (F32, F16 or Q8_0, each layer within one binding); the scheduler then runs every node that
 * touches it here, so these kernels must cover all of them: cache_write, attention, and for the unfused
 * form matmul over a permuted cache view and cont of one (and cast of an F16/Q8_0 cache).
 */
#include "backend/vulkan/vk.h"

#include "core/core.h"
#include "tensor/types.h"

#include <string.h>

/* ---- Support ---- */

static bool is_f32(const kiln_tensor *t) {
    return t && t->type == KILN_TYPE_F32;
}

/* Element counts, strides in elements and spans that the shaders' 32-bit arithmetic can carry. */
static bool fits(const kiln_vk_ctx *c, const kiln_tensor *t, bool check_range) {
    size_t span = kiln__tensor_span(t);
    if (kiln__tensor_nelements(t) >= ((int64_t)1 << 31) || span == SIZE_MAX) return false;
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        if (t->nb[d] / 4 >= ((size_t)1 << 31)) return false;
    return !check_range || span + c->dev->min_offset <= c->dev->max_range;
}

/* The weight types in the order of the shaders' WTYPE/TYPE specialization constant; -1 for the others. */
static int type_index(kiln_type t) {
    static const kiln_type order[KILN_VK_WEIGHT_TYPES] = {KILN_TYPE_F32,  KILN_TYPE_F16,  KILN_TYPE_Q8_0,
                                                          KILN_TYPE_Q4_0, KILN_TYPE_Q4_K, KILN_TYPE_Q6_K};
    for (int i = 0; i < KILN_VK_WEIGHT_TYPES; i++)
        if (order[i] == t) return i;
    return -1;
}

/* The KV cache types in the order of attention's and cache_write's KV specialization constant; -1 else. */
static int kv_index(kiln_type t) {
    return t == KILN_TYPE_F32 ? 0 : t == KILN_TYPE_F16 ? 1 : t == KILN_TYPE_Q8_0 ? 2 : -1;
}

static bool weight_type(kiln_type t) {
    return type_index(t) >= 0;
}

static bool rows_contiguous(const kiln_tensor *t) {
    return t->nb[0] == kiln__type_traits(t->type)->block_bytes;
}

static bool broadcasts(const kiln_tensor *a, const kiln_tensor *b) {
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        if (b->ne[d] <= 0 || a->ne[d] % b->ne[d] != 0) return false;
    return true;
}

static bool matmul_ok(const kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *w = n->src[0], *x = n->src[1], *bias = n->src[2];
    size_t row;
    if (!weight_type(w->type) || !rows_contiguous(w) || !is_f32(x) || x->nb[0] != 4 || !fits(c, x, true) ||
        !fits(c, n, true) || !fits(c, w, false))
        return false;
    if (x->ne[0] % kiln__type_traits(w->type)->block_elems != 0) return false;
    if (n->op == KILN_OP_LINEAR &&
        ((n->ip[1] & KILN_LINEAR_TRANS0) || (bias && (!is_f32(bias) || bias->nb[0] != 4))))
        return false;
    if (n->op == KILN_OP_LINEAR && (n->ip[0] < KILN_ACT_NONE || n->ip[0] > KILN_ACT_SILU)) return false;
    if (w->ne[2] <= 0 || w->ne[3] <= 0 || x->ne[2] % w->ne[2] || x->ne[3] % w->ne[3]) return false;
    if (x->ne[2] * x->ne[3] > 65535) return false;
    if (type_index(w->type) >= 2 && kiln__vk_scratch_bytes(c, n) + c->dev->min_offset > c->dev->max_range)
        return false; /* the q8 rows of x must fit one binding */
    row = kiln__tensor_nbytes(w) / (size_t)KILN__MAX(kiln__tensor_nrows(w), 1);
    if (kiln__tensor_span(w) + c->dev->min_offset <= c->dev->max_range) return true;
    /* Bound in row ranges: a plain 2D weight whose rows fit. */
    return w->ne[2] == 1 && w->ne[3] == 1 && row + c->dev->min_offset <= c->dev->max_range;
}

bool kiln__vk_supports(const kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *a = n->src[0], *b = n->src[1];
    if (kiln__op_is_view(n->op) && n->op != KILN_OP_CACHE_WRITE) return true;
    if (n->op == c->opt.refuse || !(is_f32(n) || n->op == KILN_OP_CACHE_WRITE) || !fits(c, n, true)) return false;
    switch (n->op) {
    case KILN_OP_ADD:
    case KILN_OP_MUL:
    case KILN_OP_SUB:
    case KILN_OP_DIV:
    case KILN_OP_SWIGLU:
    case KILN_OP_ADD_ACT:
        if (n->op == KILN_OP_ADD_ACT && (n->ip[0] < KILN_ACT_NONE || n->ip[0] > KILN_ACT_SILU)) return false;
        return is_f32(a) && is_f32(b) && fits(c, a, true) && fits(c, b, true) && broadcasts(a, b) &&
               !memcmp(a->ne, n->ne, sizeof n->ne);
    case KILN_OP_SCALE:
    case KILN_OP_SILU:
    case KILN_OP_GELU:
    case KILN_OP_RELU:
    case KILN_OP_TANH:
    case KILN_OP_CONT:
    case KILN_OP_UNARY:
        if (n->op == KILN_OP_UNARY && (n->ip[0] < 0 || n->ip[0] > KILN_UNARY_ROUND)) return false;
        return is_f32(a) && fits(c, a, true) && kiln__tensor_nelements(a) == kiln__tensor_nelements(n);
    case KILN_OP_RMS_NORM:
    case KILN_OP_NORM:
    case KILN_OP_SOFTMAX: return is_f32(a) && a->nb[0] == 4 && fits(c, a, true);
    case KILN_OP_RMS_NORM_MUL:
        return is_f32(a) && a->nb[0] == 4 && fits(c, a, true) && is_f32(b) && fits(c, b, true) &&
               broadcasts(a, b);
    case KILN_OP_MATMUL:
    case KILN_OP_LINEAR: return matmul_ok(c, n);
    case KILN_OP_GET_ROWS:
        return weight_type(a->type) && rows_contiguous(a) && a->ne[2] == 1 && a->ne[3] == 1 &&
               fits(c, a, true) && b->type == KILN_TYPE_I32 && b->ne[1] == 1 && b->ne[2] == 1 &&
               b->ne[3] == 1 && fits(c, b, true);
    case KILN_OP_CACHE_WRITE: {
        const kiln_tensor *cache = n->src[1], *idx = n->src[2];
        return is_f32(a) && kv_index(cache->type) >= 0 && n->type == cache->type &&
               kiln__tensor_is_contiguous(cache) && a->ne[0] == cache->ne[0] &&
               a->ne[0] % kiln__type_traits(cache->type)->block_elems == 0 && a->ne[2] == 1 && a->ne[3] == 1 && fits(c, a, true) && idx->type == KILN_TYPE_I32 &&
               idx->nb[0] == 4 && fits(c, idx, true);
    }
    case KILN_OP_ATTENTION: {
        const kiln_tensor *k = n->src[1], *v = n->src[2], *m = n->src[3];
        if (k->type != KILN_TYPE_F32) /* F16/Q8_0 cache rows [Hkv * D, C] (ops.c's infer_attention_rows) */
            return is_f32(a) && kv_index(k->type) > 0 && v->type == k->type && a->nb[0] == 4 &&
                   rows_contiguous(k) && rows_contiguous(v) && is_f32(m) && m->nb[0] == 4 && a->ne[3] == 1 &&
                   k->ne[2] == 1 && k->ne[3] == 1 && a->ne[0] > 0 && a->ne[0] <= 256 &&
                   k->ne[0] % a->ne[0] == 0 && k->ne[0] / a->ne[0] > 0 &&
                   a->ne[1] % (k->ne[0] / a->ne[0]) == 0 && !memcmp(k->ne, v->ne, sizeof k->ne) &&
                   fits(c, a, true) && fits(c, k, true) && fits(c, v, true) && fits(c, m, true);
        return is_f32(a) && is_f32(k) && is_f32(v) && is_f32(m) && a->nb[0] == 4 && k->nb[0] == 4 &&
               v->nb[0] == 4 && m->nb[0] == 4 && a->ne[3] == 1 && k->ne[3] == 1 && v->ne[3] == 1 &&
               a->ne[0] <= 256 && k->ne[1] > 0 && a->ne[1] % k->ne[1] == 0 && fits(c, a, true) &&
               fits(c, k, true) && fits(c, v, true) && fits(c, m, true);
    }
    case KILN_OP_CAST: /* F32, F16 or Q8_0 (a KV cache, for the plain form of attention) to F32 */
        return kv_index(a->type) >= 0 && rows_contiguous(a) && fits(c, a, true) &&
               a->ne[0] % kiln__type_traits(a->type)->block_elems == 0 && kiln__tensor_is_contiguous(n) &&
               !memcmp(a->ne, n->ne, sizeof n->ne);
    case KILN_OP_ROPE:
        return is_f32(a) && a->nb[0] == 4 && a->ne[3] == 1 && fits(c, a, true) && b->type == KILN_TYPE_I32 &&
               b->nb[0] == 4 && fits(c, b, true) && n->ip[0] > 0 && n->ip[0] % 2 == 0 &&
               n->ip[0] <= a->ne[0] && (n->ip[1] == KILN_ROPE_NORMAL || n->ip[1] == KILN_ROPE_NEOX) &&
               (!n->src[2] || (is_f32(n->src[2]) && n->src[2]->nb[0] == 4));
    default: return false;
    }
}

/* ---- Recording ---- */

static uint32_t el(size_t bytes) {
    return (uint32_t)(bytes / 4);
} /* an F32 stride in elements */

/* Bind ts[0..4] (NULL: unused) in binding order: sources 0-2, the destination, a fourth source. */
static kiln_status bind_all(kiln_vk_ctx *c, const kiln_tensor *const ts[KILN_VK_BINDINGS],
                            kiln_vk_bind b[KILN_VK_BINDINGS]) {
    kiln_status s;
    memset(b, 0, KILN_VK_BINDINGS * sizeof *b);
    for (int i = 0; i < KILN_VK_BINDINGS; i++)
        if (ts[i] && (s = kiln__vk_bind(c, ts[i], &b[i]))) return s;
    return KILN_OK;
}

static kiln_status record_binary(kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *a = n->src[0], *y = n->src[1], *ts[KILN_VK_BINDINGS] = {a, y, NULL, n};
    kiln_vk_bind b[KILN_VK_BINDINGS];
    kiln_status s;
    uint32_t op = n->op == KILN_OP_ADD      ? 0
                  : n->op == KILN_OP_MUL    ? 1
                  : n->op == KILN_OP_SWIGLU ? 2
                  : n->op == KILN_OP_SUB    ? 4
                  : n->op == KILN_OP_DIV    ? 5
                                            : 3 | (uint32_t)n->ip[0] << 8;
    if ((s = bind_all(c, ts, b))) return s;
    uint32_t pc[24] = {b[0].rem / 4,       b[1].rem / 4,       b[3].rem / 4,       op,
                       (uint32_t)n->ne[0], (uint32_t)n->ne[1], (uint32_t)n->ne[2], (uint32_t)n->ne[3],
                       el(a->nb[0]),       el(a->nb[1]),       el(a->nb[2]),       el(a->nb[3]),
                       (uint32_t)y->ne[0], (uint32_t)y->ne[1], (uint32_t)y->ne[2], (uint32_t)y->ne[3],
                       el(y->nb[0]),       el(y->nb[1]),       el(y->nb[2]),       el(y->nb[3]),
                       el(n->nb[0]),       el(n->nb[1]),       el(n->nb[2]),       el(n->nb[3])};
    return kiln__vk_dispatch(c, KILN_VK_PIPE_BINARY, b, pc, sizeof pc,
                             ((uint64_t)kiln__tensor_nelements(n) + 255) / 256, 1);
}

static kiln_status record_unary(kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *a = n->src[0], *ts[KILN_VK_BINDINGS] = {a, NULL, NULL, n};
    kiln_vk_bind b[KILN_VK_BINDINGS];
    kiln_status s;
    uint32_t op = 0;
    float p0 = 0.0f, p1 = 0.0f;
    int64_t ne[4];
    size_t anb[4];
    if ((s = bind_all(c, ts, b))) return s;
    switch (n->op) {
    case KILN_OP_SCALE: op = 1, p0 = n->fp[0], p1 = n->fp[1]; break;
    case KILN_OP_SILU: op = 2 | KILN_ACT_SILU << 8; break;
    case KILN_OP_GELU: op = 2 | KILN_ACT_GELU << 8; break;
    case KILN_OP_RELU: op = 2 | KILN_ACT_RELU << 8; break;
    case KILN_OP_TANH: op = 3; break;
    case KILN_OP_UNARY: op = 4 | (uint32_t)n->ip[0] << 8; break;
    default: op = 0; break; /* cont */
    }
    /* cont may reshape: walk the source in its own shape and write the destination contiguously. */
    memcpy(ne, a->ne, sizeof ne);
    memcpy(anb, a->nb, sizeof anb);
    size_t dnb[4] = {4, 4 * (size_t)ne[0], 4 * (size_t)(ne[0] * ne[1]), 4 * (size_t)(ne[0] * ne[1] * ne[2])};
    if (n->op != KILN_OP_CONT) memcpy(dnb, n->nb, sizeof dnb);
    uint32_t pc[18] = {
        b[0].rem / 4,    b[3].rem / 4,    op,         0,          (uint32_t)ne[0], (uint32_t)ne[1],
        (uint32_t)ne[2], (uint32_t)ne[3], el(anb[0]), el(anb[1]), el(anb[2]),      el(anb[3]),
        el(dnb[0]),      el(dnb[1]),      el(dnb[2]), el(dnb[3])};
    memcpy(&pc[16], &p0, 4);
    memcpy(&pc[17], &p1, 4);
    return kiln__vk_dispatch(c, KILN_VK_PIPE_UNARY, b, pc, sizeof pc,
                             ((uint64_t)kiln__tensor_nelements(a) + 255) / 256, 1);
}

static kiln_status record_norm(kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *x = n->src[0], *w = n->op == KILN_OP_RMS_NORM_MUL ? n->src[1] : NULL,
                      *ts[KILN_VK_BINDINGS] = {x, w, NULL, n};
    kiln_vk_bind b[KILN_VK_BINDINGS];
    kiln_status s;
    uint32_t op = n->op == KILN_OP_RMS_NORM ? 0 : n->op == KILN_OP_RMS_NORM_MUL ? 1 : 2;
    if ((s = bind_all(c, ts, b))) return s;
    if (!w) w = x; /* unread; its shape keeps the shader's modulos defined */
    uint32_t pc[24] = {b[0].rem / 4,       b[1].rem / 4,       b[3].rem / 4,       op,
                       (uint32_t)x->ne[0], (uint32_t)x->ne[1], (uint32_t)x->ne[2], (uint32_t)x->ne[3],
                       el(x->nb[1]),       el(x->nb[2]),       el(x->nb[3]),       0,
                       (uint32_t)w->ne[0], (uint32_t)w->ne[1], (uint32_t)w->ne[2], (uint32_t)w->ne[3],
                       el(w->nb[0]),       el(w->nb[1]),       el(w->nb[2]),       el(w->nb[3]),
                       el(n->nb[1]),       el(n->nb[2]),       el(n->nb[3])};
    memcpy(&pc[23], &n->fp[0], 4);
    return kiln__vk_dispatch(c, KILN_VK_PIPE_NORM, b, pc, sizeof pc, (uint64_t)kiln__tensor_nrows(x), 1);
}

static kiln_status record_softmax(kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *x = n->src[0], *ts[KILN_VK_BINDINGS] = {x, NULL, NULL, n};
    kiln_vk_bind b[KILN_VK_BINDINGS];
    kiln_status s;
    if ((s = bind_all(c, ts, b))) return s;
    uint32_t pc[16] = {b[0].rem / 4,
                       b[3].rem / 4,
                       0,
                       0,
                       (uint32_t)x->ne[0],
                       (uint32_t)x->ne[1],
                       (uint32_t)x->ne[2],
                       (uint32_t)x->ne[3],
                       el(x->nb[1]),
                       el(x->nb[2]),
                       el(x->nb[3]),
                       0,
                       el(n->nb[1]),
                       el(n->nb[2]),
                       el(n->nb[3])};
    memcpy(&pc[15], &n->fp[0], 4);
    return kiln__vk_dispatch(c, KILN_VK_PIPE_SOFTMAX, b, pc, sizeof pc, (uint64_t)kiln__tensor_nrows(x), 1);
}

/* The binding of rope's frequencies for this base and n_rot, computed as the CPU does (kiln__rope_freq)
 * and uploaded the first time they are needed. */
static kiln_status rope_freqs(kiln_vk_ctx *c, float base, int32_t n_rot, kiln_vk_bind *out) {
    size_t bytes = (size_t)(n_rot / 2) * sizeof(float);
    kiln_vk_rope_table *tab = NULL;
    for (int32_t i = 0; i < c->n_rope_tables && !tab; i++)
        if (c->rope_tables[i].base == base && c->rope_tables[i].n_rot == n_rot) tab = &c->rope_tables[i];
    if (!tab) {
        kiln_vk_rope_table *grown =
            kiln__realloc_array(c->rope_tables, (size_t)c->n_rope_tables + 1, sizeof *grown);
        float *freqs = kiln__alloc_array((size_t)n_rot / 2, sizeof *freqs);
        uintptr_t addr = 0;
        kiln_vk_span sp;
        kiln_status s = KILN_OK;
        if (grown) c->rope_tables = grown;
        if (!grown || !freqs) s = kiln__nomem("the Vulkan rope table");
        for (int32_t i = 0; !s && i < n_rot; i += 2)
            freqs[i / 2] = kiln__rope_freq(base, i, n_rot);
        if (!s && !(s = kiln__vk_pool_alloc(c->dev->pool, bytes, &addr)) &&
            kiln__vk_pool_resolve(c->dev->pool, addr, &sp))
            s = kiln__vk_upload(c->dev, sp, freqs, bytes);
        kiln__dealloc(freqs);
        if (s) {
            if (addr) kiln__vk_pool_free(c->dev->pool, addr);
            return s;
        }
        tab = &c->rope_tables[c->n_rope_tables++];
        *tab = (kiln_vk_rope_table){base, n_rot, addr};
    }
    return kiln__vk_bind_addr(c, tab->addr, bytes, out);
}

static kiln_status record_rope(kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *x = n->src[0], *pos = n->src[1], *f = n->src[2];
    const kiln_tensor *ts[KILN_VK_BINDINGS] = {x, pos, f, n, NULL};
    kiln_vk_bind b[KILN_VK_BINDINGS];
    kiln_status s;
    if ((s = bind_all(c, ts, b)) || (s = rope_freqs(c, n->fp[0], n->ip[0], &b[4]))) return s;
    uint32_t pc[16] = {b[0].rem / 4,       b[1].rem / 4,       b[2].rem / 4,        b[3].rem / 4,
                       (uint32_t)x->ne[0], (uint32_t)x->ne[1], (uint32_t)x->ne[2],  (uint32_t)n->ip[0],
                       el(x->nb[1]),       el(x->nb[2]),       el(n->nb[1]),        el(n->nb[2]),
                       n->ip[1] == KILN_ROPE_NEOX, f != NULL,  b[4].rem / 4,        0};
    memcpy(&pc[15], &n->fp[1], 4);
    return kiln__vk_dispatch(c, KILN_VK_PIPE_ROPE, b, pc, sizeof pc,
                             ((uint64_t)kiln__tensor_nelements(x) + 255) / 256, 1);
}

/* How many parts attention splits its cells into: enough workgroups to fill a GPU (about 128) when few
 * (head, token) rows see many cells (decode), each part at least one 64-cell chunk, at most 32 parts. */
static int64_t attention_split(const kiln_tensor *n) {
    const kiln_tensor *q = n->src[0], *k = n->src[1];
    int64_t rows = q->ne[1] * q->ne[2], cells = k->type != KILN_TYPE_F32 ? k->ne[1] : k->ne[2];
    int64_t want = (128 + rows - 1) / rows, chunks = (cells + 63) / 64;
    return KILN__MAX(1, KILN__MIN(KILN__MIN(want, chunks), 32));
}

/* attention_tile.comp's shared memory (its staged queries, keys or values and scores), and the fewest
 * queries per head for which it beats attention.comp: half of its 16 a workgroup. */
#define ATTENTION_TILE_SHARED_BYTES 28672
#define ATTENTION_TILE_MIN_T 8

bool kiln__vk_attention_tiles(const kiln_vk_device *dev) {
    return dev->info.max_shared_memory >= ATTENTION_TILE_SHARED_BYTES;
}

/* Prefill's attention (many queries per head, head size a multiple of 4 up to 128) by the tiled kernel. */
static bool attention_tiled(const kiln_vk_ctx *c, const kiln_tensor *n) {
    int64_t D = n->src[0]->ne[0];
    return kiln__vk_attention_tiles(c->dev) && n->src[0]->ne[2] >= ATTENTION_TILE_MIN_T && D % 4 == 0 &&
           D <= 128;
}

static kiln_status record_attention(kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *m = n->src[3];
    const kiln_tensor *ts[KILN_VK_BINDINGS] = {q, k, v, n, m};
    kiln_vk_bind b[KILN_VK_BINDINGS], out;
    kiln_status s;
    bool tiled = attention_tiled(c, n);
    int64_t split = tiled ? 1 : attention_split(n), rows = q->ne[1] * q->ne[2];
    if ((s = bind_all(c, ts, b))) return s;
    out = b[3];
    if (split > 1 && (s = kiln__vk_bind_scratch(c, kiln__vk_scratch_bytes(c, n), &b[3]))) return s;
    /* F32 [D, Hkv, C]: head hk at byte stride nb[1]; F16/Q8_0 rows [Hkv * D, C]: at element hk * D. */
    bool kv_rows = k->type != KILN_TYPE_F32;
    int64_t hkv = kv_rows ? k->ne[0] / q->ne[0] : k->ne[1], cells = kv_rows ? k->ne[1] : k->ne[2];
    int64_t per = ((cells + split - 1) / split + 63) / 64 * 64;
    uint32_t pc[23] = {b[0].rem / 4,
                       (uint32_t)b[1].rem,
                       (uint32_t)b[2].rem,
                       b[4].rem / 4,
                       b[3].rem / 4,
                       (uint32_t)q->ne[0],
                       (uint32_t)q->ne[1],
                       (uint32_t)q->ne[2],
                       (uint32_t)cells,
                       (uint32_t)(q->ne[1] / hkv),
                       el(q->nb[1]),
                       el(q->nb[2]),
                       kv_rows ? 0 : (uint32_t)k->nb[1],
                       (uint32_t)(kv_rows ? k->nb[1] : k->nb[2]),
                       kv_rows ? 0 : (uint32_t)v->nb[1],
                       (uint32_t)(kv_rows ? v->nb[1] : v->nb[2]),
                       el(m->nb[1]),
                       el(n->nb[1]),
                       el(n->nb[2]),
                       0,
                       kv_rows ? (uint32_t)q->ne[0] : 0,
                       (uint32_t)split,
                       (uint32_t)per};
    memcpy(&pc[19], &n->fp[0], 4);
    if (tiled) /* a workgroup per head and 16 queries */
        return kiln__vk_dispatch(c, KILN_VK_PIPE_ATTENTION_TILE + kv_index(k->type), b, pc, sizeof pc,
                                 (uint64_t)(q->ne[1] * ((q->ne[2] + 15) / 16)), 1);
    if ((s = kiln__vk_dispatch(c, KILN_VK_PIPE_ATTENTION + kv_index(k->type), b, pc, sizeof pc,
                               (uint64_t)(rows * split), 1)) ||
        split == 1)
        return s;
    kiln_vk_bind cb[KILN_VK_BINDINGS] = {b[3], {0}, {0}, out, {0}};
    uint32_t cpc[8] = {b[3].rem / 4,       out.rem / 4,  (uint32_t)q->ne[0], (uint32_t)q->ne[1],
                       (uint32_t)q->ne[2], (uint32_t)split, el(n->nb[1]),     el(n->nb[2])};
    return kiln__vk_dispatch(c, KILN_VK_PIPE_ATTENTION_COMBINE, cb, cpc, sizeof cpc, (uint64_t)rows, 1);
}

static kiln_status record_cache_write(kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *x = n->src[0], *idx = n->src[2], *ts[KILN_VK_BINDINGS] = {x, idx, NULL, n};
    kiln_vk_bind b[KILN_VK_BINDINGS];
    kiln_status s;
    if ((s = bind_all(c, ts, b))) return s;
    /* One invocation per element (F32, F16) or 32-block (Q8_0); the cache offset in bytes. */
    uint32_t pc[10] = {b[0].rem / 4,       b[1].rem / 4,       (uint32_t)b[3].rem, (uint32_t)x->ne[0],
                       (uint32_t)x->ne[1], (uint32_t)n->ne[1], el(x->nb[0]),       el(x->nb[1]),
                       el(idx->nb[0]),     (uint32_t)n->nb[1]};
    int64_t units = kiln__tensor_nelements(x) / kiln__type_traits(n->type)->block_elems;
    return kiln__vk_dispatch(c, KILN_VK_PIPE_CACHE_WRITE + kv_index(n->type), b, pc, sizeof pc,
                             ((uint64_t)units + 255) / 256, 1);
}

static kiln_status record_cast(kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *x = n->src[0], *ts[KILN_VK_BINDINGS] = {x, NULL, NULL, n};
    kiln_vk_bind b[KILN_VK_BINDINGS];
    kiln_status s;
    if ((s = bind_all(c, ts, b))) return s;
    uint32_t pc[9] = {(uint32_t)b[0].rem,  b[3].rem / 4,        (uint32_t)x->ne[0], (uint32_t)x->ne[1],
                      (uint32_t)x->ne[2],  (uint32_t)x->nb[1],  (uint32_t)x->nb[2], (uint32_t)x->nb[3],
                      (uint32_t)kiln__tensor_nelements(n)};
    return kiln__vk_dispatch(c, KILN_VK_PIPE_CAST + kv_index(x->type), b, pc, sizeof pc,
                             ((uint64_t)kiln__tensor_nelements(n) + 255) / 256, 1);
}

bool kiln__vk_holds_kv(const kiln_vk_ctx *c, kiln_type type, size_t row_bytes, int64_t n_cells) {
    size_t bytes;
    return kv_index(type) >= 0 && n_cells > 0 && c->opt.refuse != KILN_OP_CACHE_WRITE &&
           c->opt.refuse != KILN_OP_ATTENTION && !kiln__mul_overflow_size(row_bytes, (size_t)n_cells, &bytes) &&
           bytes + c->dev->min_offset <= c->dev->max_range;
}

static kiln_status record_get_rows(kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *tab = n->src[0], *ids = n->src[1], *ts[KILN_VK_BINDINGS] = {tab, ids, NULL, n};
    kiln_vk_bind b[KILN_VK_BINDINGS];
    kiln_status s;
    if ((s = bind_all(c, ts, b))) return s;
    uint32_t pc[9] = {
        b[0].rem,     (uint32_t)tab->nb[1], b[1].rem / 4,         el(ids->nb[0]),      b[3].rem / 4,
        el(n->nb[1]), (uint32_t)tab->ne[0], (uint32_t)ids->ne[0], (uint32_t)tab->ne[1]};
    return kiln__vk_dispatch(c, KILN_VK_PIPE_GET_ROWS + type_index(tab->type), b, pc, sizeof pc,
                             (uint64_t)ids->ne[0], 1);
}

/* mul_mv.comp takes up to this many columns per workgroup; more columns go to the tiled mul_mm.comp where
 * the device has the shared memory for its tiles. */
#define MV_COLS 8
#define MM_SHARED_BYTES 16384

/* Whether this matmul goes to mul_mm.comp (which reads x as floats, whatever the weight type). */
static bool matmul_tiled(const kiln_vk_ctx *c, const kiln_tensor *n) {
    return n->src[1]->ne[1] > MV_COLS && c->dev->info.max_shared_memory >= MM_SHARED_BYTES;
}

/* The scratch a node needs: the x of a quantized matmul of up to MV_COLS columns as q8 rows
 * (quantize_q8.comp: per column K quants, K / 32 scales and K / 32 sums), or a split attention's parts. */
size_t kiln__vk_scratch_bytes(const kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *x = n->src[1];
    if (n->op == KILN_OP_ATTENTION && !attention_tiled(c, n) && attention_split(n) > 1) /* each part's (m, l, acc[D]) */
        return (size_t)(n->src[0]->ne[1] * n->src[0]->ne[2] * attention_split(n)) * (size_t)(n->src[0]->ne[0] + 2) * 4;
    if ((n->op != KILN_OP_MATMUL && n->op != KILN_OP_LINEAR) || type_index(n->src[0]->type) < 2 ||
        matmul_tiled(c, n))
        return 0;
    return (size_t)(x->ne[1] * x->ne[2] * x->ne[3]) * (size_t)(x->ne[0] + x->ne[0] / 32 * 8);
}

/* Whether the scratch still holds x's q8 rows of this span (c->q8, set by record_quantize). */
static bool q8_rows_hold(const kiln_vk_ctx *c, const kiln_vk_bind *xb, const kiln_tensor *x, uint32_t span) {
    const struct kiln_vk_q8_rows *q = &c->q8;
    return q->valid && q->span == span && q->src_buffer == xb->buffer && q->src_lo == xb->offset &&
           q->src_hi == xb->offset + xb->range && q->rem == xb->rem && !memcmp(q->ne, x->ne, sizeof q->ne) &&
           !memcmp(q->nb, x->nb, sizeof q->nb);
}

/* x quantized to q8 rows in the scratch buffer, bound in *xb: by a quantize_q8 dispatch, or none when the
 * scratch still holds them from the last quantized matmul of the same x. */
static kiln_status record_quantize(kiln_vk_ctx *c, const kiln_tensor *n, kiln_vk_bind *xb) {
    const kiln_tensor *x = n->src[1], *ts[KILN_VK_BINDINGS] = {x, NULL, NULL, NULL};
    kiln_vk_bind b[KILN_VK_BINDINGS];
    kiln_status s;
    uint64_t blocks = (uint64_t)(x->ne[0] / 32) * (uint64_t)(x->ne[1] * x->ne[2] * x->ne[3]);
    if ((s = bind_all(c, ts, b)) || (s = kiln__vk_bind_scratch(c, kiln__vk_scratch_bytes(c, n), &b[3])))
        return s;
    /* K-quants' activations have one scale per 256-element super-block, as on the CPU (kernels.h). */
    kiln_type wt = n->src[0]->type;
    uint32_t span = wt == KILN_TYPE_Q4_K || wt == KILN_TYPE_Q6_K ? 256u : 32u;
    if (q8_rows_hold(c, &b[0], x, span)) {
        *xb = c->q8.rows;
        c->n_q8_reused++;
        return KILN_OK;
    }
    uint32_t pc[10] = {b[0].rem / 4,       b[3].rem / 4,       (uint32_t)x->ne[0], (uint32_t)x->ne[1],
                       (uint32_t)x->ne[2], (uint32_t)x->ne[3], el(x->nb[1]),       el(x->nb[2]),
                       el(x->nb[3]),       span};
    *xb = b[3];
    if ((s = kiln__vk_dispatch(c, KILN_VK_PIPE_QUANTIZE, b, pc, sizeof pc, (blocks + 7) / 8, 1))) /* 8 blocks a group */
        return s;
    c->q8 = (struct kiln_vk_q8_rows){.valid = true,
                                     .src_buffer = b[0].buffer,
                                     .rows_buffer = b[3].buffer,
                                     .src_lo = b[0].offset,
                                     .src_hi = b[0].offset + b[0].range,
                                     .rows_lo = b[3].offset,
                                     .rows_hi = b[3].offset + b[3].range,
                                     .span = span,
                                     .rem = b[0].rem,
                                     .rows = b[3]};
    memcpy(c->q8.ne, x->ne, sizeof c->q8.ne);
    memcpy(c->q8.nb, x->nb, sizeof c->q8.nb);
    return KILN_OK;
}

/* matmul and linear: up to MV_COLS columns by mul_mv.comp, a quantized weight's x quantized first (once
 * per node); more by the tiled mul_mm.comp, from float x. A weight over the binding limit goes in row
 * ranges, one dispatch each. */
static kiln_status record_matmul(kiln_vk_ctx *c, const kiln_tensor *n) {
    const kiln_tensor *w = n->src[0], *x = n->src[1], *bias = n->op == KILN_OP_LINEAR ? n->src[2] : NULL;
    const kiln_tensor *ts[KILN_VK_BINDINGS] = {NULL, NULL, bias, n};
    kiln_vk_bind b[KILN_VK_BINDINGS];
    kiln_status s;
    int ti = type_index(w->type);
    int64_t N = n->ne[0], per, M = x->ne[1];
    size_t span = kiln__tensor_span(w);
    float alpha = n->op == KILN_OP_LINEAR ? n->fp[0] : 1.0f;
    uint32_t act = n->op == KILN_OP_LINEAR ? (uint32_t)n->ip[0] : 0;
    bool tiled = matmul_tiled(c, n);
    if ((s = bind_all(c, ts, b))) return s;
    s = ti >= 2 && !tiled ? record_quantize(c, n, &b[1]) : kiln__vk_bind(c, x, &b[1]);
    if (s) return s;
    per = span + c->dev->min_offset <= c->dev->max_range
              ? N
              : (int64_t)((c->dev->max_range - c->dev->min_offset) / w->nb[1]);
    for (int64_t n0 = 0; n0 < N; n0 += per) {
        int64_t rows = KILN__MIN(per, N - n0);
        size_t bytes = per == N ? span : (size_t)rows * w->nb[1];
        uint64_t groups = tiled ? (uint64_t)((rows + 63) / 64) * (uint64_t)((M + 63) / 64)
                                : (uint64_t)((rows + 1) / 2) * (uint64_t)((M + MV_COLS - 1) / MV_COLS);
        if ((s = kiln__vk_bind_range(c, w, (size_t)n0 * w->nb[1], bytes, &b[0]))) return s;
        uint32_t pc[24] = {b[0].rem,           b[1].rem / 4,
                           b[3].rem / 4,       b[2].rem / 4,
                           (uint32_t)x->ne[0], (uint32_t)rows,
                           (uint32_t)M,        (uint32_t)n0,
                           (uint32_t)w->nb[1], (uint32_t)w->nb[2],
                           (uint32_t)w->nb[3], (uint32_t)(x->ne[2] / w->ne[2]),
                           el(x->nb[1]),       el(x->nb[2]),
                           el(x->nb[3]),       (uint32_t)(x->ne[3] / w->ne[3]),
                           el(n->nb[1]),       el(n->nb[2]),
                           el(n->nb[3]),       (uint32_t)x->ne[2],
                           0,                  act,
                           bias != NULL,       0};
        memcpy(&pc[20], &alpha, 4);
        if ((s = kiln__vk_dispatch(c, (tiled ? KILN_VK_PIPE_MUL_MM : KILN_VK_PIPE_MUL_MV) + ti, b, pc, sizeof pc,
                                   groups, (uint32_t)(x->ne[2] * x->ne[3]))))
            return s;
    }
    return KILN_OK;
}

kiln_status kiln__vk_record(kiln_vk_ctx *c, const kiln_tensor *n) {
    switch (n->op) {
    case KILN_OP_ADD:
    case KILN_OP_MUL:
    case KILN_OP_SUB:
    case KILN_OP_DIV:
    case KILN_OP_SWIGLU:
    case KILN_OP_ADD_ACT: return record_binary(c, n);
    case KILN_OP_SCALE:
    case KILN_OP_SILU:
    case KILN_OP_GELU:
    case KILN_OP_RELU:
    case KILN_OP_TANH:
    case KILN_OP_UNARY:
    case KILN_OP_CONT: return record_unary(c, n);
    case KILN_OP_RMS_NORM:
    case KILN_OP_RMS_NORM_MUL:
    case KILN_OP_NORM: return record_norm(c, n);
    case KILN_OP_SOFTMAX: return record_softmax(c, n);
    case KILN_OP_ROPE: return record_rope(c, n);
    case KILN_OP_ATTENTION: return record_attention(c, n);
    case KILN_OP_CACHE_WRITE: return record_cache_write(c, n);
    case KILN_OP_CAST: return record_cast(c, n);
    case KILN_OP_GET_ROWS: return record_get_rows(c, n);
    case KILN_OP_MATMUL:
    case KILN_OP_LINEAR: return record_matmul(c, n);
    default: return kiln__error(KILN_E_UNSUPPORTED, "vulkan: no kernel for %s", kiln__op_name(n->op));
    }
}
