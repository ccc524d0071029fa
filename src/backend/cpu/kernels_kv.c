/*
 * kernels_kv.c - see kernels_kv.h.
 *
 * A cache row holds the K (or V) vectors of all KV heads of one position, [Hkv * D] elements, in the
 * cache's type. Head hk's vector is elements [hk * D, hk * D + D) of the row; with Q8_0 and D < 32 a block
 * spans several heads, so a head's vector is dequantized from the blocks that cover it. Only the rows a
 * query attends to (the visible keys of its mask row) are read, one vector at a time: the cache is never
 * dequantized as a whole. A cache write puts row r of the batch into cell idx[r] and skips rows whose
 * index is negative (padding); an index past the cache is skipped too (the runtime never sends one).
 */
#include "backend/cpu/kernels_kv.h"

#include "core/core.h"
#include "tensor/types.h"

#include <math.h>
#include <string.h>

#define SEGMENT_PAD 64 /* a dequantized segment may start up to 31 elements before the head's vector */

void kiln__cpu_cast(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0];
    int64_t r0, r1;
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        kiln__dequantize_row(x->type, kiln__cpu_row(x, i1, i2, i3), (float *)kiln__cpu_row(a->dst, i1, i2, i3), x->ne[0]);
    }
}

void kiln__cpu_cache_write_kv(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0], *cache = a->dst->src[1];
    const int32_t *idx = (const int32_t *)a->dst->src[2]->data;
    int64_t r0, r1;
    if (cache->type == KILN_TYPE_F32) {
        kiln__cpu_cache_write(a);
        return;
    }
    kiln__cpu_split(x->ne[1], a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        if (idx[r] < 0 || idx[r] >= cache->ne[1]) continue; /* a padding row */
        const float *xr = (const float *)kiln__cpu_row(x, r, 0, 0);
        char *row = kiln__cpu_row(cache, idx[r], 0, 0);
        if (cache->type == KILN_TYPE_F16)
            for (int64_t i = 0; i < x->ne[0]; i++) ((uint16_t *)row)[i] = kiln_fp32_to_fp16(xr[i]);
        else
            kiln_quantize_row(cache->type, xr, row, x->ne[0]);
    }
}

/* Elements [e0, e0 + n) of a cache row as floats: a pointer into tmp (n + SEGMENT_PAD floats). */
static const float *segment(const kiln_tensor *c, int64_t row, int64_t e0, int64_t n, float *tmp) {
    const char *base = kiln__cpu_row(c, row, 0, 0);
    const kiln_type_traits *tr = kiln__type_traits(c->type);
    int64_t b0 = e0 / tr->block_elems, b1 = (e0 + n - 1) / tr->block_elems;
    kiln__dequantize_row(c->type, base + b0 * (int64_t)tr->block_bytes, tmp, (b1 - b0 + 1) * tr->block_elems);
    return tmp + (e0 - b0 * tr->block_elems);
}

const char *kiln__cpu_kv_head_rows(const kiln_tensor *c, int64_t D, int64_t hk, int64_t j0, int64_t n, float *buf,
                                   float *tmp, size_t *stride) {
    if (c->type == KILN_TYPE_F32) {
        *stride = c->nb[2];
        return kiln__cpu_row(c, hk, j0, 0);
    }
    for (int64_t j = 0; j < n; j++) memcpy(buf + j * D, segment(c, j0 + j, hk * D, D, tmp), (size_t)D * sizeof(float));
    *stride = (size_t)D * sizeof(float);
    return (const char *)buf;
}

size_t kiln__cpu_attention_kv_scratch_floats(const kiln_tensor *node) {
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    size_t n = node->src[1]->type == KILN_TYPE_F32
                   ? kiln__cpu_flash_attention_scratch_floats(node)
                   : (size_t)node->src[1]->ne[1] + 2 * ((size_t)node->src[0]->ne[0] + SEGMENT_PAD);
    return isa->flash_attention_scratch_floats ? KILN__MAX(n, isa->flash_attention_scratch_floats(node)) : n;
}

/* Reference attention over F16/Q8_0 rows, as kiln__cpu_attention: scores for the keys lo..hi of the query's
 * mask row (hidden ones -inf), softmax, weighted sum of V over the visible ones; zeros when none is. */
void kiln__cpu_attention_kv(const kiln_cpu_args *a) {
    const kiln_tensor *q = a->dst->src[0], *k = a->dst->src[1], *v = a->dst->src[2], *mask = a->dst->src[3];
    if (k->type == KILN_TYPE_F32) {
        kiln__cpu_flash_attention(a);
        return;
    }
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    if (isa->flash_attention && isa->flash_attention(a)) return; /* the level's kernel takes F16/Q8_0 too */
    float scale = a->dst->fp[0];
    int64_t D = q->ne[0], Hq = q->ne[1], C = k->ne[1], Hkv = k->ne[0] / D, group = Hq / Hkv, r0, r1;
    int64_t lo = 0, hi = -1, row_t = -1;
    float *scores = a->scratch, *tmp = a->scratch + C;
    const float *mrow = NULL;
    kiln__cpu_split(Hq * q->ne[2], a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t h = r % Hq, t = r / Hq, e0 = (h / group) * D;
        const float *qr = (const float *)kiln__cpu_row(q, h, t, 0);
        float *out = (float *)kiln__cpu_row(a->dst, h, t, 0);
        if (t != row_t) { /* a new token: scan its mask row */
            mrow = (const float *)kiln__cpu_row(mask, t, 0, 0);
            kiln__cpu_mask_range(mrow, C, &lo, &hi);
            row_t = t;
        }
        memset(out, 0, (size_t)D * sizeof(float));
        if (hi < lo) continue; /* sees no key: zeros */
        for (int64_t j = lo; j <= hi; j++)
            scores[j - lo] = mrow[j] == -INFINITY ? -INFINITY
                                                  : kiln__cpu_dot_f32(qr, segment(k, j, e0, D, tmp), D) * scale + mrow[j];
        kiln__cpu_softmax_row(scores, hi - lo + 1);
        for (int64_t j = lo; j <= hi; j++) {
            if (mrow[j] == -INFINITY) continue;
            const float *vr = segment(v, j, e0, D, tmp);
            for (int64_t i = 0; i < D; i++) out[i] += scores[j - lo] * vr[i];
        }
    }
}
