/*
 * test_ops.c - every graph op, run through the CPU backend, against a plain double-precision reference
 * written here, on random inputs with odd sizes, with 1, 2 and 3 threads. Results must be identical
 * across thread counts (bit for bit) and within the stated tolerance of the reference.
 */
#include "harness.h"
#include "graph_run.h"

#include "core/core.h"

#include "tensor/types.h"

#include <math.h>
#include <stdlib.h>

#define TOL 1e-5

/* Compare n floats against a double reference: |got - ref| <= tol * max(1, |ref|). */
static void check_close(const float *got, const double *ref, size_t n, double tol, const char *what) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]);
        if (!(err <= tol * fmax(1.0, fabs(ref[i])))) {
            if (!bad) harness_fail(__FILE__, __LINE__, "%s: element %zu is %.9g, reference %.9g", what, i, got[i], ref[i]);
            bad++;
        }
    }
}

/* Build with `build`, run with 1, 2, 3 threads, check thread-count invariance, return the 1-thread
 * result copied into out (n floats). */
typedef kiln_tensor *(*builder)(kiln_graph *g, void *user);

static void run_all_threads(builder build, void *user, float *out, size_t n) {
    for (int nth = 1; nth <= 3; nth++) {
        kiln_graph *g;
        kiln_status s;
        CHECK_OK(kiln__graph_create(64, &g));
        kiln_tensor *t = build(g, user);
        CHECK_OK(kiln__graph_status(g));
        if (!t) {
            kiln__graph_destroy(g);
            return;
        }
        CHECK_EQ_INT(kiln__tensor_nelements(t), n);
        kiln__graph_set_output(g, t);
        void *arena = graph_run(g, nth, &s);
        CHECK_OK(s);
        if (arena) {
            if (nth == 1) memcpy(out, t->data, n * sizeof(float));
            else if (memcmp(out, t->data, n * sizeof(float)) != 0)
                harness_fail(__FILE__, __LINE__, "result with %d threads differs from 1 thread", nth);
        }
        free(arena);
        kiln__graph_destroy(g);
    }
}

static kiln_tensor *leaf_f32(kiln_graph *g, const char *name, int nd, int64_t a, int64_t b, int64_t c, int64_t d,
                             float *data) {
    int64_t ne[4] = {a, b, c, d};
    return kiln__graph_leaf(g, name, KILN_TYPE_F32, nd, ne, data, 0);
}

/* ---- rms_norm, silu, softmax ---- */
typedef struct unary_case {
    float x[37 * 5 * 3];
    int op;
} unary_case;

static kiln_tensor *build_unary(kiln_graph *g, void *user) {
    unary_case *u = user;
    kiln_tensor *x = leaf_f32(g, "x", 3, 37, 5, 3, 1, u->x);
    if (u->op == 0) return kiln__rms_norm(g, x, 1e-5f);
    if (u->op == 1) return kiln__silu(g, x);
    return kiln__softmax(g, x, 0.7f);
}

static void rms_norm_silu_and_softmax_match_the_reference(void) {
    static unary_case u;
    static float out[37 * 5 * 3];
    static double ref[37 * 5 * 3];
    fill_random(u.x, 37 * 5 * 3, 1);
    for (int op = 0; op < 3; op++) {
        u.op = op;
        run_all_threads(build_unary, &u, out, 37 * 5 * 3);
        for (int r = 0; r < 15; r++) {
            const float *x = u.x + r * 37;
            double *y = ref + r * 37, ss = 0, mx = -INFINITY, sum = 0;
            for (int i = 0; i < 37; i++) ss += (double)x[i] * x[i];
            for (int i = 0; i < 37; i++) mx = fmax(mx, 0.7 * x[i]);
            for (int i = 0; i < 37; i++) sum += exp(0.7 * x[i] - mx);
            for (int i = 0; i < 37; i++) {
                if (op == 0) y[i] = x[i] / sqrt(ss / 37 + 1e-5);
                else if (op == 1) y[i] = x[i] / (1 + exp(-(double)x[i]));
                else y[i] = exp(0.7 * x[i] - mx) / sum;
            }
        }
        check_close(out, ref, 37 * 5 * 3, TOL, op == 0 ? "rms_norm" : op == 1 ? "silu" : "softmax");
    }
}

/* A row that is all -inf (the scores of a query that may see no key) gives zeros, not NaN; a row with
 * one finite entry gives a one-hot row. */
static kiln_tensor *build_softmax_masked(kiln_graph *g, void *user) {
    return kiln__softmax(g, leaf_f32(g, "x", 2, 5, 3, 1, 1, user), 1.0f);
}

static void softmax_of_a_row_that_is_all_minus_infinity_is_zeros(void) {
    static float x[15], out[15];
    static double ref[15];
    for (int i = 0; i < 15; i++) x[i] = i < 5 ? -INFINITY : i < 10 ? (i == 7 ? 0.5f : -INFINITY) : 0.1f * (float)i;
    run_all_threads(build_softmax_masked, x, out, 15);
    for (int i = 0; i < 15; i++) ref[i] = i < 5 ? 0.0 : i < 10 ? (i == 7 ? 1.0 : 0.0) : 0.0;
    double sum = 0;
    for (int i = 10; i < 15; i++) sum += exp(0.1 * i);
    for (int i = 10; i < 15; i++) ref[i] = exp(0.1 * i) / sum;
    check_close(out, ref, 15, TOL, "softmax of masked rows");
    for (int i = 0; i < 5; i++) CHECK(out[i] == 0.0f);
}

