/*
 * kernels_matmul.c - matmul: dst[n, m] = sum_k W[k, n] * X[k, m], per batch (i2, i3), with W broadcast
 * over batch dims. The dispatch table (kernels.h) supplies the tile kernel for the weight type.
 *
 * Quantized weights: the threads first quantize every activation column to a q8 row in the node's shared
 * scratch (each thread a range of columns), meet at a barrier, then multiply with integer dots.
 * Repacked F16/BF16 weights with several columns, on a level with bf16 tiles (mm_packed_bf16): the same,
 * with the columns rounded to bf16 rows instead (prefill in bf16 arithmetic; decode stays in float).
 * F16/BF16 weights with several columns (prefill) that were not repacked: each block of 32 weight rows is
 * converted to F32 once into the thread's scratch and multiplied with the F32 tile, so the conversion is
 * paid once per block instead of once per column (repacked ones go to the packed tiles, which convert
 * inside). Each thread takes a range of weight rows (in units of 16); every output is
 * computed by the same instruction sequence whatever the split, so thread counts agree bit for bit.
 * Weights the backend repacked (a->packed, see repack.c) go to the level's packed tiles; the rows are
 * then split in groups of 16, which the row split already respects. Types without a tile kernel fall back
 * to dequantizing a row at a time (the reference path).
 *
 * The fused linear op (src0 W, src1 X, optional src2 bias; f[0] alpha; i[0] activation) runs through the
 * same driver with its epilogue applied to each block of outputs, in the reference's order (scale, bias,
 * activation). A transposed F32 operand (KILN_LINEAR_TRANS0: W read as [N, K] with contiguous N, an
 * activation such as attention's K^T in an imported graph) is gathered a block of 32 output rows at a time
 * into the thread's scratch as plain [K] rows and multiplied with the F32 tile, like converted rows.
 */
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_fused.h"

#include "core/core.h"
#include "tensor/types.h"

#define ROW_BLOCK 32 /* weight rows per cache block */
#define COL_BLOCK 64 /* activation columns per cache block */

static bool converts_rows(const kiln_tensor *w, const kiln_tensor *x) {
    return (w->type == KILN_TYPE_F16 || w->type == KILN_TYPE_BF16) && x->ne[1] >= 4;
}

/* A linear node whose operand is read transposed: W [N, K] (element (n, k) at n * nb[0] + k * nb[1]). */
static bool transposed(const kiln_tensor *node) {
    return node->op == KILN_OP_LINEAR && (node->ip[1] & KILN_LINEAR_TRANS0);
}

size_t kiln__cpu_matmul_scratch_floats(const kiln_tensor *node) {
    const kiln_tensor *w = node->src[0], *x = node->src[1];
    if (converts_rows(w, x) || transposed(node)) return (size_t)ROW_BLOCK * (size_t)x->ne[0];
    return (size_t)x->ne[0]; /* one dequantized row for the fallback */
}

/* Whether a repacked weight multiplies these columns in bf16 arithmetic: the level has the tile and the
 * pass is a prefill (as many columns as converts_rows asks; one to three stay in float). */
static bool bf16_columns(const kiln_cpu_isa *isa, const kiln_tensor *w, const kiln_tensor *x) {
    return isa->bf16_prefill && isa->mm_packed_bf16[w->type] != NULL && x->ne[1] >= 4;
}

size_t kiln__cpu_matmul_shared_bytes(const kiln_tensor *node) {
    const kiln_tensor *w = node->src[0], *x = node->src[1];
    /* Sized for the bf16 columns whenever the level could use them; unused when the weight is not repacked.
     */
    if (bf16_columns(kiln__cpu_isa(), w, x))
        return kiln__bf16_row_bytes(x->ne[0]) * (size_t)kiln__tensor_nrows(x);
    if (!kiln__mm_wants_q8(w->type)) return 0;
    /* 15 rows of padding: the AMX tiles load 16 columns at a time and ignore the extra ones. */
    return kiln__q8_row_bytes(x->ne[0]) * ((size_t)kiln__tensor_nrows(x) + 15);
}

static void epilogue(const kiln_tensor *dst, float *out, size_t os, int64_t rows, int64_t M, int64_t n0);

