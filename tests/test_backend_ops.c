/*
 * test_backend_ops.c - every op each backend claims, checked against the CPU reference: for every op and
 * supported weight type, and a few odd shapes (rows that are not a multiple of a workgroup, broadcasts,
 * strided views, partial rotary, ids out of range, rows of -inf), build a one-node graph, run it through
 * the scheduler on each backend present with the CPU behind it, and compare its output with the CPU
 * alone's. Each run also checks that the backend under test took the node (one split, on it), so a
 * silent fallback to the CPU cannot pass.
 *
 * Attention here reads plain k and v inputs (F32 [D, Hkv, C], or F16/Q8_0 cache rows [Hkv * D, C]); in a
 * model it reads KV-cache views (test_vulkan.c covers that end to end, with the cache on the device).
 * cache_write's cache is put in a device buffer of its own, as a context's KV cache is, and its bytes are
 * compared exactly with the CPU's for F32, F16 (round to nearest even, done on the bits) and Q8_0 (the
 * same float steps: amax, d = amax / 127 and 1 / d correctly rounded, x * (1 / d), roundf; exact on any
 * device whose fma is fused and that keeps denormals, which lavapipe does).
 *
 * Backends: cpu-restricted (the CPU's own kernels: bit-exact), and vulkan:0 when a Vulkan device exists
 * (on this project's machines Mesa's lavapipe); without one the Vulkan cases are skipped with a message.
 * Tolerances, as max |got - ref| / max |ref| over the output: elementwise and get_rows 1e-6 (the same
 * float steps; exp/tanh may differ in the last bits), norms, softmax and F32/F16 matmul 1e-5 (shared-memory
 * tree sums instead of left-to-right), Q8_0/Q4_0/Q4_K/Q6_K matmul up to 8 columns 1e-4 (the same int8
 * activations and exact integer dots, but one of them may round an activation the other way where x * (1/d)
 * lands within an ulp of .5, and the per-block float terms are summed in another order), more columns
 * (mul_mm.comp: float activations) 1e-2 against the CPU and 1e-5 against float products (quantized_tiled), rope 2e-6 (the angle is the CPU's to
 * the bit: the frequencies come from the host, products are correctly rounded in Vulkan and the factor's
 * division is rounded correctly with a fused fma; sin and cos are rope.comp's own, within a few ulps, so an
 * output differs by at most ~2.4e-7 per term and two roundings: 1e-6, doubled; the driver's pow, sin and
 * cos would not do: one ulp of an angle of 511 radians is 3e-5), the unary functions of imported graphs 1e-6
 * (erf has no GLSL built-in: unary.comp's is Abramowitz-Stegun 7.1.26, |error| <= 1.5e-7, plus float
 * rounding; neg, not and round exact), attention over F16/Q8_0 rows 1e-5 (the same dequantized floats as
 * the CPU's, summed in another order). Measured on lavapipe: at most 4.7e-7 (printed per case). Where
 * the CPU multiplies F16 prefill in bf16 (AVX512-BF16), that case's tolerance is 1e-2 (device_tolerance).
 */
#include "harness.h"

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/core.h"
#include "graph/graph.h"
#include "runtime/sched.h"
#include "tensor/types.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LEAVES = 4 };

typedef struct bo_case {
    const char *name;
    kiln_op op;
    kiln_type wtype;    /* matmul/linear weight or get_rows table type */
    int64_t a[4], b[4]; /* the main input's and the second input's shapes */
    int variant;
    float tol; /* for a device; cpu-restricted must match exactly */
} bo_case;

/* The leaves' bytes, made once per case so every backend sees the same inputs. */
typedef struct bo_data {
    void *buf[MAX_LEAVES];
} bo_data;

static uint64_t rng_state;

static float rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* Leaf i of type t and shape ne (n dims), filled with values in [-1, 1) (quantized per row) on first use. */
static kiln_tensor *leaf(kiln_graph *g, bo_data *d, int i, kiln_type t, int n, const int64_t *ne,
                         uint32_t flags) {
    kiln_tensor *x = kiln__graph_leaf(g, NULL, t, n, ne, NULL, flags);
    if (!x) return NULL;
    kiln__tensor_set_name(x, "leaf%d", i);
    if (!d->buf[i]) {
        size_t bytes = kiln__tensor_nbytes(x);
        int64_t rows = kiln__tensor_nrows(x), k = x->ne[0];
        float *row = malloc((size_t)k * sizeof(float));
        d->buf[i] = calloc(1, bytes ? bytes : 1);
        rng_state = 1234u + 77u * (uint64_t)i;
        for (int64_t r = 0; r < rows && row && d->buf[i]; r++) {
            for (int64_t e = 0; e < k; e++)
                row[e] = rnd();
            CHECK_OK(kiln_quantize_row(t, row, (char *)d->buf[i] + (size_t)r * x->nb[1], k));
        }
        free(row);
    }
    x->data = d->buf[i];
    return x;
}

static kiln_tensor *ids_leaf(kiln_graph *g, bo_data *d, int i, int64_t n, int32_t R) {
    kiln_tensor *x = kiln__graph_leaf(g, "ids", KILN_TYPE_I32, 1, &n, NULL, KILN_TENSOR_INPUT);
    if (!x) return NULL;
    if (!d->buf[i]) {
        int32_t *v = d->buf[i] = malloc((size_t)n * sizeof *v);
        for (int64_t t = 0; t < n && v; t++)
            v[t] = (int32_t)((t * 7 + 3) % R);
        if (v && n > 2) v[n - 1] = R; /* out of range: zeros */
    }
    x->data = d->buf[i];
    return x;
}

static kiln_tensor *pos_leaf(kiln_graph *g, bo_data *d, int i, int64_t n) {
    static const int32_t pos[] = {0, 1, 2, 100, 511, 7, 33, 250};
    kiln_tensor *x = kiln__graph_leaf(g, "pos", KILN_TYPE_I32, 1, &n, NULL, KILN_TENSOR_INPUT);
    if (!x) return NULL;
    if (!d->buf[i]) {
        int32_t *v = d->buf[i] = malloc((size_t)n * sizeof *v);
        for (int64_t t = 0; t < n && v; t++)
            v[t] = pos[t % 8];
    }
    x->data = d->buf[i];
    return x;
}

