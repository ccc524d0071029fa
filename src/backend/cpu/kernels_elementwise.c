/*
 * kernels_elementwise.c - reference kernels for row-wise and elementwise ops: get_rows, add, mul (with
 * broadcasting; sub and div by the scalar loop only), silu, cont and cache_write (F32 caches: row r of x into cell idx[r], rows with a
 * negative index skipped; kernels_kv.c converts rows for F16/Q8_0). Outputs are the planned, contiguous
 * dst. Contiguous rows of add and mul go through the level's row helpers (kernels_vec_ref.c is their
 * reference).
 */
#include "backend/cpu/kernels.h"

#include "tensor/types.h"

#include <math.h>
#include <string.h>

void kiln__cpu_get_rows(const kiln_cpu_args *a) {
    const kiln_tensor *table = a->dst->src[0], *ids = a->dst->src[1];
    int64_t t0, t1;
    kiln__cpu_split(ids->ne[0], a->ith, a->nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        int32_t id = *(const int32_t *)((const char *)ids->data + t * (int64_t)ids->nb[0]);
        float *out = (float *)kiln__cpu_row(a->dst, t, 0, 0);
        if (id < 0 || id >= table->ne[1]) {
            /* Callers validate ids; an out-of-range id still yields defined output. */
            memset(out, 0, (size_t)table->ne[0] * sizeof(float));
            continue;
        }
        kiln__dequantize_row(table->type, kiln__cpu_row(table, id, 0, 0), out, table->ne[0]);
    }
}

/* One element of add, mul, sub or div: the scalar reference of every form. */
static inline float binary_op(kiln_op op, float x, float y) {
    switch (op) {
    case KILN_OP_MUL: return x * y;
    case KILN_OP_SUB: return x - y;
    case KILN_OP_DIV: return x / y;
    default: return x + y;
    }
}

static void binary(const kiln_cpu_args *a, kiln_op op) {
    const kiln_tensor *x = a->dst->src[0], *y = a->dst->src[1];
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    bool is_mul = op == KILN_OP_MUL;
    bool contiguous = (op == KILN_OP_ADD || is_mul) && x->nb[0] == sizeof(float) && y->nb[0] == sizeof(float) &&
                      y->ne[0] == x->ne[0];
    int64_t r0, r1;
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        const char *xr = kiln__cpu_row(x, i1, i2, i3);
        const char *yr = kiln__cpu_row(y, i1 % y->ne[1], i2 % y->ne[2], i3 % y->ne[3]);
        float *out = (float *)kiln__cpu_row(a->dst, i1, i2, i3);
        if (contiguous) {
            (is_mul ? isa->mul_f32 : isa->add_f32)(out, (const float *)xr, (const float *)yr, x->ne[0]);
            continue;
        }
        if (x->nb[0] == sizeof(float) && y->ne[0] == 1) { /* a scalar per row (a constant): dense loops */
            const float *xv = (const float *)xr, yv = *(const float *)yr;
            for (int64_t i = 0; i < x->ne[0]; i++)
                out[i] = binary_op(op, xv[i], yv);
            continue;
        }
        if (x->nb[0] == sizeof(float) && y->nb[0] == sizeof(float) && y->ne[0] == x->ne[0]) { /* sub, div */
            const float *xv = (const float *)xr, *yv = (const float *)yr;
            for (int64_t i = 0; i < x->ne[0]; i++)
                out[i] = binary_op(op, xv[i], yv[i]);
            continue;
        }
        for (int64_t i = 0; i < x->ne[0]; i++) {
            float xv = *(const float *)(xr + i * (int64_t)x->nb[0]);
            float yv = *(const float *)(yr + (i % y->ne[0]) * (int64_t)y->nb[0]);
            out[i] = binary_op(op, xv, yv);
        }
    }
}

void kiln__cpu_add(const kiln_cpu_args *a) { binary(a, KILN_OP_ADD); }
void kiln__cpu_mul(const kiln_cpu_args *a) { binary(a, KILN_OP_MUL); }
void kiln__cpu_sub(const kiln_cpu_args *a) { binary(a, KILN_OP_SUB); }
void kiln__cpu_div(const kiln_cpu_args *a) { binary(a, KILN_OP_DIV); }

/* cond ? x : y, x and y broadcast to cond's shape (each dim equal or dividing, as in add). */
void kiln__cpu_where(const kiln_cpu_args *a) {
    const kiln_tensor *c = a->dst->src[0], *x = a->dst->src[1], *y = a->dst->src[2];
    int64_t r0, r1;
    kiln__cpu_split(kiln__tensor_nrows(c), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(c, r, &i1, &i2, &i3);
        const char *cr = kiln__cpu_row(c, i1, i2, i3);
        const char *xr = kiln__cpu_row(x, i1 % x->ne[1], i2 % x->ne[2], i3 % x->ne[3]);
        const char *yr = kiln__cpu_row(y, i1 % y->ne[1], i2 % y->ne[2], i3 % y->ne[3]);
        float *out = (float *)kiln__cpu_row(a->dst, i1, i2, i3);
        for (int64_t i = 0; i < c->ne[0]; i++) {
            float cv = *(const float *)(cr + i * (int64_t)c->nb[0]);
            out[i] = cv != 0.0f ? *(const float *)(xr + (i % x->ne[0]) * (int64_t)x->nb[0])
                                : *(const float *)(yr + (i % y->ne[0]) * (int64_t)y->nb[0]);
        }
    }
}

/* The max of each row (NaN propagates). */
void kiln__cpu_reduce_max(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0];
    int64_t r0, r1;
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        const char *xr = kiln__cpu_row(x, i1, i2, i3);
        float m = -INFINITY;
        for (int64_t i = 0; i < x->ne[0]; i++) {
            float v = *(const float *)(xr + i * (int64_t)x->nb[0]);
            m = v > m || v != v ? v : m;
            if (m != m) break;
        }
        *(float *)kiln__cpu_row(a->dst, i1, i2, i3) = m;
    }
}

void kiln__cpu_silu(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0];
    int64_t r0, r1;
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        const float *xr = (const float *)kiln__cpu_row(x, i1, i2, i3);
        isa->silu_f32((float *)kiln__cpu_row(a->dst, i1, i2, i3), xr, x->ne[0]);
    }
}

void kiln__cpu_cont(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0];
    int64_t r0, r1;
    kiln__cpu_split(kiln__tensor_nrows(x), a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t i1, i2, i3;
        kiln__cpu_row_index(x, r, &i1, &i2, &i3);
        const char *xr = kiln__cpu_row(x, i1, i2, i3);
        float *out = (float *)kiln__cpu_row(a->dst, i1, i2, i3);
        for (int64_t i = 0; i < x->ne[0]; i++) out[i] = *(const float *)(xr + i * (int64_t)x->nb[0]);
    }
}

void kiln__cpu_cache_write(const kiln_cpu_args *a) {
    const kiln_tensor *x = a->dst->src[0], *cache = a->dst->src[1];
    const int32_t *idx = (const int32_t *)a->dst->src[2]->data;
    int64_t r0, r1;
    kiln__cpu_split(x->ne[1], a->ith, a->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        if (idx[r] < 0 || idx[r] >= cache->ne[1]) continue; /* a padding row (or a cell past the cache) */
        const char *xr = kiln__cpu_row(x, r, 0, 0);
        float *out = (float *)kiln__cpu_row(cache, idx[r], 0, 0);
        for (int64_t i = 0; i < x->ne[0]; i++) out[i] = *(const float *)(xr + i * (int64_t)x->nb[0]);
    }
}