static void fallback(const kiln_cpu_args *a, const kiln_cpu_isa *isa, int64_t i2, int64_t i3, int64_t n0,
                     int64_t n1) {
    const kiln_tensor *w = a->dst->src[0], *x = a->dst->src[1];
    int64_t r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3], K = x->ne[0];
    size_t os = a->dst->nb[1] / sizeof(float);
    bool vec = x->nb[0] == sizeof(float);
    for (int64_t n = n0; n < n1; n++) {
        float *out = (float *)kiln__cpu_row(a->dst, 0, i2, i3) + n;
        kiln__dequantize_row(w->type, kiln__cpu_row(w, n, i2 / r2, i3 / r3), a->scratch, K);
        if (vec) { /* the F32 tile on the dequantized row */
            isa->mm[KILN_TYPE_F32](K, a->scratch, 0, 1, kiln__cpu_row(x, 0, i2, i3), x->nb[1], x->ne[1], out,
                                   os);
        } else {
            for (int64_t m = 0; m < x->ne[1]; m++)
                out[m * (int64_t)os] =
                    isa->dot_f32(a->scratch, (const float *)kiln__cpu_row(x, m, i2, i3), K);
        }
        if (a->dst->op == KILN_OP_LINEAR) epilogue(a->dst, out, os, 1, x->ne[1], n);
    }
}

/* Quantize this thread's share of the activation columns into the shared q8 rows (super-block rows when
 * the level's tiles for the weight type take them). */
static void quantize_columns(const kiln_cpu_args *a, const kiln_cpu_isa *isa) {
    const kiln_tensor *x = a->dst->src[1];
    size_t qrow = kiln__q8_row_bytes(x->ne[0]);
    void (*quantize)(const float *, void *, int64_t) =
        isa->q8_superblock[a->dst->src[0]->type] ? isa->quantize_q8_sb : isa->quantize_q8;
    int64_t c0, c1;
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &c0, &c1);
    for (int64_t c = c0; c < c1; c++) {
        int64_t i1 = c % x->ne[1], i2 = (c / x->ne[1]) % x->ne[2], i3 = c / (x->ne[1] * x->ne[2]);
        quantize((const float *)kiln__cpu_row(x, i1, i2, i3), (char *)a->shared + (size_t)c * qrow, x->ne[0]);
    }
}

/* Round this thread's share of the activation columns to the shared bf16 rows. */
static void round_columns(const kiln_cpu_args *a, const kiln_cpu_isa *isa) {
    const kiln_tensor *x = a->dst->src[1];
    size_t row = kiln__bf16_row_bytes(x->ne[0]);
    int64_t c0, c1;
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &c0, &c1);
    for (int64_t c = c0; c < c1; c++) {
        int64_t i1 = c % x->ne[1], i2 = (c / x->ne[1]) % x->ne[2], i3 = c / (x->ne[1] * x->ne[2]);
        isa->f32_to_bf16((const float *)kiln__cpu_row(x, i1, i2, i3),
                         (uint16_t *)(void *)((char *)a->shared + (size_t)c * row), x->ne[0]);
    }
}

/* The linear op's scale, bias and activation on outputs [n0, n0 + rows) of M columns; the activation
 * runs over each column's rows through the level's row helper (kiln__act_row). */
static void epilogue(const kiln_tensor *dst, float *out, size_t os, int64_t rows, int64_t M, int64_t n0) {
    const kiln_tensor *bias = dst->src[2];
    const float *b = bias ? (const float *)bias->data + n0 : NULL;
    float alpha = dst->fp[0];
    int32_t act = dst->ip[0];
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    if (alpha == 1.0f && !bias && act == KILN_ACT_NONE) return; /* a plain product */
    for (int64_t m = 0; m < M; m++) {
        float *o = out + m * (int64_t)os;
        if (alpha != 1.0f)
            for (int64_t r = 0; r < rows; r++)
                o[r] *= alpha;
        if (b)
            for (int64_t r = 0; r < rows; r++)
                o[r] += b[r];
        kiln__act_row(isa, act, o, o, rows);
    }
}