/* ---- add and mul with broadcasting ---- */
typedef struct binary_case {
    float a[13 * 7 * 3 * 2], b[13 * 7 * 3 * 2];
    int64_t bne[4];
    bool mul;
} binary_case;

static kiln_tensor *build_binary(kiln_graph *g, void *user) {
    binary_case *c = user;
    kiln_tensor *a = leaf_f32(g, "a", 4, 13, 7, 3, 2, c->a);
    kiln_tensor *b = leaf_f32(g, "b", 4, c->bne[0], c->bne[1], c->bne[2], c->bne[3], c->b);
    return c->mul ? kiln__mul(g, a, b) : kiln__add(g, a, b);
}

static void add_and_mul_broadcast_the_second_operand(void) {
    static binary_case c;
    static float out[13 * 7 * 3 * 2];
    static double ref[13 * 7 * 3 * 2];
    static const int64_t shapes[4][4] = {{13, 7, 3, 2}, {13, 1, 3, 1}, {1, 7, 1, 1}, {13, 1, 1, 1}};
    fill_random(c.a, sizeof c.a / sizeof c.a[0], 2);
    fill_random(c.b, sizeof c.b / sizeof c.b[0], 3);
    for (int k = 0; k < 8; k++) {
        memcpy(c.bne, shapes[k % 4], sizeof c.bne);
        c.mul = k >= 4;
        run_all_threads(build_binary, &c, out, 13 * 7 * 3 * 2);
        for (int i3 = 0; i3 < 2; i3++)
            for (int i2 = 0; i2 < 3; i2++)
                for (int i1 = 0; i1 < 7; i1++)
                    for (int i0 = 0; i0 < 13; i0++) {
                        int ia = ((i3 * 3 + i2) * 7 + i1) * 13 + i0;
                        int ib = (((i3 % (int)c.bne[3]) * (int)c.bne[2] + i2 % (int)c.bne[2]) * (int)c.bne[1] +
                                  i1 % (int)c.bne[1]) * (int)c.bne[0] + i0 % (int)c.bne[0];
                        ref[ia] = c.mul ? (double)c.a[ia] * c.b[ib] : (double)c.a[ia] + c.b[ib];
                    }
        check_close(out, ref, 13 * 7 * 3 * 2, TOL, c.mul ? "mul" : "add");
    }
}

/* ---- matmul for every supported weight type ---- */
#define MK 64
#define MN 13
#define MM 5

typedef struct matmul_case {
    kiln_type type;
    int64_t k;
    unsigned char w[MK * MN * 2 * 4]; /* raw weight bytes, [K, N, 2] */
    float x[MK * MM * 4];             /* [K, M, 4]: the weight's 2 batches broadcast over 4 */
} matmul_case;

static void make_weights(matmul_case *c, uint64_t seed) {
    uint64_t st = seed;
    size_t row_bytes;
    kiln_type_row_bytes(c->type, c->k, &row_bytes);
    for (size_t r = 0; r < (size_t)MN * 2; r++) {
        unsigned char *row = c->w + r * row_bytes;
        if (c->type == KILN_TYPE_F32) {
            for (int i = 0; i < c->k; i++) ((float *)row)[i] = test_rand(&st);
        } else if (c->type == KILN_TYPE_F16 || c->type == KILN_TYPE_BF16) {
            for (int i = 0; i < c->k; i++) {
                float v = test_rand(&st);
                ((uint16_t *)row)[i] = c->type == KILN_TYPE_F16 ? kiln_fp32_to_fp16(v) : kiln_fp32_to_bf16(v);
            }
        } else {
            /* Random scale and random quants: any bytes are a valid block. */
            size_t bb = kiln__type_traits(c->type)->block_bytes;
            for (size_t i = 0; i < row_bytes; i++) row[i] = (unsigned char)(test_rand(&st) * 127 + 128);
            for (size_t blk = 0; blk < row_bytes / bb; blk++) {
                uint16_t d = kiln_fp32_to_fp16(0.01f + 0.02f * fabsf(test_rand(&st)));
                memcpy(row + blk * bb, &d, 2);
            }
        }
    }
}

static kiln_tensor *build_matmul(kiln_graph *g, void *user) {
    matmul_case *c = user;
    int64_t nw[3] = {c->k, MN, 2};
    kiln_tensor *w = kiln__graph_leaf(g, "w", c->type, 3, nw, c->w, KILN_TENSOR_WEIGHT);
    return kiln__matmul(g, w, leaf_f32(g, "x", 3, c->k, MM, 4, 1, c->x));
}

/* Quantized weights multiply activations rounded to 8 bits per 32-block, as llama.cpp does: x is taken as
 * d * round-half-even(x / d) with d = max|x| / 127 over its block. */
static double q8_activation(const float *row, int k) {
    float amax = 0.0f;
    for (int i = k / 32 * 32; i < k / 32 * 32 + 32; i++) amax = fmaxf(amax, fabsf(row[i]));
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    return (double)d * nearbyintf(row[k] * id);
}