static int dims(const int64_t *ne) {
    return ne[3] > 1 ? 4 : ne[2] > 1 ? 3 : ne[1] > 1 ? 2 : 1;
}

/* The case's one node. Inputs are flagged INPUT (copied into a device's arena); weights WEIGHT. */
static kiln_tensor *build(kiln_graph *g, const bo_case *c, bo_data *d) {
    const uint32_t in = KILN_TENSOR_INPUT, w = KILN_TENSOR_WEIGHT;
    kiln_tensor *a, *b;
    switch (c->op) {
    case KILN_OP_ADD:
    case KILN_OP_MUL:
    case KILN_OP_SUB:
    case KILN_OP_DIV:
    case KILN_OP_SWIGLU:
    case KILN_OP_ADD_ACT:
        if (c->variant == 1) { /* a strided source: the transpose of a [a1, a0] leaf */
            int64_t t[2] = {c->a[1], c->a[0]};
            a = kiln__transpose(g, leaf(g, d, 0, KILN_TYPE_F32, 2, t, in));
        } else if (c->variant == 5) { /* rows with gaps, at an offset, viewed out of a 1-D leaf */
            int64_t n = (c->a[0] + 2) * c->a[1] + 3;
            size_t nb[2] = {4, 4 * (size_t)(c->a[0] + 2)};
            a = kiln__view(g, leaf(g, d, 0, KILN_TYPE_F32, 1, &n, in), 2, c->a, nb, 12);
        } else {
            a = leaf(g, d, 0, KILN_TYPE_F32, dims(c->a), c->a, in);
        }
        bool fresh = !d->buf[1]; /* the case builds twice (CPU, backend): adjust its data once */
        b = leaf(g, d, 1, KILN_TYPE_F32, dims(c->b), c->b, c->variant == 2 ? w : in);
        if (c->op == KILN_OP_ADD) return kiln__add(g, a, b);
        if (c->op == KILN_OP_MUL) return kiln__mul(g, a, b);
        if (c->op == KILN_OP_SUB) return kiln__sub(g, a, b);
        if (c->op == KILN_OP_DIV) { /* divisors away from zero: 0.5 <= |y| < 1.5 */
            float *y = d->buf[1];
            for (int64_t e = 0; fresh && b && e < kiln__tensor_nelements(b); e++)
                y[e] = y[e] < 0.0f ? y[e] - 0.5f : y[e] + 0.5f;
            return kiln__div(g, a, b);
        }
        if (c->op == KILN_OP_SWIGLU) return kiln__swiglu(g, a, b);
        return kiln__add_act(g, a, b, c->variant >= 3 ? c->variant - 2 : KILN_ACT_SILU);
    case KILN_OP_SCALE:
    case KILN_OP_SILU:
    case KILN_OP_GELU:
    case KILN_OP_RELU:
    case KILN_OP_TANH:
    case KILN_OP_CONT:
        if (c->variant == 1) { /* the transpose of a [a1, a0] leaf (cont takes any layout) */
            int64_t t[2] = {c->a[1], c->a[0]};
            a = kiln__transpose(g, leaf(g, d, 0, KILN_TYPE_F32, 2, t, in));
        } else if (c->variant == 2) { /* rows with gaps, at an offset: every other row of a wider leaf */
            int64_t wide[2] = {2 * c->a[0] + 1, c->a[1]};
            size_t nb[2] = {4, 4 * (size_t)wide[0]};
            a = kiln__view(g, leaf(g, d, 0, KILN_TYPE_F32, 2, wide, in), 2, c->a, nb, 12);
        } else {
            a = leaf(g, d, 0, KILN_TYPE_F32, dims(c->a), c->a, in);
        }
        if (c->op == KILN_OP_SCALE) return kiln__scale(g, a, 1.7f, -0.25f);
        if (c->op == KILN_OP_SILU) return kiln__silu(g, a);
        if (c->op == KILN_OP_GELU) return kiln__gelu(g, a);
        if (c->op == KILN_OP_RELU) return kiln__relu(g, a);
        if (c->op == KILN_OP_TANH) return kiln__tanh(g, a);
        return kiln__cont(g, a);
    case KILN_OP_UNARY: { /* variant: the function; inputs in [-4, 4), positive for sqrt and log, no zero for
                           * the reciprocal, whole and half values for round and zeros for not */
        bool fresh_a = !d->buf[0]; /* the case builds twice (CPU, backend): adjust its data once */
        a = leaf(g, d, 0, KILN_TYPE_F32, dims(c->a), c->a, in);
        float *x = d->buf[0];
        for (int64_t e = 0; fresh_a && a && e < kiln__tensor_nelements(a); e++) {
            float v = x[e] * 4.0f;
            if (c->variant == KILN_UNARY_SQRT || c->variant == KILN_UNARY_LOG) v = fabsf(v) + 1e-3f;
            if (c->variant == KILN_UNARY_RECIP) v = v < 0.0f ? v - 0.5f : v + 0.5f;
            if (c->variant == KILN_UNARY_ROUND && e % 2) v = (float)(e % 9) - 4.5f;
            if (c->variant == KILN_UNARY_NOT && e % 3 == 0) v = 0.0f;
            x[e] = v;
        }
        return kiln__unary(g, a, c->variant);
    }
    case KILN_OP_RMS_NORM:
        return kiln__rms_norm(g, leaf(g, d, 0, KILN_TYPE_F32, dims(c->a), c->a, in), 1e-5f);
    case KILN_OP_NORM: return kiln__norm(g, leaf(g, d, 0, KILN_TYPE_F32, dims(c->a), c->a, in), 1e-5f);
    case KILN_OP_RMS_NORM_MUL:
        return kiln__rms_norm_mul(g, leaf(g, d, 0, KILN_TYPE_F32, dims(c->a), c->a, in),
                                  leaf(g, d, 1, KILN_TYPE_F32, dims(c->b), c->b, w), 1e-6f);
    case KILN_OP_SOFTMAX:
        a = leaf(g, d, 0, KILN_TYPE_F32, dims(c->a), c->a, in);
        if (a && c->variant == 1) { /* a masked row and a wholly hidden row */
            float *x = d->buf[0];
            for (int64_t i = 0; i < c->a[0]; i++) {
                if (i % 3) x[i] = -INFINITY;
                x[c->a[0] + i] = -INFINITY;
            }
        }
        return kiln__softmax(g, a, 0.7f);
    case KILN_OP_MATMUL:
    case KILN_OP_LINEAR:
        a = leaf(g, d, 0, c->wtype, dims(c->a), c->a, w);
        b = leaf(g, d, 1, KILN_TYPE_F32, dims(c->b), c->b, in);
        if (c->op == KILN_OP_MATMUL) return kiln__matmul(g, a, b);
        return kiln__linear(g, a, b, c->variant ? leaf(g, d, 2, KILN_TYPE_F32, 1, &c->a[1], w) : NULL, 0.5f,
                            c->variant ? KILN_ACT_GELU : KILN_ACT_SILU, 0);
    case KILN_OP_GET_ROWS:
        return kiln__get_rows(g, leaf(g, d, 0, c->wtype, 2, c->a, w),
                              ids_leaf(g, d, 1, c->b[0], (int32_t)c->a[1]));
    case KILN_OP_ROPE: {
        int32_t n_rot = (int32_t)(c->variant & 1 ? c->a[0] / 2 : c->a[0]);
        int64_t half = n_rot / 2;
        a = leaf(g, d, 0, KILN_TYPE_F32, 3, c->a, in);
        b = pos_leaf(g, d, 1, c->a[2]);
        kiln_tensor *f = c->variant & 4 ? leaf(g, d, 2, KILN_TYPE_F32, 1, &half, w) : NULL;
        if (f) {
            float *v = d->buf[2];
            for (int64_t i = 0; i < half; i++)
                v[i] = 1.0f + (float)i * 0.5f;
        }
        return kiln__rope_ext(g, a, b, f, n_rot, c->variant & 2 ? KILN_ROPE_NEOX : KILN_ROPE_NORMAL, 10000.0f,
                              1.0f);
    }
    case KILN_OP_CAST: return kiln__cast(g, leaf(g, d, 0, c->wtype, dims(c->a), c->a, in));
    case KILN_OP_CACHE_WRITE: { /* a = x [W, T] written to cells (3t + 1) % C of a cache [W, C]; row 1 padding.
                                 * The cells must be distinct, as a batch's are (kiln__cache_write): a device
                                 * writes rows in parallel, so two rows for one cell would race (with C = 9,
                                 * the odd-rows case once wrote cells 1 and 7 twice, and NVIDIA's order differed
                                 * from the CPU's). */
        for (int64_t t = 0; t < c->a[1]; t++)
            for (int64_t u = 0; u < t; u++)
                if (t != 1 && u != 1 && (3 * t + 1) % c->b[1] == (3 * u + 1) % c->b[1]) return NULL;
        int64_t cne[2] = {c->a[0], c->b[1]}, T = c->a[1];
        a = leaf(g, d, 0, KILN_TYPE_F32, 2, c->a, in);
        b = leaf(g, d, 1, c->wtype, 2, cne, KILN_TENSOR_CACHE);
        kiln_tensor *idx = kiln__graph_leaf(g, "cells", KILN_TYPE_I32, 1, &T, NULL, in);
        if (!idx) return NULL;
        if (!d->buf[2]) {
            int32_t *v = d->buf[2] = malloc((size_t)T * sizeof *v);
            for (int64_t t = 0; t < T && v; t++)
                v[t] = t == 1 ? -1 : (int32_t)((3 * t + 1) % c->b[1]);
        }
        idx->data = d->buf[2];
        if (a && c->variant == 1) { /* an element per block far from the others (a large amax), and -0 */
            float *x = d->buf[0];
            for (int64_t i = 0; i < c->a[0] * T; i += 37)
                x[i] = (float)(i % 5) * 3.7f - 7.0f;
            x[2] = -0.0f;
        }
        return kiln__cache_write(g, b, a, idx);
    }
    case KILN_OP_ATTENTION: { /* a = q [D, Hq, T], b = k and v [D, Hkv, C]; a causal mask, one row hidden */
        int64_t mne[2] = {c->b[2], c->a[2]}, rows[2] = {c->b[0] * c->b[1], c->b[2]};
        kiln_type kt = c->wtype; /* F32 [D, Hkv, C], or F16/Q8_0 cache rows [Hkv * D, C] */
        kiln_tensor *q = leaf(g, d, 0, KILN_TYPE_F32, 3, c->a, in),
                    *k = kt == KILN_TYPE_F32 ? leaf(g, d, 1, kt, 3, c->b, in) : leaf(g, d, 1, kt, 2, rows, in);
        kiln_tensor *v = kt == KILN_TYPE_F32 ? leaf(g, d, 2, kt, 3, c->b, in) : leaf(g, d, 2, kt, 2, rows, in),
                    *m = leaf(g, d, 3, KILN_TYPE_F32, 2, mne, in);
        float *mask = d->buf[3];
        if (c->variant == 2 && k && v) /* the last 5 cells unwritten (NaN) and hidden from every query */
            for (int64_t j = mne[0] - 5; j < mne[0]; j++) {
                memset((char *)k->data + (size_t)j * k->nb[kt == KILN_TYPE_F32 ? 2 : 1], 0xff,
                       kt == KILN_TYPE_F32 ? k->nb[2] : k->nb[1]);
                memset((char *)v->data + (size_t)j * v->nb[kt == KILN_TYPE_F32 ? 2 : 1], 0xff,
                       kt == KILN_TYPE_F32 ? v->nb[2] : v->nb[1]);
            }
        for (int64_t t = 0; mask && t < mne[1]; t++)
            for (int64_t j = 0; j < mne[0]; j++) {
                bool hidden = j > t + (mne[0] - mne[1]) || (c->variant == 1 && t == 1) ||
                              (c->variant == 2 && j >= mne[0] - 5);
                if (c->variant == 3) { /* two sequences in one batch: each query sees its own half, causally */
                    int64_t ht = mne[1] / 2, hc = mne[0] / 2, seq = t >= ht;
                    hidden = (j >= hc) != seq || j - seq * hc > t - seq * ht + (hc - ht);
                }
                if (hidden)
                    mask[t * mne[0] + j] = -INFINITY;
                else if (c->variant == 0)
                    mask[t * mne[0] + j] = 0.0f;
            }
        return kiln__attention(g, q, k, v, m, 0.35f);
    }
    default: return NULL;
    }
}