/* Rows [n0, n1) of one batch, in cache blocks. */
static void multiply(const kiln_cpu_args *a, const kiln_cpu_isa *isa, int64_t i2, int64_t i3, int64_t n0,
                     int64_t n1) {
    const kiln_tensor *w = a->dst->src[0], *x = a->dst->src[1];
    kiln_tensor *dst = a->dst;
    int64_t K = x->ne[0], M = x->ne[1], r2 = x->ne[2] / w->ne[2], r3 = x->ne[3] / w->ne[3];
    bool packed = a->packed && isa->mm_packed[w->type], bf16 = packed && bf16_columns(isa, w, x);
    bool q8 = kiln__mm_wants_q8(w->type), convert = converts_rows(w, x), gather = transposed(dst);
    size_t xs = q8 ? kiln__q8_row_bytes(K) : bf16 ? kiln__bf16_row_bytes(K) : x->nb[1];
    size_t os = dst->nb[1] / sizeof(float);
    const char *xb = q8 || bf16 ? (const char *)a->shared + (size_t)((i3 * x->ne[2] + i2) * M) * xs
                                : kiln__cpu_row(x, 0, i2, i3);
    float *ob = (float *)kiln__cpu_row(dst, 0, i2, i3);
    kiln_mm_fn mm = convert || gather ? isa->mm[KILN_TYPE_F32] : isa->mm[w->type];
    size_t gs = packed ? kiln__repack_group_bytes(w->type, K) : 0;
    if (packed) mm = bf16 ? isa->mm_packed_bf16[w->type] : isa->mm_packed[w->type];
    for (int64_t nb = n0; nb < n1; nb += ROW_BLOCK) {
        int64_t rows = KILN__MIN(ROW_BLOCK, n1 - nb);
        const char *wr = gather ? NULL : kiln__cpu_row(w, nb, i2 / r2, i3 / r3);
        size_t ws = w->nb[1];
        if (gather) { /* rows nb .. nb + rows of W^T: K rows of `rows` contiguous floats, transposed */
            const char *base = kiln__cpu_row(w, 0, i2 / r2, i3 / r3) + nb * (int64_t)w->nb[0];
            for (int64_t k = 0; k < K; k++) {
                const float *src = (const float *)(base + k * (int64_t)w->nb[1]);
                for (int64_t r = 0; r < rows; r++)
                    a->scratch[r * K + k] = src[r];
            }
            wr = (const char *)a->scratch;
            ws = (size_t)K * sizeof(float);
        } else if (packed) {
            wr = (const char *)a->packed + (size_t)(nb / 16) * gs;
            ws = gs;
        } else if (convert) {
            for (int64_t r = 0; r < rows; r++) {
                const uint16_t *src = (const uint16_t *)(wr + r * (int64_t)w->nb[1]);
                if (w->type == KILN_TYPE_F16)
                    isa->f16_to_f32(src, a->scratch + r * K, K);
                else
                    isa->bf16_to_f32(src, a->scratch + r * K, K);
            }
            wr = (const char *)a->scratch;
            ws = (size_t)K * sizeof(float);
        }
        for (int64_t m = 0; m < M; m += COL_BLOCK)
            mm(K, wr, ws, rows, xb + m * (int64_t)xs, xs, KILN__MIN(COL_BLOCK, M - m),
               ob + m * (int64_t)os + nb, os);
        if (dst->op == KILN_OP_LINEAR) epilogue(dst, ob + nb, os, rows, M, nb);
    }
}

/* Whether the tile kernels can take this node: a kernel for the type, rows of contiguous elements. */
static bool fast_ok(const kiln_cpu_isa *isa, const kiln_tensor *node) {
    const kiln_tensor *w = node->src[0], *x = node->src[1];
    if (transposed(node))
        return isa->mm[KILN_TYPE_F32] != NULL && w->type == KILN_TYPE_F32 && w->nb[0] == sizeof(float) &&
               x->nb[0] == sizeof(float);
    return isa->mm[w->type] != NULL && x->nb[0] == sizeof(float) && w->nb[0] <= w->nb[1];
}

void kiln__cpu_matmul(const kiln_cpu_args *a) {
    const kiln_tensor *w = a->dst->src[0], *x = a->dst->src[1];
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    int64_t N = transposed(a->dst) ? w->ne[0] : w->ne[1], units = (N + 15) / 16, u0, u1, n0, n1;
    bool fast = fast_ok(isa, a->dst);
    if (fast && kiln__mm_wants_q8(w->type)) {
        quantize_columns(a, isa);
        kiln__pool_barrier(a->pool);
    } else if (fast && a->packed && isa->mm_packed[w->type] && bf16_columns(isa, w, x)) {
        round_columns(a, isa);
        kiln__pool_barrier(a->pool);
    }
    kiln__cpu_split(units, a->ith, a->nth, &u0, &u1);
    n0 = KILN__MIN(u0 * 16, N);
    n1 = KILN__MIN(u1 * 16, N);
    for (int64_t i3 = 0; i3 < x->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < x->ne[2]; i2++) {
            if (fast)
                multiply(a, isa, i2, i3, n0, n1);
            else
                fallback(a, isa, i2, i3, n0, n1);
        }
}

void kiln__cpu_linear_fast(const kiln_cpu_args *a) {
    if (transposed(a->dst) && !fast_ok(kiln__cpu_isa(), a->dst)) {
        kiln__cpu_linear(a);
        return;
    }
    kiln__cpu_matmul(a);
}