static void matmul_matches_the_reference_for_every_weight_type(void) {
    static const kiln_type types[] = {KILN_TYPE_F32, KILN_TYPE_F16, KILN_TYPE_BF16, KILN_TYPE_Q8_0, KILN_TYPE_Q4_0};
    static matmul_case c;
    static float out[MN * MM * 4], wf[MK];
    static double ref[MN * MM * 4];
    for (size_t t = 0; t < sizeof types / sizeof types[0] + 1; t++) {
        c.type = t < sizeof types / sizeof types[0] ? types[t] : KILN_TYPE_F32;
        c.k = t < sizeof types / sizeof types[0] ? MK : 37; /* last round: an odd K with f32 */
        make_weights(&c, 10 + t);
        fill_random(c.x, (size_t)c.k * MM * 4, 20 + t);
        run_all_threads(build_matmul, &c, out, MN * MM * 4);
        size_t row_bytes;
        kiln_type_row_bytes(c.type, c.k, &row_bytes);
        for (int b = 0; b < 4; b++)
            for (int n = 0; n < MN; n++) {
                CHECK_OK(kiln_dequantize(c.type, c.w + ((size_t)(b / 2) * MN + n) * row_bytes, wf, c.k));
                for (int m = 0; m < MM; m++) {
                    double acc = 0;
                    for (int k = 0; k < c.k; k++) {
                        const float *xr = &c.x[(b * MM + m) * c.k];
                        bool q8 = c.type == KILN_TYPE_Q8_0 || c.type == KILN_TYPE_Q4_0;
                        acc += (double)wf[k] * (q8 ? q8_activation(xr, k) : xr[k]);
                    }
                    ref[(b * MM + m) * MN + n] = acc;
                }
            }
        check_close(out, ref, MN * MM * 4, 1e-5 * c.k, kiln__type_name(c.type));
    }
}

/* ---- get_rows ---- */
typedef struct rows_case {
    kiln_type type;
    unsigned char table[64 * 11 * 4];
    int32_t ids[6];
} rows_case;

static kiln_tensor *build_rows(kiln_graph *g, void *user) {
    rows_case *c = user;
    int64_t ne[2] = {64, 11}, nt[1] = {6};
    kiln_tensor *table = kiln__graph_leaf(g, "table", c->type, 2, ne, c->table, KILN_TENSOR_WEIGHT);
    return kiln__get_rows(g, table, kiln__graph_leaf(g, "ids", KILN_TYPE_I32, 1, nt, c->ids, KILN_TENSOR_INPUT));
}

static void get_rows_dequantizes_the_selected_rows(void) {
    static rows_case c = {.ids = {3, 0, 10, 3, 7, 1}};
    static float out[64 * 6], row[64];
    static double ref[64 * 6];
    static const kiln_type types[] = {KILN_TYPE_F32, KILN_TYPE_F16, KILN_TYPE_Q8_0, KILN_TYPE_Q4_0};
    for (size_t t = 0; t < 4; t++) {
        matmul_case mc = {.type = types[t], .k = 64};
        size_t rb;
        make_weights(&mc, 40 + t);
        c.type = types[t];
        kiln_type_row_bytes(c.type, 64, &rb);
        memcpy(c.table, mc.w, rb * 11);
        run_all_threads(build_rows, &c, out, 64 * 6);
        for (int i = 0; i < 6; i++) {
            CHECK_OK(kiln_dequantize(c.type, c.table + (size_t)c.ids[i] * rb, row, 64));
            for (int k = 0; k < 64; k++) ref[i * 64 + k] = row[k];
        }
        check_close(out, ref, 64 * 6, 0, kiln__type_name(c.type));
    }
}

/* ---- rope ---- */
typedef struct rope_case {
    float x[12 * 3 * 5];
    int32_t pos[5];
    int32_t n_rot, mode;
    float scale;
} rope_case;

static kiln_tensor *build_rope(kiln_graph *g, void *user) {
    rope_case *c = user;
    int64_t nt[1] = {5};
    kiln_tensor *pos = kiln__graph_leaf(g, "pos", KILN_TYPE_I32, 1, nt, c->pos, KILN_TENSOR_INPUT);
    return kiln__rope(g, leaf_f32(g, "x", 3, 12, 3, 5, 1, c->x), pos, c->n_rot, c->mode, 10000.0f, c->scale);
}