/* Run the case on list[0..n) (the CPU last); out gets the output's floats. Returns the backend index
 * that ran the node (-1 on failure). */
static int run_case(const bo_case *c, bo_data *d, const kiln_sched_backend *list, int n, float *out,
                    size_t cap, size_t *n_out) {
    kiln_graph *g = NULL;
    kiln_sched *s = NULL;
    kiln_sched_plan *p = NULL;
    kiln_buffer arenas[2] = {{0}}, cache = {0};
    int ran = -1;
    *n_out = 0;
    CHECK_OK(kiln__graph_create(64, &g));
    if (!g) return -1;
    kiln_tensor *node = build(g, c, d);
    if (!node) {
        harness_fail(__FILE__, __LINE__, "%s: the graph did not build: %s", c->name, kiln_last_error());
        goto done;
    }
    kiln__graph_set_output(g, node);
    /* A cache_write runs where its cache lives: on a device, the cache leaf goes into a buffer of its own
     * there (as a context's KV cache does), its bytes uploaded, and the result read back from it. */
    kiln_tensor *cleaf = node->op == KILN_OP_CACHE_WRITE ? node->src[1] : NULL;
    if (cleaf && !kiln__backend_is_host(list[0].backend)) {
        CHECK_OK(kiln__backend_buffer_alloc(list[0].backend, kiln__tensor_nbytes(cleaf), &cache));
        if (!cache.backend) goto done;
        CHECK_OK(cache.backend->iface->buffer_set(&cache, 0, cleaf->data, kiln__tensor_nbytes(cleaf)));
        cleaf->data = cache.base;
    }
    CHECK_OK(kiln__graph_order(g));
    CHECK_OK(kiln__sched_create(list, n, &s));
    CHECK_OK(kiln__sched_plan_create(s, g, 1 << 20, &p));
    if (!p) goto done;
    for (int b = 0; b < n; b++) {
        size_t need = kiln__sched_plan_arena_bytes(p, b);
        if (need) CHECK_OK(kiln__backend_buffer_alloc(list[b].backend, need, &arenas[b]));
    }
    CHECK_OK(kiln__sched_plan_commit(p, arenas));
    CHECK_OK(kiln__sched_compute(p));
    if (kiln__sched_plan_n_splits(p) == 1) ran = kiln__sched_plan_split_backend(p, 0);
    const kiln_tensor *o = kiln__sched_plan_output(p, 0);
    /* A cache_write's F16/Q8_0 bytes as float words, the last one zero-padded. */
    size_t bytes = kiln__tensor_nbytes(o);
    *n_out = (bytes + sizeof(float) - 1) / sizeof(float);
    if (*n_out == 0 || *n_out > cap) {
        *n_out = 0;
        goto done;
    }
    out[*n_out - 1] = 0.0f;
    if (cache.backend)
        CHECK_OK(cache.backend->iface->buffer_get(&cache, 0, out, bytes));
    else
        memcpy(out, o->data, bytes);
done:
    kiln__sched_plan_destroy(p);
    kiln__sched_destroy(s);
    for (int b = 0; b < n; b++)
        if (arenas[b].backend) kiln__backend_buffer_free(list[b].backend, &arenas[b]);
    kiln__graph_destroy(g);
    return ran;
}