static void rope_rotates_normal_and_neox_pairs_with_partial_rotary(void) {
    static rope_case c = {.pos = {0, 1, 7, 100, 2047}};
    static float out[12 * 3 * 5];
    static double ref[12 * 3 * 5];
    fill_random(c.x, 12 * 3 * 5, 5);
    for (int k = 0; k < 4; k++) {
        c.mode = k % 2 ? KILN_ROPE_NEOX : KILN_ROPE_NORMAL;
        c.n_rot = k < 2 ? 12 : 8;
        c.scale = k < 2 ? 1.0f : 0.25f;
        run_all_threads(build_rope, &c, out, 12 * 3 * 5);
        for (int t = 0; t < 5; t++)
            for (int h = 0; h < 3; h++) {
                const float *x = c.x + (t * 3 + h) * 12;
                double *y = ref + (t * 3 + h) * 12;
                for (int i = 0; i < 12; i++) y[i] = x[i];
                for (int i = 0; i < c.n_rot; i += 2) {
                    double theta = c.pos[t] * (double)c.scale * pow(10000.0, -(double)i / c.n_rot);
                    int i0 = c.mode == KILN_ROPE_NEOX ? i / 2 : i;
                    int i1 = c.mode == KILN_ROPE_NEOX ? i / 2 + c.n_rot / 2 : i + 1;
                    y[i0] = x[i0] * cos(theta) - x[i1] * sin(theta);
                    y[i1] = x[i0] * sin(theta) + x[i1] * cos(theta);
                }
            }
        /* Single-precision angles at position 2047 limit agreement to ~1e-4. */
        check_close(out, ref, 12 * 3 * 5, 5e-4, c.mode ? "rope neox" : "rope normal");
    }
}

/* ---- attention ---- */
/* The mask of both attention tests: two sequences in one batch, over interleaved cells (sequence t % 2
 * owns the cells j with j % 2 == t % 2), causal by cell (query t sees its sequence's cells up to
 * C - T + t), with a finite penalty on every third cell; query 3 is a padding token that sees nothing. */
static float batch_mask(int t, int j, int T, int C) {
    if (t == 3 || j % 2 != t % 2 || j > C - T + t) return -INFINITY;
    return j % 3 == 0 ? -0.25f : 0.0f;
}

/* Double-precision attention: k and v as rows of Hkv * D per cell (the layout of both [D, Hkv, C] and
 * cache rows [Hkv * D, C]); a query that sees no key gives zeros. */
static void attention_ref(const float *q, const float *k, const float *v, const float *mask, int D, int Hq, int Hkv,
                          int T, int C, double scale, double *out) {
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hq; h++) {
            int hk = h / (Hq / Hkv);
            double s[64], mx = -INFINITY, sum = 0;
            for (int j = 0; j < C; j++) {
                double dot = 0;
                for (int i = 0; i < D; i++) dot += (double)q[(t * Hq + h) * D + i] * k[(j * Hkv + hk) * D + i];
                s[j] = mask[t * C + j] == -INFINITY ? -INFINITY : dot * scale + mask[t * C + j];
                mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < C; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
            for (int i = 0; i < D; i++) {
                double acc = 0;
                for (int j = 0; j < C; j++)
                    if (s[j] != -INFINITY) acc += exp(s[j] - mx) / sum * v[(j * Hkv + hk) * D + i];
                out[(t * Hq + h) * D + i] = acc;
            }
        }
}

#define AD 8
#define AHQ 6
#define AHK 2
#define AT 5
#define AL 9

typedef struct attn_case {
    float q[AD * AHQ * AT], k[AD * AHK * AL], v[AD * AHK * AL], mask[AL * AT];
} attn_case;

static kiln_tensor *build_attention(kiln_graph *g, void *user) {
    attn_case *c = user;
    return kiln__attention(g, leaf_f32(g, "q", 3, AD, AHQ, AT, 1, c->q), leaf_f32(g, "k", 3, AD, AHK, AL, 1, c->k),
                           leaf_f32(g, "v", 3, AD, AHK, AL, 1, c->v), leaf_f32(g, "mask", 2, AL, AT, 1, 1, c->mask),
                           0.35f);
}

static void attention_applies_the_mask_with_grouped_query_heads(void) {
    static attn_case c;
    static float out[AD * AHQ * AT];
    static double ref[AD * AHQ * AT];
    fill_random(c.q, sizeof c.q / 4, 6);
    fill_random(c.k, sizeof c.k / 4, 7);
    fill_random(c.v, sizeof c.v / 4, 8);
    for (int t = 0; t < AT; t++)
        for (int j = 0; j < AL; j++) c.mask[t * AL + j] = batch_mask(t, j, AT, AL);
    run_all_threads(build_attention, &c, out, AD * AHQ * AT);
    attention_ref(c.q, c.k, c.v, c.mask, AD, AHQ, AHK, AT, AL, 0.35, ref);
    check_close(out, ref, AD * AHQ * AT, TOL, "attention");
    for (int i = 3 * AHQ * AD; i < 4 * AHQ * AD; i++) CHECK(out[i] == 0.0f); /* the padding token */
}

/* ---- views and cont ---- */
typedef struct view_case {
    float x[5 * 4 * 3];
    int which;
} view_case;

static kiln_tensor *build_view(kiln_graph *g, void *user) {
    view_case *c = user;
    kiln_tensor *x = leaf_f32(g, "x", 3, 5, 4, 3, 1, c->x);
    if (c->which == 0) return kiln__cont(g, kiln__transpose(g, kiln__reshape_2d(g, x, 5, 12)));
    if (c->which == 1) return kiln__cont(g, kiln__permute(g, x, 2, 0, 1, 3));
    int64_t ne[2] = {3, 4};
    size_t nb[2] = {2 * sizeof(float), 5 * sizeof(float)}; /* every other element of the first 3 x 4 */
    return kiln__cont(g, kiln__view(g, x, 2, ne, nb, sizeof(float)));
}

static void views_alias_their_base_and_cont_copies_them_densely(void) {
    static view_case c;
    static float out[60];
    static double ref[60];
    fill_random(c.x, 60, 9);
    /* transpose of [5, 12]: out[j, i] = x[i, j] with out shape [12, 5] */
    c.which = 0;
    run_all_threads(build_view, &c, out, 60);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 12; j++) ref[i * 12 + j] = c.x[j * 5 + i];
    check_close(out, ref, 60, 0, "transpose");
    /* permute(2, 0, 1): src dim 0 -> 2, 1 -> 0, 2 -> 1; out shape [4, 3, 5] */
    c.which = 1;
    run_all_threads(build_view, &c, out, 60);
    for (int d0 = 0; d0 < 5; d0++)
        for (int d1 = 0; d1 < 4; d1++)
            for (int d2 = 0; d2 < 3; d2++) ref[(d0 * 3 + d2) * 4 + d1] = c.x[(d2 * 4 + d1) * 5 + d0];
    check_close(out, ref, 60, 0, "permute");
    c.which = 2;
    run_all_threads(build_view, &c, out, 12);
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 3; i++) ref[r * 3 + i] = c.x[1 + r * 5 + 2 * i];
    check_close(out, ref, 12, 0, "strided view");
}

/* add and mul reading a [7, 3] view with gaps between rows, at an offset, out of a 1-D tensor (as
 * src0, and as a broadcast src1 of one row): the kernels walk both operands through their strides. */
typedef struct strided_binary_case {
    float x[40], y[40];
    int mul;
} strided_binary_case;

static kiln_tensor *build_strided_binary(kiln_graph *g, void *user) {
    strided_binary_case *c = user;
    int64_t ne[2] = {7, 3}, row = 7;
    size_t nb[2] = {sizeof(float), 9 * sizeof(float)}; /* rows 9 apart: two-element gaps */
    kiln_tensor *x = kiln__view(g, leaf_f32(g, "x", 1, 40, 1, 1, 1, c->x), 2, ne, nb, 3 * sizeof(float));
    kiln_tensor *y = kiln__view(g, leaf_f32(g, "y", 1, 40, 1, 1, 1, c->y), 1, &row, nb, 5 * sizeof(float));
    return c->mul ? kiln__mul(g, x, y) : kiln__add(g, x, y);
}

static void add_and_mul_walk_a_strided_view_of_a_1d_tensor(void) {
    static strided_binary_case c;
    static float out[21];
    static double ref[21];
    fill_random(c.x, 40, 21);
    fill_random(c.y, 40, 22);
    for (c.mul = 0; c.mul < 2; c.mul++) {
        run_all_threads(build_strided_binary, &c, out, 21);
        for (int r = 0; r < 3; r++)
            for (int i = 0; i < 7; i++) {
                double a = c.x[3 + r * 9 + i], b = c.y[5 + i];
                ref[r * 7 + i] = c.mul ? a * b : a + b;
            }
        check_close(out, ref, 21, 1e-7, c.mul ? "mul of a strided view" : "add of a strided view");
    }
}

/* A view whose stride or offset splits an element (here bytes, not elements, by mistake) is rejected
 * when it is built, with a message naming the problem, instead of handing kernels misaligned floats;
 * so is a set region whose stride splits an element, and a view whose extent overflows size_t. */