static const bo_case cases[] = {
    {"add", KILN_OP_ADD, 0, {37, 5, 3, 1}, {37, 1, 3, 1}, 0, 1e-6f},
    {"add broadcast rows", KILN_OP_ADD, 0, {300, 4, 1, 1}, {1, 4, 1, 1}, 0, 1e-6f},
    {"add strided", KILN_OP_ADD, 0, {13, 9, 1, 1}, {13, 9, 1, 1}, 1, 1e-6f},
    {"add view of a 1-D leaf", KILN_OP_ADD, 0, {7, 3, 1, 1}, {7, 3, 1, 1}, 5, 1e-6f},
    {"mul weight", KILN_OP_MUL, 0, {64, 7, 1, 1}, {64, 1, 1, 1}, 2, 1e-6f},
    {"mul strided", KILN_OP_MUL, 0, {6, 11, 1, 1}, {6, 1, 1, 1}, 1, 1e-6f},
    {"swiglu", KILN_OP_SWIGLU, 0, {65, 7, 1, 1}, {65, 7, 1, 1}, 0, 1e-6f},
    {"add_act silu", KILN_OP_ADD_ACT, 0, {40, 3, 1, 1}, {40, 1, 1, 1}, 0, 1e-6f},
    {"add_act relu", KILN_OP_ADD_ACT, 0, {40, 3, 1, 1}, {40, 1, 1, 1}, 3, 1e-6f},
    {"add_act gelu", KILN_OP_ADD_ACT, 0, {40, 3, 1, 1}, {40, 1, 1, 1}, 4, 1e-6f},
    {"scale", KILN_OP_SCALE, 0, {33, 7, 2, 1}, {0}, 0, 1e-6f},
    {"silu", KILN_OP_SILU, 0, {33, 7, 2, 1}, {0}, 0, 1e-6f},
    {"gelu", KILN_OP_GELU, 0, {1000, 3, 1, 1}, {0}, 0, 1e-6f},
    {"relu rows with gaps", KILN_OP_RELU, 0, {9, 5, 1, 1}, {0}, 2, 1e-6f},
    {"silu rows with gaps", KILN_OP_SILU, 0, {31, 4, 1, 1}, {0}, 2, 1e-6f},
    {"tanh", KILN_OP_TANH, 0, {33, 7, 1, 1}, {0}, 0, 1e-6f},
    {"sub broadcast", KILN_OP_SUB, 0, {37, 5, 3, 1}, {37, 1, 3, 1}, 0, 1e-6f},
    {"sub strided", KILN_OP_SUB, 0, {13, 9, 1, 1}, {13, 9, 1, 1}, 1, 1e-6f},
    {"div broadcast", KILN_OP_DIV, 0, {40, 6, 1, 1}, {40, 1, 1, 1}, 0, 1e-6f},
    {"unary sigmoid", KILN_OP_UNARY, 0, {65, 7, 1, 1}, {0}, KILN_UNARY_SIGMOID, 1e-6f},
    {"unary erf", KILN_OP_UNARY, 0, {65, 7, 1, 1}, {0}, KILN_UNARY_ERF, 1e-6f},
    {"unary sqrt", KILN_OP_UNARY, 0, {65, 7, 1, 1}, {0}, KILN_UNARY_SQRT, 1e-6f},
    {"unary exp", KILN_OP_UNARY, 0, {65, 7, 1, 1}, {0}, KILN_UNARY_EXP, 1e-6f},
    {"unary log", KILN_OP_UNARY, 0, {65, 7, 1, 1}, {0}, KILN_UNARY_LOG, 1e-6f},
    {"unary neg", KILN_OP_UNARY, 0, {65, 7, 1, 1}, {0}, KILN_UNARY_NEG, 0.0f},
    {"unary reciprocal", KILN_OP_UNARY, 0, {65, 7, 1, 1}, {0}, KILN_UNARY_RECIP, 1e-6f},
    {"unary gelu erf", KILN_OP_UNARY, 0, {65, 7, 1, 1}, {0}, KILN_UNARY_GELU_ERF, 1e-6f},
    {"unary not", KILN_OP_UNARY, 0, {65, 7, 1, 1}, {0}, KILN_UNARY_NOT, 0.0f},
    {"unary round", KILN_OP_UNARY, 0, {65, 7, 1, 1}, {0}, KILN_UNARY_ROUND, 0.0f},
    {"cont of a transpose", KILN_OP_CONT, 0, {13, 9, 1, 1}, {0}, 1, 0.0f},
    {"rms_norm", KILN_OP_RMS_NORM, 0, {100, 6, 1, 1}, {0}, 0, 1e-5f},
    {"rms_norm long rows", KILN_OP_RMS_NORM, 0, {1000, 3, 2, 1}, {0}, 0, 1e-5f},
    {"norm", KILN_OP_NORM, 0, {257, 5, 1, 1}, {0}, 0, 1e-5f},
    {"rms_norm_mul", KILN_OP_RMS_NORM_MUL, 0, {64, 5, 1, 1}, {64, 1, 1, 1}, 0, 1e-5f},
    {"softmax", KILN_OP_SOFTMAX, 0, {70, 5, 1, 1}, {0}, 0, 1e-5f},
    {"softmax -inf rows", KILN_OP_SOFTMAX, 0, {70, 5, 1, 1}, {0}, 1, 1e-5f},
    {"matmul f32", KILN_OP_MATMUL, KILN_TYPE_F32, {64, 33, 1, 1}, {64, 5, 1, 1}, 0, 1e-5f},
    {"matmul f32 odd K", KILN_OP_MATMUL, KILN_TYPE_F32, {77, 10, 1, 1}, {77, 3, 1, 1}, 0, 1e-5f},
    {"matmul f32 batched", KILN_OP_MATMUL, KILN_TYPE_F32, {32, 8, 2, 1}, {32, 3, 4, 1}, 0, 1e-5f},
    {"matmul f16", KILN_OP_MATMUL, KILN_TYPE_F16, {96, 17, 1, 1}, {96, 3, 1, 1}, 0, 1e-5f},
    {"matmul f16 prefill", KILN_OP_MATMUL, KILN_TYPE_F16, {96, 17, 1, 1}, {96, 9, 1, 1}, 0, 1e-5f},
    {"matmul q8_0", KILN_OP_MATMUL, KILN_TYPE_Q8_0, {128, 19, 1, 1}, {128, 3, 1, 1}, 0, 1e-4f},
    {"matmul q4_0", KILN_OP_MATMUL, KILN_TYPE_Q4_0, {256, 10, 1, 1}, {256, 4, 1, 1}, 0, 1e-4f},
    {"matmul q4_k", KILN_OP_MATMUL, KILN_TYPE_Q4_K, {512, 13, 1, 1}, {512, 3, 1, 1}, 0, 1e-4f},
    {"matmul q4_k batched", KILN_OP_MATMUL, KILN_TYPE_Q4_K, {256, 6, 2, 1}, {256, 3, 4, 1}, 0, 1e-4f},
    {"matmul q6_k", KILN_OP_MATMUL, KILN_TYPE_Q6_K, {768, 11, 1, 1}, {768, 5, 1, 1}, 0, 1e-4f},
    {"matmul q6_k decode", KILN_OP_MATMUL, KILN_TYPE_Q6_K, {256, 70, 1, 1}, {256, 1, 1, 1}, 0, 1e-4f},
    /* mul_mv.comp: one column (decode) and small batches up to its 8 columns per workgroup; rows not a
     * multiple of its 2 per workgroup, F16 rows of odd length (words straddling rows). */
    {"matmul f32 decode", KILN_OP_MATMUL, KILN_TYPE_F32, {130, 31, 1, 1}, {130, 1, 1, 1}, 0, 1e-5f},
    {"matmul f16 decode", KILN_OP_MATMUL, KILN_TYPE_F16, {200, 65, 1, 1}, {200, 1, 1, 1}, 0, 1e-5f},
    {"matmul f16 odd K batch 3", KILN_OP_MATMUL, KILN_TYPE_F16, {77, 9, 1, 1}, {77, 3, 1, 1}, 0, 1e-5f},
    {"matmul q8_0 decode", KILN_OP_MATMUL, KILN_TYPE_Q8_0, {512, 33, 1, 1}, {512, 1, 1, 1}, 0, 1e-4f},
    {"matmul q4_0 decode", KILN_OP_MATMUL, KILN_TYPE_Q4_0, {2560, 7, 1, 1}, {2560, 1, 1, 1}, 0, 1e-4f},
    {"matmul q4_k decode", KILN_OP_MATMUL, KILN_TYPE_Q4_K, {512, 37, 1, 1}, {512, 1, 1, 1}, 0, 1e-4f},
    {"matmul q4_0 batch 5", KILN_OP_MATMUL, KILN_TYPE_Q4_0, {256, 19, 1, 1}, {256, 5, 1, 1}, 0, 1e-4f},
    {"matmul q6_k batch 8", KILN_OP_MATMUL, KILN_TYPE_Q6_K, {256, 17, 1, 1}, {256, 8, 1, 1}, 0, 1e-4f},
    /* mul_mm.comp: 64 x 64 tiles, with edges in both directions, batches broadcast over the weight. */
    {"matmul f32 tiled odd K", KILN_OP_MATMUL, KILN_TYPE_F32, {77, 70, 1, 1}, {77, 40, 1, 1}, 0, 1e-5f},
    {"matmul f16 tiled", KILN_OP_MATMUL, KILN_TYPE_F16, {96, 129, 1, 1}, {96, 66, 1, 1}, 0, 1e-5f},
    {"matmul q8_0 tiled", KILN_OP_MATMUL, KILN_TYPE_Q8_0, {128, 100, 1, 1}, {128, 70, 1, 1}, 0, 1e-4f},
    {"matmul q4_0 tiled", KILN_OP_MATMUL, KILN_TYPE_Q4_0, {64, 130, 1, 1}, {64, 65, 1, 1}, 0, 1e-4f},
    {"matmul q4_k tiled", KILN_OP_MATMUL, KILN_TYPE_Q4_K, {256, 70, 1, 1}, {256, 33, 1, 1}, 0, 1e-4f},
    {"matmul q6_k tiled", KILN_OP_MATMUL, KILN_TYPE_Q6_K, {256, 65, 1, 1}, {256, 20, 1, 1}, 0, 1e-4f},
    {"matmul q4_k batched tiled", KILN_OP_MATMUL, KILN_TYPE_Q4_K, {256, 6, 2, 1}, {256, 12, 4, 1}, 0, 1e-4f},
    {"linear q4_0 tiled bias gelu", KILN_OP_LINEAR, KILN_TYPE_Q4_0, {128, 70, 1, 1}, {128, 20, 1, 1}, 1, 1e-4f},
    {"linear q4_k bias gelu", KILN_OP_LINEAR, KILN_TYPE_Q4_K, {256, 12, 1, 1}, {256, 5, 1, 1}, 1, 1e-4f},
    {"linear q6_k silu", KILN_OP_LINEAR, KILN_TYPE_Q6_K, {512, 9, 1, 1}, {512, 2, 1, 1}, 0, 1e-4f},
    {"linear f32 bias gelu", KILN_OP_LINEAR, KILN_TYPE_F32, {48, 12, 1, 1}, {48, 5, 1, 1}, 1, 1e-5f},
    {"linear q8_0 silu", KILN_OP_LINEAR, KILN_TYPE_Q8_0, {64, 9, 1, 1}, {64, 2, 1, 1}, 0, 1e-4f},
    {"get_rows f32", KILN_OP_GET_ROWS, KILN_TYPE_F32, {64, 20, 1, 1}, {7, 1, 1, 1}, 0, 1e-6f},
    {"get_rows f16", KILN_OP_GET_ROWS, KILN_TYPE_F16, {64, 20, 1, 1}, {7, 1, 1, 1}, 0, 1e-6f},
    {"get_rows q8_0", KILN_OP_GET_ROWS, KILN_TYPE_Q8_0, {96, 20, 1, 1}, {5, 1, 1, 1}, 0, 1e-6f},
    {"get_rows q4_0", KILN_OP_GET_ROWS, KILN_TYPE_Q4_0, {64, 20, 1, 1}, {9, 1, 1, 1}, 0, 1e-6f},
    {"get_rows q4_k", KILN_OP_GET_ROWS, KILN_TYPE_Q4_K, {512, 20, 1, 1}, {7, 1, 1, 1}, 0, 1e-6f},
    {"get_rows q6_k", KILN_OP_GET_ROWS, KILN_TYPE_Q6_K, {256, 20, 1, 1}, {9, 1, 1, 1}, 0, 1e-6f},
    {"attention gqa causal", KILN_OP_ATTENTION, 0, {16, 4, 5, 1}, {16, 2, 9, 1}, 0, 1e-5f},
    {"attention long, bias mask", KILN_OP_ATTENTION, 0, {8, 8, 3, 1}, {8, 8, 200, 1}, 1, 1e-5f},
    {"attention f16 cache gqa", KILN_OP_ATTENTION, KILN_TYPE_F16, {16, 4, 5, 1}, {16, 2, 9, 1}, 0, 1e-5f},
    {"attention f16 cache long", KILN_OP_ATTENTION, KILN_TYPE_F16, {8, 8, 3, 1}, {8, 4, 200, 1}, 1, 1e-5f},
    {"attention q8_0 cache gqa", KILN_OP_ATTENTION, KILN_TYPE_Q8_0, {32, 4, 5, 1}, {32, 2, 9, 1}, 0, 1e-5f},
    {"attention q8_0 head 8", KILN_OP_ATTENTION, KILN_TYPE_Q8_0, {8, 8, 3, 1}, {8, 4, 70, 1}, 1, 1e-5f},
    /* Flash attention: more cells than one chunk of 64 and than the old 4096-cell shared-memory limit,
     * head sizes up to its 256. */
    {"attention q8_0 5000 cells", KILN_OP_ATTENTION, KILN_TYPE_Q8_0, {64, 4, 2, 1}, {64, 2, 5000, 1}, 1, 1e-5f},
    {"attention f16 head 128", KILN_OP_ATTENTION, KILN_TYPE_F16, {128, 8, 3, 1}, {128, 2, 300, 1}, 0, 1e-5f},
    {"attention f32 head 256", KILN_OP_ATTENTION, 0, {256, 2, 2, 1}, {256, 1, 70, 1}, 0, 1e-5f},
    /* Prefill (8 or more queries, head size a multiple of 4 up to 128): attention_tile.comp, 16 queries by
     * 32 cells a tile, with edges both ways, tiles hidden from every query of a workgroup (skipped), a
     * wholly hidden query, GQA groups of 1 to 3. */
    {"attention tiled causal gqa", KILN_OP_ATTENTION, 0, {64, 4, 40, 1}, {64, 2, 70, 1}, 0, 1e-5f},
    {"attention tiled f16 head 128", KILN_OP_ATTENTION, KILN_TYPE_F16, {128, 8, 20, 1}, {128, 2, 100, 1}, 1, 1e-5f},
    {"attention tiled q8_0 square", KILN_OP_ATTENTION, KILN_TYPE_Q8_0, {32, 4, 33, 1}, {32, 4, 33, 1}, 0, 1e-5f},
    {"attention tiled head 96 group 3", KILN_OP_ATTENTION, 0, {96, 3, 17, 1}, {96, 1, 45, 1}, 1, 1e-5f},
    {"attention tiled 8 queries", KILN_OP_ATTENTION, KILN_TYPE_F16, {64, 2, 8, 1}, {64, 2, 8, 1}, 0, 1e-5f},
    /* Two sequences sharing a batch (the runtime's mask for several sequences): block-diagonal, causal. */
    {"attention tiled two sequences", KILN_OP_ATTENTION, KILN_TYPE_F16, {64, 4, 40, 1}, {64, 2, 72, 1}, 3, 1e-5f},
    {"attention two sequences", KILN_OP_ATTENTION, 0, {32, 2, 6, 1}, {32, 2, 20, 1}, 3, 1e-5f},
    /* Cells no query sees may hold anything, NaN included (an unwritten cache): never read into a sum. */
    {"attention unwritten cells", KILN_OP_ATTENTION, KILN_TYPE_F16, {16, 4, 3, 1}, {16, 2, 80, 1}, 2, 1e-5f},
    {"attention tiled unwritten cells", KILN_OP_ATTENTION, 0, {64, 4, 20, 1}, {64, 2, 60, 1}, 2, 1e-5f},
    {"attention tiled q8_0 unwritten", KILN_OP_ATTENTION, KILN_TYPE_Q8_0, {32, 2, 16, 1}, {32, 2, 40, 1}, 2, 1e-5f},
    {"cast f16", KILN_OP_CAST, KILN_TYPE_F16, {24, 7, 2, 1}, {0}, 0, 1e-6f},
    {"cast q8_0", KILN_OP_CAST, KILN_TYPE_Q8_0, {64, 9, 1, 1}, {0}, 0, 1e-6f},
    {"cache_write f32", KILN_OP_CACHE_WRITE, KILN_TYPE_F32, {24, 5, 1, 1}, {0, 16, 1, 1}, 0, 0.0f},
    {"cache_write f16", KILN_OP_CACHE_WRITE, KILN_TYPE_F16, {26, 5, 1, 1}, {0, 16, 1, 1}, 1, 0.0f},
    {"cache_write f16 odd rows", KILN_OP_CACHE_WRITE, KILN_TYPE_F16, {7, 6, 1, 1}, {0, 13, 1, 1}, 0, 0.0f},
    {"cache_write q8_0", KILN_OP_CACHE_WRITE, KILN_TYPE_Q8_0, {64, 5, 1, 1}, {0, 16, 1, 1}, 1, 0.0f},
    {"cache_write q8_0 one block", KILN_OP_CACHE_WRITE, KILN_TYPE_Q8_0, {32, 7, 1, 1}, {0, 11, 1, 1}, 0, 0.0f},
    {"rope normal", KILN_OP_ROPE, 0, {16, 4, 8, 1}, {0}, 0, 2e-6f},
    {"rope neox partial", KILN_OP_ROPE, 0, {16, 3, 6, 1}, {0}, 3, 2e-6f},
    {"rope neox factors", KILN_OP_ROPE, 0, {8, 2, 8, 1}, {0}, 6, 2e-6f},
};