static void views_and_regions_that_split_elements_are_rejected(void) {
    static float x[40], d[60], s[8];
    int64_t ne[2] = {7, 3};
    size_t by_elements[2] = {1, 9}, odd_rows[2] = {sizeof(float), 30}, ok[2] = {sizeof(float), 36};
    size_t region[3] = {22, 0, 0};
    /* 2^32 + 1 rows 2^32 bytes apart: the last row's offset is 2^64, which wraps to 0 unchecked */
    size_t wraps[2] = {sizeof(float), (size_t)1 << 32};
    int64_t ne_wraps[2] = {1, ((int64_t)1 << 32) + 1};
    struct {
        const int64_t *ne;
        const size_t *nb;
        size_t offset;
        const char *why;
    } bad_views[] = {{ne, by_elements, 0, "view strides must be whole elements"},
                     {ne, odd_rows, 0, "view strides must be whole elements"},
                     {ne, ok, 2, "view offset is not a whole number of elements"},
                     {ne_wraps, wraps, 0, "view reaches outside its base"}};
    for (size_t i = 0; i < KILN__ARRAY_LEN(bad_views); i++) {
        kiln_graph *g;
        CHECK_OK(kiln__graph_create(16, &g));
        CHECK(kiln__view(g, leaf_f32(g, "x", 1, 40, 1, 1, 1, x), 2, bad_views[i].ne, bad_views[i].nb,
                         bad_views[i].offset) == NULL);
        CHECK_STATUS(kiln__graph_status(g), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS(bad_views[i].why);
        kiln__graph_destroy(g);
    }
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(16, &g));
    CHECK(kiln__set(g, leaf_f32(g, "d", 2, 12, 5, 1, 1, d), leaf_f32(g, "s", 2, 4, 2, 1, 1, s), region, 0) ==
          NULL);
    CHECK_STATUS(kiln__graph_status(g), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("region strides must be whole elements");
    kiln__graph_destroy(g);
}

/* ---- cache_write ---- */
/* Rows of x [32, 4] into cells 7, -, 2, 5 of a [32, 10] cache (row 1 is padding: index -1), for each
 * cache type; the result read back as floats through cast. */
#define CW 32
#define CC 10
#define CT 4

typedef struct cache_case {
    kiln_type type;
    float x[CW * CT];
    int32_t idx[CT];
    unsigned char cache[CC * CW * 4];
} cache_case;

static kiln_tensor *build_cache(kiln_graph *g, void *user) {
    cache_case *c = user;
    int64_t ne[2] = {CW, CC}, ne_idx[1] = {CT};
    kiln_tensor *cache = kiln__graph_leaf(g, "cache", c->type, 2, ne, c->cache, KILN_TENSOR_CACHE);
    kiln_tensor *idx = kiln__graph_leaf(g, "idx", KILN_TYPE_I32, 1, ne_idx, c->idx, KILN_TENSOR_INPUT);
    return kiln__cast(g, kiln__cache_write(g, cache, leaf_f32(g, "x", 2, CW, CT, 1, 1, c->x), idx));
}

static void cache_write_puts_each_row_in_its_cell_and_skips_padding_rows(void) {
    static const kiln_type types[3] = {KILN_TYPE_F32, KILN_TYPE_F16, KILN_TYPE_Q8_0};
    static const int32_t idx[CT] = {7, -1, 2, 5};
    static cache_case c;
    static float init[CW * CC], stored[CW], out[CW * CC];
    static double ref[CW * CC];
    fill_random(c.x, CW * CT, 11);
    for (int i = 0; i < CW * CC; i++) init[i] = 0.01f * (float)i;
    memcpy(c.idx, idx, sizeof idx);
    for (int ti = 0; ti < 3; ti++) {
        size_t row;
        c.type = types[ti];
        CHECK_OK(kiln_type_row_bytes(c.type, CW, &row));
        for (int j = 0; j < CC; j++) CHECK_OK(kiln_quantize_row(c.type, init + j * CW, c.cache + j * row, CW));
        for (int j = 0; j < CC; j++) { /* untouched cells keep what they held */
            CHECK_OK(kiln_dequantize(c.type, c.cache + j * row, stored, CW));
            for (int i = 0; i < CW; i++) ref[j * CW + i] = stored[i];
        }
        for (int r = 0; r < CT; r++) { /* written cells hold the row as the cache type stores it */
            unsigned char q[CW * 4];
            if (idx[r] < 0) continue;
            CHECK_OK(kiln_quantize_row(c.type, c.x + r * CW, q, CW));
            CHECK_OK(kiln_dequantize(c.type, q, stored, CW));
            for (int i = 0; i < CW; i++) ref[idx[r] * CW + i] = stored[i];
        }
        run_all_threads(build_cache, &c, out, CW * CC);
        check_close(out, ref, CW * CC, 0, kiln__type_name(c.type));
    }
}

/* ---- attention over f16 / q8_0 cache rows ---- */
#define RD 8
#define RHQ 8
#define RHK 4 /* 4 heads of 8 share each 32-element q8_0 block */
#define RT 3
#define RL 6

typedef struct rows_attn_case {
    kiln_type type;
    float q[RD * RHQ * RT], mask[RL * RT];
    unsigned char k[RL * RD * RHK * 4], v[RL * RD * RHK * 4];
} rows_attn_case;

static kiln_tensor *build_rows_attention(kiln_graph *g, void *user) {
    rows_attn_case *c = user;
    int64_t ne[2] = {RD * RHK, RL};
    kiln_tensor *k = kiln__graph_leaf(g, "k", c->type, 2, ne, c->k, 0);
    kiln_tensor *v = kiln__graph_leaf(g, "v", c->type, 2, ne, c->v, 0);
    return kiln__attention(g, leaf_f32(g, "q", 3, RD, RHQ, RT, 1, c->q), k, v, leaf_f32(g, "mask", 2, RL, RT, 1, 1, c->mask),
                           0.35f);
}

static void attention_reads_f16_and_q8_0_cache_rows_in_place_under_a_mask(void) {
    static rows_attn_case c;
    static float out[RD * RHQ * RT], kf[RL * RD * RHK], vf[RL * RD * RHK];
    static double ref[RD * RHQ * RT];
    static const kiln_type types[2] = {KILN_TYPE_F16, KILN_TYPE_Q8_0};
    for (int ti = 0; ti < 2; ti++) {
        size_t row;
        c.type = types[ti];
        kiln_type_row_bytes(c.type, RD * RHK, &row);
        fill_random(c.q, sizeof c.q / 4, 30);
        fill_random(kf, RL * RD * RHK, 31);
        fill_random(vf, RL * RD * RHK, 32);
        for (int j = 0; j < RL; j++) {
            CHECK_OK(kiln_quantize_row(c.type, kf + j * RD * RHK, c.k + j * row, RD * RHK));
            CHECK_OK(kiln_quantize_row(c.type, vf + j * RD * RHK, c.v + j * row, RD * RHK));
            CHECK_OK(kiln_dequantize(c.type, c.k + j * row, kf + j * RD * RHK, RD * RHK)); /* what is stored */
            CHECK_OK(kiln_dequantize(c.type, c.v + j * row, vf + j * RD * RHK, RD * RHK));
        }
        for (int t = 0; t < RT; t++)
            for (int j = 0; j < RL; j++) c.mask[t * RL + j] = j <= RL - RT + t ? 0.0f : -INFINITY; /* causal */
        c.mask[1 * RL + 0] = -INFINITY; /* query 1 also hides cell 0, query 2 weighs cell 1 down */
        c.mask[2 * RL + 1] = -1.0f;
        run_all_threads(build_rows_attention, &c, out, RD * RHQ * RT);
        attention_ref(c.q, kf, vf, c.mask, RD, RHQ, RHK, RT, RL, 0.35, ref);
        check_close(out, ref, RD * RHQ * RT, TOL, kiln__type_name(c.type));
    }
}

/* ---- set and acc ---- */
typedef struct set_case {
    float d[12 * 5], x[4 * 2];
    bool acc;
} set_case;

static kiln_tensor *build_set(kiln_graph *g, void *user) {
    set_case *c = user;
    size_t nb[3] = {12 * sizeof(float), 0, 0};
    kiln_tensor *d = leaf_f32(g, "d", 2, 12, 5, 1, 1, c->d), *x = leaf_f32(g, "x", 2, 4, 2, 1, 1, c->x);
    size_t off = (1 * 12 + 3) * sizeof(float);
    return c->acc ? kiln__acc(g, d, x, nb, off) : kiln__set(g, d, x, nb, off);
}

static void set_and_acc_replace_or_add_into_a_region(void) {
    static set_case c;
    static float out[60];
    static double ref[60];
    fill_random(c.d, 60, 12);
    fill_random(c.x, 8, 13);
    for (int k = 0; k < 2; k++) {
        c.acc = k == 1;
        run_all_threads(build_set, &c, out, 60);
        for (int i = 0; i < 60; i++) ref[i] = c.d[i];
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 4; i++) {
                int at = (1 + r) * 12 + 3 + i;
                ref[at] = c.acc ? (double)c.d[at] + c.x[r * 4 + i] : c.x[r * 4 + i];
            }
        check_close(out, ref, 60, 1e-7, c.acc ? "acc" : "set");
    }
}