static double rel_err(const float *got, const float *ref, size_t n) {
    double worst = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)ref[i]);
        if (isnan(got[i]) != isnan(ref[i])) return INFINITY;
        if (e > worst) worst = e;
        if (fabs((double)ref[i]) > mag) mag = fabs((double)ref[i]);
    }
    return mag > 0.0 ? worst / mag : worst;
}

enum { OUT_CAP = 1 << 16 };
static float ref_out[OUT_CAP], got_out[OUT_CAP];
static kiln_backend *cpu, *vulkan;

static void check_backend(const bo_case *c, bo_data *d, kiln_backend *dev, float tol, const char *label) {
    kiln_sched_backend list[2] = {{dev, 0}, {cpu, 0}};
    size_t n_ref = 0, n_got = 0;
    int ran;
    run_case(c, d, &list[1], 1, ref_out, OUT_CAP, &n_ref);
    ran = run_case(c, d, list, 2, got_out, OUT_CAP, &n_got);
    if (ran != 0) {
        harness_fail(__FILE__, __LINE__, "%s: %s did not run the node alone (split backend %d)", c->name,
                     label, ran);
        return;
    }
    CHECK_EQ_INT(n_got, n_ref);
    if (c->op == KILN_OP_CACHE_WRITE) { /* the cache's bytes: exact */
        if (n_got == n_ref && memcmp(got_out, ref_out, n_ref * sizeof(float)))
            harness_fail(__FILE__, __LINE__, "%s on %s: the cache's bytes differ from the CPU's", c->name, label);
        printf("  %-8s %-24s %zu bytes compared, exact\n", label, c->name, n_ref * sizeof(float));
        return;
    }
    double err = rel_err(got_out, ref_out, n_ref);
    if (tol > 0.0f) printf("  %-8s %-24s error %.2g (tolerance %.0g)\n", label, c->name, err, tol);
    if (!(err <= tol))
        harness_fail(__FILE__, __LINE__, "%s on %s: error %.3g over tolerance %.3g", c->name, label, err,
                     tol);
}

static void every_op_on_the_restricted_cpu_backend_matches_the_cpu_bit_for_bit(void) {
    for (size_t i = 0; i < KILN__ARRAY_LEN(cases); i++) {
        bo_data d = {{0}};
        kiln_backend *r = NULL;
        if (cases[i].op == KILN_OP_CACHE_WRITE) continue; /* runs where its cache lives: a host one on the CPU */
        CHECK_OK(kiln__backend_cpu_restricted_create(1, &cases[i].op, 1, &r));
        if (r) check_backend(&cases[i], &d, r, 0.0f, "cpu-restricted");
        kiln__backend_destroy(r);
        for (int k = 0; k < MAX_LEAVES; k++)
            free(d.buf[k]);
    }
}

/* A quantized matmul of more columns than mul_mv.comp takes (8): the tiled mul_mm.comp multiplies the
 * dequantized weights by the float activations (as llama.cpp's Vulkan prefill does), where the CPU rounds
 * each activation to int8 first, by up to half its block's step (max |x| / 254), so the two differ by the
 * sum of w times those roundings: 1e-2 of max |ref| against the CPU (measured 3.4e-3 to 4.5e-3 on these
 * random cases), and the device is checked tightly against float products of its own (below). */
static bool quantized_tiled(const bo_case *c) {
    return (c->op == KILN_OP_MATMUL || c->op == KILN_OP_LINEAR) && c->wtype != KILN_TYPE_F32 &&
           c->wtype != KILN_TYPE_F16 && c->b[1] > 8;
}