/* ---- sub, div and the unary functions of imported graphs (ONNX), against libm in double ---- */
typedef struct onnx_elem_case {
    float a[13 * 7 * 3], b[13 * 7 * 3];
    int64_t bne[4];
    int op; /* 0 sub, 1 div, 2 + f: unary f */
} onnx_elem_case;

static kiln_tensor *build_onnx_elem(kiln_graph *g, void *user) {
    onnx_elem_case *c = user;
    kiln_tensor *a = leaf_f32(g, "a", 3, 13, 7, 3, 1, c->a);
    if (c->op >= 2) return kiln__unary(g, a, c->op - 2);
    kiln_tensor *b = leaf_f32(g, "b", 3, c->bne[0], c->bne[1], c->bne[2], 1, c->b);
    return c->op ? kiln__div(g, a, b) : kiln__sub(g, a, b);
}

static double unary_ref(int fn, double x) {
    switch (fn) {
    case KILN_UNARY_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case KILN_UNARY_ERF: return erf(x);
    case KILN_UNARY_SQRT: return sqrt(x);
    case KILN_UNARY_EXP: return exp(x);
    case KILN_UNARY_LOG: return log(x);
    case KILN_UNARY_NEG: return -x;
    case KILN_UNARY_RECIP: return 1.0 / x;
    case KILN_UNARY_NOT: return x == 0.0 ? 1.0 : 0.0;
    case KILN_UNARY_ROUND: return nearbyint(x);
    default: return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); /* KILN_UNARY_GELU_ERF */
    }
}

/* Sub and div broadcast their second operand as add does; each unary function is within TOL (relative
 * above 1) of the double-precision value: libm's float functions are within a few ulps. Sqrt and log get
 * positive inputs, recip inputs away from zero. */