/* A case's tolerance against this CPU: an F16/BF16 matmul of 4 or more columns, which the CPU multiplies
 * in bf16 where it has AVX512-BF16 (test_kernels_f16.c), differs from a device's float products by up
 * to 2^-7 of sum|w x|; 1e-2 of max |ref| covers these random cases (measured 2.1e-3 on lavapipe). */
static float device_tolerance(const bo_case *c) {
    bool half = c->wtype == KILN_TYPE_F16 || c->wtype == KILN_TYPE_BF16;
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    if (c->op == KILN_OP_MATMUL && half && c->b[1] >= 4 && isa->bf16_prefill && isa->mm_packed_bf16[c->wtype])
        return 1e-2f;
    if (quantized_tiled(c)) return 1e-2f;
    return c->tol;
}

static void every_op_on(kiln_backend *dev, const char *label) {
    for (size_t i = 0; i < KILN__ARRAY_LEN(cases); i++) {
        bo_data d = {{0}};
        check_backend(&cases[i], &d, dev, device_tolerance(&cases[i]), label);
        for (int k = 0; k < MAX_LEAVES; k++)
            free(d.buf[k]);
    }
}

/* The device's own reduction variant (subgroup arithmetic where it has it), then the shared-memory one
 * forced by the test hook, each against the CPU at the same tolerances. */