static void sub_div_and_unary_functions_match_libm(void) {
    static onnx_elem_case c;
    static float out[13 * 7 * 3];
    static double ref[13 * 7 * 3];
    static const int64_t shapes[2][4] = {{13, 7, 3, 1}, {13, 1, 3, 1}};
    const int n = 13 * 7 * 3;
    fill_random(c.a, (size_t)n, 21);
    fill_random(c.b, (size_t)n, 22);
    for (int i = 0; i < n; i++) c.b[i] = c.b[i] >= 0 ? c.b[i] + 0.5f : c.b[i] - 0.5f; /* no divisor near 0 */
    for (int k = 0; k < 4; k++) {
        memcpy(c.bne, shapes[k % 2], sizeof c.bne);
        c.op = k / 2;
        run_all_threads(build_onnx_elem, &c, out, (size_t)n);
        for (int i2 = 0; i2 < 3; i2++)
            for (int i1 = 0; i1 < 7; i1++)
                for (int i0 = 0; i0 < 13; i0++) {
                    int ia = (i2 * 7 + i1) * 13 + i0, ib = (i2 * (int)c.bne[1] + i1 % (int)c.bne[1]) * 13 + i0;
                    ref[ia] = c.op ? (double)c.a[ia] / c.b[ib] : (double)c.a[ia] - c.b[ib];
                }
        check_close(out, ref, (size_t)n, TOL, c.op ? "div" : "sub");
    }
    for (int fn = 0; fn < KILN_UNARY_COUNT; fn++) {
        fill_random(c.a, (size_t)n, 30 + (uint64_t)fn);
        for (int i = 0; i < n; i++) {
            c.a[i] *= 4.0f;
            if (fn == KILN_UNARY_SQRT || fn == KILN_UNARY_LOG) c.a[i] = fabsf(c.a[i]) + 1e-3f;
            if (fn == KILN_UNARY_RECIP) c.a[i] = c.b[i];
            if (fn == KILN_UNARY_NOT && i % 3 == 0) c.a[i] = i % 2 ? -0.0f : 0.0f; /* both zeros are false */
            if (fn == KILN_UNARY_ROUND && i % 4 == 0) c.a[i] = (float)(i / 4 % 9) - 4.5f; /* ties: to even */
        }
        c.op = 2 + fn;
        run_all_threads(build_onnx_elem, &c, out, (size_t)n);
        for (int i = 0; i < n; i++) ref[i] = unary_ref(fn, c.a[i]);
        check_close(out, ref, (size_t)n, TOL, "unary");
    }
}

/* ---- where ---- */
typedef struct where_case {
    float cond[6 * 4 * 2], x[6], y[6 * 4 * 2];
} where_case;

static kiln_tensor *build_where(kiln_graph *g, void *user) {
    where_case *c = user;
    return kiln__where(g, leaf_f32(g, "cond", 3, 6, 4, 2, 1, c->cond), leaf_f32(g, "x", 1, 6, 1, 1, 1, c->x),
                       leaf_f32(g, "y", 3, 6, 4, 2, 1, c->y));
}

/* where picks x (broadcast along rows) where the condition is non-zero (NaN counts as true, -0 as false),
 * y elsewhere, exactly; -inf and NaN values pass through untouched. */
static void where_picks_x_where_the_condition_holds_and_y_elsewhere(void) {
    static where_case c;
    static float out[48];
    static double ref[48];
    fill_random(c.x, 6, 41);
    fill_random(c.y, 48, 42);
    for (int i = 0; i < 48; i++) c.cond[i] = (float[]){0.0f, 1.0f, -0.0f, NAN, 0.5f}[i % 5];
    c.x[2] = -INFINITY;
    c.y[7] = NAN;
    run_all_threads(build_where, &c, out, 48);
    for (int i = 0; i < 48; i++) ref[i] = c.cond[i] != 0.0f ? c.x[i % 6] : c.y[i];
    for (int i = 0; i < 48; i++)
        if (!(out[i] == (float)ref[i] || (isnan(out[i]) && isnan(ref[i]))))
            harness_fail(__FILE__, __LINE__, "where: element %d is %g, expected %g", i, out[i], ref[i]);
}

/* reduce_max: each row's largest element, -inf rows included, a NaN anywhere in a row making it NaN. */
typedef struct rmax_case {
    float x[7 * 3];
} rmax_case;

static kiln_tensor *build_rmax(kiln_graph *g, void *user) {
    return kiln__reduce_max(g, leaf_f32(g, "x", 2, 7, 3, 1, 1, ((rmax_case *)user)->x));
}

static void reduce_max_takes_the_largest_of_each_row(void) {
    static rmax_case c;
    static float out[3];
    fill_random(c.x, 21, 51);
    for (int i = 7; i < 14; i++) c.x[i] = -INFINITY;
    c.x[17] = NAN;
    run_all_threads(build_rmax, &c, out, 3);
    float m0 = c.x[0];
    for (int i = 1; i < 7; i++) m0 = c.x[i] > m0 ? c.x[i] : m0;
    CHECK(out[0] == m0);
    CHECK(out[1] == -INFINITY);
    CHECK(isnan(out[2]));
}

int main(void) {
    RUN(reduce_max_takes_the_largest_of_each_row);
    RUN(where_picks_x_where_the_condition_holds_and_y_elsewhere);
    RUN(rms_norm_silu_and_softmax_match_the_reference);
    RUN(add_and_mul_broadcast_the_second_operand);
    RUN(matmul_matches_the_reference_for_every_weight_type);
    RUN(get_rows_dequantizes_the_selected_rows);
    RUN(rope_rotates_normal_and_neox_pairs_with_partial_rotary);
    RUN(softmax_of_a_row_that_is_all_minus_infinity_is_zeros);
    RUN(attention_applies_the_mask_with_grouped_query_heads);
    RUN(views_alias_their_base_and_cont_copies_them_densely);
    RUN(add_and_mul_walk_a_strided_view_of_a_1d_tensor);
    RUN(views_and_regions_that_split_elements_are_rejected);
    RUN(cache_write_puts_each_row_in_its_cell_and_skips_padding_rows);
    RUN(set_and_acc_replace_or_add_into_a_region);
    RUN(attention_reads_f16_and_q8_0_cache_rows_in_place_under_a_mask);
    RUN(sub_div_and_unary_functions_match_libm);
    return harness_finish();
}