static void every_op_on_vulkan_matches_the_cpu_within_its_tolerance_in_both_reduction_variants(void) {
    kiln_device_info info;
    kiln_backend *portable = NULL;
    if (!vulkan) {
        printf("  skipped: no Vulkan device (%s)\n", kiln_devices_note() ? kiln_devices_note() : "none");
        return;
    }
    CHECK_OK(kiln_device_get(0, &info));
    const char *variant = info.subgroup_arithmetic ? "subgroup reductions)" : "shared-memory reductions)";
    printf("  %s\n", kiln__backend_describe(vulkan));
    CHECK(strstr(kiln__backend_describe(vulkan), variant) != NULL);
    every_op_on(vulkan, info.subgroup_arithmetic ? "vk-sub" : "vk-shm");
    if (!info.subgroup_arithmetic) printf("  no subgroup arithmetic on this device: one variant only\n");
    const kiln_vulkan_test_hooks hooks = {.portable_reduce = true};
    kiln__vulkan_set_test_hooks(&hooks);
    CHECK_OK(kiln__backend_vulkan_create(0, &portable));
    kiln__vulkan_set_test_hooks(NULL);
    if (!portable) return;
    CHECK(strstr(kiln__backend_describe(portable), "shared-memory reductions)") != NULL);
    every_op_on(portable, "vk-shm");
    kiln__backend_destroy(portable);
}

/* The tiled quantized matmuls against the same products done here in double: the weight rows
 * dequantized (kiln__dequantize_row, the CPU's own dequantizer), times the float activations, each
 * weight matrix broadcast over the batch. The device sums 32-element steps in float, in its own order:
 * 1e-5 of max |ref|, as for the F32 tiles. */
static void quantized_prefill_on_vulkan_matches_float_products_of_the_dequantized_weights(void) {
    int checked = 0;
    if (!vulkan) {
        printf("  skipped: no Vulkan device\n");
        return;
    }
    for (size_t i = 0; i < KILN__ARRAY_LEN(cases); i++) {
        const bo_case *c = &cases[i];
        if (c->op != KILN_OP_MATMUL || !quantized_tiled(c)) continue;
        bo_data d = {{0}};
        kiln_sched_backend list[2] = {{vulkan, 0}, {cpu, 0}};
        size_t n_got = 0;
        int64_t K = c->a[0], N = c->a[1], M = c->b[1], B = c->b[2], Bw = c->a[2];
        const kiln_type_traits *tt = kiln__type_traits(c->wtype);
        size_t row_bytes = (size_t)(K / tt->block_elems) * tt->block_bytes;
        CHECK_EQ_INT(run_case(c, &d, list, 2, got_out, OUT_CAP, &n_got), 0);
        CHECK_EQ_INT(n_got, (size_t)(N * M * B));
        float *w = malloc((size_t)(K * N * Bw) * sizeof *w);
        const float *x = d.buf[1];
        CHECK(w != NULL && x != NULL);
        for (int64_t r = 0; w && x && r < N * Bw; r++)
            kiln__dequantize_row(c->wtype, (const char *)d.buf[0] + (size_t)r * row_bytes, w + r * K, K);
        for (int64_t b = 0; w && x && b < B; b++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    double sum = 0.0;
                    const float *wr = w + ((b / (B / Bw)) * N + n) * K, *xr = x + (b * M + m) * K;
                    for (int64_t k = 0; k < K; k++) sum += (double)wr[k] * xr[k];
                    ref_out[(b * M + m) * N + n] = (float)sum;
                }
        double err = rel_err(got_out, ref_out, (size_t)(N * M * B));
        printf("  %-32s error %.2g against float products (tolerance 1e-05)\n", c->name, err);
        CHECK(err <= 1e-5);
        checked++;
        free(w);
        for (int k = 0; k < MAX_LEAVES; k++)
            free(d.buf[k]);
    }
    CHECK(checked >= 5); /* every quantized type, and a batch */
}

int main(void) {
    CHECK_OK(kiln__backend_cpu_create(1, &cpu));
    if (kiln__backend_vulkan_create(0, &vulkan) != KILN_OK) vulkan = NULL;
    RUN(every_op_on_the_restricted_cpu_backend_matches_the_cpu_bit_for_bit);
    RUN(every_op_on_vulkan_matches_the_cpu_within_its_tolerance_in_both_reduction_variants);
    RUN(quantized_prefill_on_vulkan_matches_float_products_of_the_dequantized_weights);
    kiln__backend_destroy(vulkan);
    kiln__backend_destroy(cpu);
    return harness_finish();
}
