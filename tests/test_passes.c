/*
 * test_passes.c - each graph pass on a hand-built graph: the rewrite happens (the fused op appears, the
 * pattern's nodes are gone) and the outputs are unchanged: bit for bit where the fused kernel keeps the
 * arithmetic order, within 1e-6 relative where it reassociates (gelu), and within 1e-5 relative where a
 * matmul becomes a linear or the masked attention subgraph one attention node (kernels may sum a dot
 * product in another order). Also the pass-list syntax.
 */
#include "harness.h"
#include "graph_run.h"

#include "graph/passes/passes.h"
#include "plan/const_store.h"
#include "tensor/types.h"

#include <math.h>
#include <stdlib.h>

static float A[4096], B[4096], C[4096], W[4096], Bias[64];

typedef kiln_tensor *(*build_fn)(kiln_graph *g);

static kiln_tensor *leaf(kiln_graph *g, const char *name, float *data, int nd, int64_t a, int64_t b,
                         int64_t c, uint32_t flags) {
    int64_t ne[3] = {a, b, c};
    return kiln__graph_leaf(g, name, KILN_TYPE_F32, nd, ne, data, flags);
}

static int pass_index(const char *name) {
    int32_t n;
    const kiln_pass *p = kiln__passes(&n);
    for (int32_t i = 0; i < n; i++)
        if (!strcmp(p[i].name, name)) return i;
    return -1;
}

static bool has_op(kiln_graph *g, kiln_op op) {
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++)
        if (kiln__graph_node(g, i)->op == op) return true;
    return false;
}

/* Run build() without passes, then with only `pass` (check mode on); compare the single output. */
static void check_pass(const char *pass, build_fn build, kiln_op expect_op, kiln_op gone_op, double tol) {
    kiln_graph *g0, *g1;
    kiln_status s;
    kiln_backend *backend;
    kiln_const_store *store;
    kiln_pipeline_stats st;
    int idx = pass_index(pass);
    CHECK(idx >= 0);
    CHECK_OK(kiln__backend_cpu_create(2, &backend));
    CHECK_OK(kiln__const_store_create(backend, &store));
    kiln_pass_env env = {kiln__const_store_eval, store};
    CHECK_OK(kiln__graph_create(256, &g0));
    CHECK_OK(kiln__graph_create(256, &g1));
    kiln_tensor *o0 = build(g0), *o1 = build(g1);
    kiln__graph_set_output(g0, o0);
    kiln__graph_set_output(g1, o1);
    CHECK_OK(kiln__graph_status(g1));
    CHECK_OK(kiln__pipeline_run(g1, &env, 1u << idx, true, &st));
    CHECK(st.pass[idx].rewrites > 0);
    if (expect_op != KILN_OP_NONE && !has_op(g1, expect_op))
        harness_fail(__FILE__, __LINE__, "%s: no %s node after the pass", pass, kiln__op_name(expect_op));
    if (gone_op != KILN_OP_NONE && has_op(g1, gone_op))
        harness_fail(__FILE__, __LINE__, "%s: a %s node is still there", pass, kiln__op_name(gone_op));
    void *a0 = graph_run(g0, 2, &s);
    CHECK_OK(s);
    void *a1 = graph_run(g1, 2, &s);
    CHECK_OK(s);
    kiln_tensor *r0 = kiln__graph_output(g0, 0), *r1 = kiln__graph_output(g1, 0);
    CHECK_EQ_INT(kiln__tensor_nelements(r0), kiln__tensor_nelements(r1));
    if (a0 && a1) {
        /* Outputs may be views after a rewrite: read both through their strides. */
        for (int64_t i = 0; i < kiln__tensor_nelements(r0); i++) {
            int64_t i0 = i % r0->ne[0], i1 = (i / r0->ne[0]) % r0->ne[1], i2 = i / (r0->ne[0] * r0->ne[1]);
            float x = *(float *)((char *)r0->data + i0 * r0->nb[0] + i1 * r0->nb[1] + i2 * r0->nb[2]);
            float y = *(float *)((char *)r1->data + i0 * r1->nb[0] + i1 * r1->nb[1] + i2 * r1->nb[2]);
            if (!(fabs((double)x - y) <= tol * fmax(1.0, fabs(x)))) {
                harness_fail(__FILE__, __LINE__, "%s: element %lld is %.9g after, %.9g before", pass,
                             (long long)i, y, x);
                break;
            }
        }
    }
    free(a0);
    free(a1);
    kiln__graph_destroy(g0);
    kiln__graph_destroy(g1);
    kiln__const_store_destroy(store);
    kiln__backend_destroy(backend);
}

static kiln_tensor *build_cse(kiln_graph *g) {
    kiln_tensor *x = leaf(g, "x", A, 2, 16, 4, 1, KILN_TENSOR_INPUT);
    return kiln__add(g, kiln__silu(g, x), kiln__silu(g, x));
}
static void cse_merges_identical_nodes(void) {
    check_pass("cse", build_cse, KILN_OP_ADD, KILN_OP_NONE, 0);
}

static kiln_tensor *build_fold(kiln_graph *g) {
    kiln_tensor *w = leaf(g, "w", W, 2, 16, 4, 1, KILN_TENSOR_WEIGHT);
    return kiln__add(g, leaf(g, "x", A, 2, 16, 4, 1, KILN_TENSOR_INPUT),
                     kiln__scale(g, kiln__silu(g, w), 2.0f, 1.0f));
}
static void const_fold_evaluates_constant_subgraphs_once(void) {
    check_pass("const_fold", build_fold, KILN_OP_ADD, KILN_OP_SILU, 0);
}

/* An imported MatMul's weight: ONNX's B [K, N] lies as N-element rows, and Kiln's W is its transpose. */
static kiln_tensor *build_transposed_weight(kiln_graph *g) {
    kiln_tensor *b = leaf(g, "b", W, 2, 8, 16, 1, KILN_TENSOR_WEIGHT); /* ONNX B [K=16, N=8], row-major */
    kiln_tensor *x = leaf(g, "x", A, 2, 16, 5, 1, KILN_TENSOR_INPUT);
    return kiln__matmul(g, kiln__cont(g, kiln__transpose(g, b)), x); /* [8, 5] */
}
static void const_fold_copies_a_transposed_weight_once(void) {
    check_pass("const_fold", build_transposed_weight, KILN_OP_MATMUL, KILN_OP_CONT, 0);
}
/* ... and absorb leaves it to folding: a transposed read (linear TRANS0) has no fast kernel. */
static void absorb_leaves_a_transposed_weight_to_constant_folding(void) {
    kiln_graph *g;
    kiln_pipeline_stats st;
    CHECK_OK(kiln__graph_create(64, &g));
    kiln__graph_set_output(g, build_transposed_weight(g));
    CHECK_OK(kiln__pipeline_run(g, &(kiln_pass_env){NULL, NULL}, 1u << pass_index("absorb"), true, &st));
    CHECK(st.pass[pass_index("absorb")].rewrites == 0 && !has_op(g, KILN_OP_LINEAR) &&
          has_op(g, KILN_OP_CONT));
    kiln__graph_destroy(g);
}

static kiln_tensor *build_simplify(kiln_graph *g) {
    kiln_tensor *x = leaf(g, "x", A, 2, 16, 6, 1, KILN_TENSOR_INPUT);
    kiln_tensor *r = kiln__reshape_2d(g, kiln__reshape_3d(g, kiln__silu(g, x), 8, 2, 6), 32, 3);
    kiln_tensor *p = kiln__permute(g, kiln__permute(g, r, 1, 0, 2, 3), 1, 0, 2, 3);
    return kiln__scale(g, kiln__cont(g, p), 3.0f, 0.0f);
}
static void simplify_collapses_view_chains_and_drops_identity_copies(void) {
    check_pass("simplify", build_simplify, KILN_OP_SCALE, KILN_OP_CONT, 0);
}

static kiln_tensor *build_absorb(kiln_graph *g) {
    kiln_tensor *w = leaf(g, "w", W, 2, 16, 8, 1, KILN_TENSOR_WEIGHT);
    kiln_tensor *x = leaf(g, "x", A, 2, 16, 5, 1, KILN_TENSOR_INPUT);
    kiln_tensor *y = kiln__scale(g, kiln__matmul(g, w, x), 0.25f, 0.0f); /* [8, 5] */
    kiln_tensor *at = leaf(g, "a", B, 2, 3, 8, 1, KILN_TENSOR_INPUT);    /* A^T stored [3, 8] */
    return kiln__matmul(g, kiln__cont(g, kiln__transpose(g, at)), y);    /* [3, 5] */
}
static void absorb_turns_scales_and_transposes_into_linear_flags(void) {
    check_pass("absorb", build_absorb, KILN_OP_LINEAR, KILN_OP_CONT, 1e-5);
}

/* A transposed activation operand (an imported Q.K^T) larger than one tile block: N = 40 output rows (two
 * blocks of 32, split by threads in 16s), K = 37, M = 70 columns (two blocks of 64). The linear node then
 * gathers W^T into the thread's scratch and runs the F32 tile; every level this machine has is checked. */
static float Big[40 * 37], Xbig[37 * 70];
static kiln_tensor *build_absorb_big(kiln_graph *g) {
    kiln_tensor *p = leaf(g, "p", Big, 2, 40, 37, 1, KILN_TENSOR_INPUT); /* stored [37 rows of 40] */
    kiln_tensor *x = leaf(g, "x", Xbig, 2, 37, 70, 1, KILN_TENSOR_INPUT);
    return kiln__matmul(g, kiln__cont(g, kiln__transpose(g, p)), x); /* [40, 70] */
}
static void absorb_of_a_transposed_operand_runs_the_tile_at_every_level(void) {
    static const char *const levels[] = {"ref", "avx2", "avx512", "amx", "neon"};
    for (int i = 0; i < 40 * 37; i++)
        Big[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (int i = 0; i < 37 * 70; i++)
        Xbig[i] = (float)((i * 104729) % 1000) / 500.0f - 1.0f;
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        if (kiln_set_cpu_level(levels[l]) != KILN_OK || strcmp(kiln_get_cpu_level(), levels[l]) != 0)
            continue;
        check_pass("absorb", build_absorb_big, KILN_OP_LINEAR, KILN_OP_CONT, 1e-5);
    }
    CHECK_OK(kiln_set_cpu_level("auto"));
}

/* The plain attention form the model builders emit, D = 16, Hq = 4, Hkv = 2, T = 3 queries over C = 7
 * cells, under the mask Mask [C, T]:
 *   softmax(scale(K^T Q) + mask) V, with K and V [D, Hkv, C] (F32, or reshaped casts of cache rows). */
enum { AD = 16, AHQ = 4, AHKV = 2, AT = 3, AC = 7 };
static float Mask[AC * AT];
static unsigned char Kc[AC * AD * AHKV * 2], Vc[AC * AD * AHKV * 2]; /* cache rows [Hkv * D, C] */
static kiln_type cache_type = KILN_TYPE_F32;

static kiln_tensor *attention_form(kiln_graph *g, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v,
                                   kiln_tensor *mask) {
    kiln_tensor *kq =
        kiln__matmul(g, kiln__permute(g, k, 0, 2, 1, 3), kiln__permute(g, q, 0, 2, 1, 3)); /* [C, T, Hq] */
    kiln_tensor *p = kiln__softmax(g, kiln__add(g, kiln__scale(g, kq, 0.25f, 0.0f), mask), 1.0f);
    kiln_tensor *kqv = kiln__matmul(g, kiln__cont(g, kiln__permute(g, v, 1, 2, 0, 3)), p); /* [D, T, Hq] */
    return kiln__cont(g, kiln__permute(g, kqv, 0, 2, 1, 3));                               /* [D, Hq, T] */
}

static kiln_tensor *build_attention(kiln_graph *g) {
    kiln_tensor *q = leaf(g, "q", A, 3, AD, AHQ, AT, KILN_TENSOR_INPUT);
    kiln_tensor *mask = leaf(g, "mask", Mask, 2, AC, AT, 1, KILN_TENSOR_INPUT);
    if (cache_type == KILN_TYPE_F32)
        return attention_form(g, q, leaf(g, "k", B, 3, AD, AHKV, AC, KILN_TENSOR_INPUT),
                              leaf(g, "v", C, 3, AD, AHKV, AC, KILN_TENSOR_INPUT), mask);
    int64_t ne[2] = {AD * AHKV, AC};
    kiln_tensor *kc = kiln__graph_leaf(g, "k_cache", cache_type, 2, ne, Kc, KILN_TENSOR_CACHE);
    kiln_tensor *vc = kiln__graph_leaf(g, "v_cache", cache_type, 2, ne, Vc, KILN_TENSOR_CACHE);
    return attention_form(g, q, kiln__reshape_3d(g, kiln__cast(g, kc), AD, AHKV, AC),
                          kiln__reshape_3d(g, kiln__cast(g, vc), AD, AHKV, AC), mask);
}

/* Masks: plain causal; two sequences interleaved over the cells with a padding query that sees nothing
 * (softmax of an all -inf row is zeros, as the fused kernel gives); a sliding window of 2 with finite
 * penalties. */
static void fill_mask(int kind) {
    for (int t = 0; t < AT; t++)
        for (int j = 0; j < AC; j++) {
            int pos = AC - AT + t;
            bool visible = kind == 0   ? j <= pos
                           : kind == 1 ? t != 1 && j % 2 == t % 2 && j <= pos
                                       : j <= pos && j > pos - 2;
            Mask[t * AC + j] = !visible ? -INFINITY : kind == 2 ? -0.5f * (float)(pos - j) : 0.0f;
        }
}

static void fuse_attention_replaces_the_masked_score_subgraph(void) {
    for (int kind = 0; kind < 3; kind++) {
        fill_mask(kind);
        check_pass("fuse_attention", build_attention, KILN_OP_ATTENTION, KILN_OP_SOFTMAX, 1e-5);
    }
}

/* With an F16 or Q8_0 cache the attention node takes the cache rows, and no cast is left. */
static void fuse_attention_reads_f16_and_q8_0_cache_rows_in_place(void) {
    static const kiln_type types[2] = {KILN_TYPE_F16, KILN_TYPE_Q8_0};
    fill_mask(1);
    for (int ti = 0; ti < 2; ti++) {
        size_t rb;
        cache_type = types[ti];
        CHECK_OK(kiln_type_row_bytes(cache_type, AD * AHKV, &rb));
        for (int j = 0; j < AC; j++) {
            CHECK_OK(kiln_quantize_row(cache_type, B + j * AD * AHKV, Kc + (size_t)j * rb, AD * AHKV));
            CHECK_OK(kiln_quantize_row(cache_type, C + j * AD * AHKV, Vc + (size_t)j * rb, AD * AHKV));
        }
        check_pass("fuse_attention", build_attention, KILN_OP_ATTENTION, KILN_OP_CAST, 1e-5);
    }
    cache_type = KILN_TYPE_F32;
}

/* Every layer reads the same mask input: each layer's subgraph fuses. */
static void fuse_attention_fuses_every_layer_that_shares_one_mask(void) {
    kiln_graph *g;
    kiln_pipeline_stats st;
    int32_t n_att = 0;
    fill_mask(0);
    CHECK_OK(kiln__graph_create(128, &g));
    kiln_tensor *mask = leaf(g, "mask", Mask, 2, AC, AT, 1, KILN_TENSOR_INPUT);
    kiln_tensor *q = leaf(g, "q", A, 3, AD, AHQ, AT, KILN_TENSOR_INPUT);
    kiln_tensor *k = leaf(g, "k", B, 3, AD, AHKV, AC, KILN_TENSOR_INPUT),
                *v = leaf(g, "v", C, 3, AD, AHKV, AC, KILN_TENSOR_INPUT);
    kiln_tensor *h = attention_form(g, q, k, v, mask);
    kiln__graph_set_output(g, attention_form(g, h, k, v, mask));
    CHECK_OK(kiln__graph_status(g));
    CHECK_OK(kiln__graph_order(g));
    CHECK_OK(kiln__pipeline_run(g, NULL, 1u << pass_index("fuse_attention"), true, &st));
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++)
        n_att += kiln__graph_node(g, i)->op == KILN_OP_ATTENTION;
    CHECK_EQ_INT(n_att, 2);
    CHECK(!has_op(g, KILN_OP_SOFTMAX));
    kiln__graph_destroy(g);
}

static kiln_tensor *build_gelu(kiln_graph *g) {
    return kiln__gelu_unfused(g, leaf(g, "x", A, 2, 40, 3, 1, KILN_TENSOR_INPUT));
}
static void fuse_gelu_recognizes_the_tanh_approximation(void) {
    check_pass("fuse_gelu", build_gelu, KILN_OP_GELU, KILN_OP_TANH, 1e-6);
}

/* GELU's exact form as torch's exporters write it, with one-element constants: x / sqrt(2), erf, + 1,
 * and the three groupings of the products with x and 0.5. */
static float Sqrt2[1] = {1.41421356f}, One[1] = {1.0f}, Half[1] = {0.5f};
static int erf_grouping;
static kiln_tensor *build_gelu_erf(kiln_graph *g) {
    kiln_tensor *x = leaf(g, "x", A, 2, 16, 4, 1, KILN_TENSOR_INPUT);
    kiln_tensor *c2 = leaf(g, "sqrt2", Sqrt2, 1, 1, 1, 1, KILN_TENSOR_WEIGHT);
    kiln_tensor *c1 = leaf(g, "one", One, 1, 1, 1, 1, KILN_TENSOR_WEIGHT);
    kiln_tensor *ch = leaf(g, "half", Half, 1, 1, 1, 1, KILN_TENSOR_WEIGHT);
    kiln_tensor *p =
        kiln__add(g, kiln__unary(g, kiln__div(g, x, c2), KILN_UNARY_ERF), c1); /* 1 + erf(x/√2) */
    if (erf_grouping == 0) return kiln__mul(g, kiln__mul(g, x, p), ch);        /* TorchScript */
    if (erf_grouping == 1) return kiln__mul(g, kiln__mul(g, x, ch), p);        /* HF's gelu */
    return kiln__mul(g, x, kiln__mul(g, p, ch));                               /* dynamo */
}
static void fuse_gelu_recognizes_the_erf_form_in_each_grouping(void) {
    for (erf_grouping = 0; erf_grouping < 3; erf_grouping++)
        check_pass("fuse_gelu", build_gelu_erf, KILN_OP_UNARY, KILN_OP_DIV, 1e-6);
}

/* The tanh approximation as GPT-2's "gelu_new" exports it: every constant a one-element tensor multiplied or
 * added, x^3 as Pow's product x * x * x, 0.5 * x first. */
static float C044[1] = {0.044715f}, CSqrt2Pi[1] = {0.7978845608028654f};
static kiln_tensor *build_gelu_tanh_exported(kiln_graph *g) {
    kiln_tensor *x = leaf(g, "x", A, 2, 16, 4, 1, KILN_TENSOR_INPUT);
    kiln_tensor *c1 = leaf(g, "one", One, 1, 1, 1, 1, KILN_TENSOR_WEIGHT);
    kiln_tensor *ch = leaf(g, "half", Half, 1, 1, 1, 1, KILN_TENSOR_WEIGHT);
    kiln_tensor *ca = leaf(g, "c044", C044, 1, 1, 1, 1, KILN_TENSOR_WEIGHT);
    kiln_tensor *cs = leaf(g, "csqrt2pi", CSqrt2Pi, 1, 1, 1, 1, KILN_TENSOR_WEIGHT);
    kiln_tensor *cube = kiln__mul(g, kiln__mul(g, x, x), x);
    kiln_tensor *inner = kiln__mul(g, kiln__add(g, x, kiln__mul(g, cube, ca)), cs);
    return kiln__mul(g, kiln__mul(g, x, ch), kiln__add(g, kiln__tanh(g, inner), c1));
}
static void fuse_gelu_recognizes_the_tanh_form_gpt2_exports(void) {
    check_pass("fuse_gelu", build_gelu_tanh_exported, KILN_OP_GELU, KILN_OP_TANH, 1e-6);
}

static kiln_tensor *build_qkv(kiln_graph *g) {
    kiln_tensor *x = leaf(g, "x", A, 2, 16, 3, 1, KILN_TENSOR_INPUT);
    kiln_tensor *q = kiln__matmul(g, leaf(g, "wq", W, 2, 16, 8, 1, KILN_TENSOR_WEIGHT), x);
    kiln_tensor *k = kiln__matmul(g, leaf(g, "wk", W + 16 * 8, 2, 16, 4, 1, KILN_TENSOR_WEIGHT), x);
    kiln_tensor *v = kiln__matmul(g, leaf(g, "wv", B, 2, 16, 4, 1, KILN_TENSOR_WEIGHT), x);
    /* The readers see strided views of the merged result: a reshape that splits rows still works. */
    return kiln__add(g, kiln__reshape_3d(g, q, 4, 2, 3), kiln__reshape_3d(g, kiln__add(g, k, v), 2, 2, 3));
}
static void fuse_qkv_merges_three_projections_of_one_input(void) {
    check_pass("fuse_qkv", build_qkv, KILN_OP_CONCAT, KILN_OP_NONE, 0);
}

static void fuse_qkv_leaves_projections_whose_readers_need_whole_rows(void) {
    kiln_graph *g;
    kiln_pipeline_stats st;
    CHECK_OK(kiln__graph_create(64, &g));
    kiln_tensor *x = leaf(g, "x", A, 2, 16, 3, 1, KILN_TENSOR_INPUT);
    kiln_tensor *q = kiln__matmul(g, leaf(g, "wq", W, 2, 16, 8, 1, KILN_TENSOR_WEIGHT), x);
    kiln_tensor *k = kiln__matmul(g, leaf(g, "wk", W, 2, 16, 8, 1, KILN_TENSOR_WEIGHT), x);
    kiln_tensor *v = kiln__matmul(g, leaf(g, "wv", W, 2, 16, 8, 1, KILN_TENSOR_WEIGHT), x);
    kiln__graph_set_output(
        g, kiln__add(g, kiln__reshape_2d(g, q, 4, 6),
                     kiln__add(g, kiln__reshape_2d(g, k, 4, 6), kiln__reshape_2d(g, v, 4, 6))));
    CHECK_OK(kiln__pipeline_run(g, NULL, 1u << pass_index("fuse_qkv"), true, &st));
    CHECK_EQ_INT(st.pass[pass_index("fuse_qkv")].rewrites, 0);
    kiln__graph_destroy(g);
}

static kiln_tensor *build_swiglu(kiln_graph *g) {
    kiln_tensor *a = leaf(g, "a", A, 2, 24, 3, 1, KILN_TENSOR_INPUT),
                *b = leaf(g, "b", B, 2, 24, 3, 1, KILN_TENSOR_INPUT);
    return kiln__mul(g, b, kiln__silu(g, a));
}
static void fuse_swiglu_merges_gate_activation_and_product(void) {
    check_pass("fuse_swiglu", build_swiglu, KILN_OP_SWIGLU, KILN_OP_SILU, 0);
}

static kiln_tensor *build_rms(kiln_graph *g) {
    kiln_tensor *x = leaf(g, "x", A, 2, 24, 3, 1, KILN_TENSOR_INPUT),
                *w = leaf(g, "w", W, 1, 24, 1, 1, KILN_TENSOR_WEIGHT);
    return kiln__mul(g, kiln__rms_norm(g, x, 1e-5f), w);
}
static void fuse_rms_norm_multiplies_by_the_weight_in_the_same_pass(void) {
    check_pass("fuse_rms_norm", build_rms, KILN_OP_RMS_NORM_MUL, KILN_OP_RMS_NORM, 0);
}

static kiln_tensor *build_linear(kiln_graph *g) {
    kiln_tensor *w = leaf(g, "w", W, 2, 16, 12, 1, KILN_TENSOR_WEIGHT),
                *x = leaf(g, "x", A, 2, 16, 5, 1, KILN_TENSOR_INPUT);
    kiln_tensor *b = leaf(g, "b", Bias, 1, 12, 1, 1, KILN_TENSOR_WEIGHT);
    kiln_tensor *h = kiln__gelu(g, kiln__add(g, kiln__matmul(g, w, x), b)); /* matmul + add + GELU */
    return kiln__relu(g, kiln__add(g, h, leaf(g, "c", C, 2, 12, 5, 1, KILN_TENSOR_INPUT))); /* add + relu */
}
static void fuse_linear_fuses_bias_and_activations(void) {
    check_pass("fuse_linear", build_linear, KILN_OP_LINEAR, KILN_OP_GELU, 1e-5);
    check_pass("fuse_linear", build_linear, KILN_OP_ADD_ACT, KILN_OP_RELU, 1e-5);
}

static kiln_tensor *build_acc(kiln_graph *g) {
    /* d [12, 5]; add x [4, 2] into the block at row 1, column 3 (via a computed d, so acc runs in place) */
    kiln_tensor *d = kiln__scale(g, leaf(g, "d", A, 2, 12, 5, 1, KILN_TENSOR_INPUT), 1.0f, 0.5f);
    kiln_tensor *x = leaf(g, "x", B, 2, 4, 2, 1, KILN_TENSOR_INPUT);
    int64_t ne[2] = {4, 2};
    size_t nbv[2] = {sizeof(float), 12 * sizeof(float)}, nb[3] = {12 * sizeof(float), 0, 0};
    size_t off = (1 * 12 + 3) * sizeof(float);
    kiln_tensor *region = kiln__view(g, d, 2, ne, nbv, off);
    return kiln__silu(g, kiln__set(g, d, kiln__add(g, region, x), nb, off));
}
static void fuse_acc_adds_into_a_region_in_place(void) {
    check_pass("fuse_acc", build_acc, KILN_OP_ACC, KILN_OP_SET, 0);
}

static void dce_drops_nodes_that_lost_their_last_reader(void) {
    kiln_graph *g;
    int32_t n = 0;
    CHECK_OK(kiln__graph_create(32, &g));
    kiln_tensor *x = leaf(g, "x", A, 1, 8, 1, 1, KILN_TENSOR_INPUT);
    kiln_tensor *y = kiln__silu(g, kiln__silu(g, x));
    kiln__graph_set_output(g, y);
    CHECK_OK(kiln__graph_order(g));
    CHECK_EQ_INT(kiln__graph_n_nodes(g), 2);
    y->src[0] = x; /* a rewrite that left the inner silu unread */
    CHECK_OK(kiln__pass_dce(g, NULL, &n));
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(kiln__graph_n_nodes(g), 1);
    kiln__graph_destroy(g);
}

static void pass_lists_select_add_and_remove_passes(void) {
    kiln_pass_set set;
    int cse = pass_index("cse"), dce = pass_index("dce"), qkv = pass_index("fuse_qkv");
    CHECK_OK(kiln__passes_parse("cse,dce", &set));
    CHECK_EQ_INT(set, (1u << cse) | (1u << dce));
    CHECK_OK(kiln__passes_parse("-fuse_qkv", &set));
    CHECK(!(set & (1u << qkv)) && (set & (1u << cse)));
    CHECK_OK(kiln__passes_parse("none", &set));
    CHECK_EQ_INT(set, 0);
    CHECK(!(kiln__passes_without_fusions(KILN_PASSES_ALL) & (1u << qkv)));
    CHECK_STATUS(kiln__passes_parse("cse,bogus", &set), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("unknown pass 'bogus'");
}

int main(void) {
    fill_random(A, 4096, 1);
    fill_random(B, 4096, 2);
    fill_random(C, 4096, 3);
    fill_random(W, 4096, 4);
    fill_random(Bias, 64, 5);
    RUN(cse_merges_identical_nodes);
    RUN(const_fold_evaluates_constant_subgraphs_once);
    RUN(const_fold_copies_a_transposed_weight_once);
    RUN(absorb_leaves_a_transposed_weight_to_constant_folding);
    RUN(simplify_collapses_view_chains_and_drops_identity_copies);
    RUN(absorb_turns_scales_and_transposes_into_linear_flags);
    RUN(absorb_of_a_transposed_operand_runs_the_tile_at_every_level);
    RUN(fuse_attention_replaces_the_masked_score_subgraph);
    RUN(fuse_attention_reads_f16_and_q8_0_cache_rows_in_place);
    RUN(fuse_attention_fuses_every_layer_that_shares_one_mask);
    RUN(fuse_gelu_recognizes_the_tanh_approximation);
    RUN(fuse_gelu_recognizes_the_erf_form_in_each_grouping);
    RUN(fuse_gelu_recognizes_the_tanh_form_gpt2_exports);
    RUN(fuse_qkv_merges_three_projections_of_one_input);
    RUN(fuse_qkv_leaves_projections_whose_readers_need_whole_rows);
    RUN(fuse_swiglu_merges_gate_activation_and_product);
    RUN(fuse_rms_norm_multiplies_by_the_weight_in_the_same_pass);
    RUN(fuse_linear_fuses_bias_and_activations);
    RUN(fuse_acc_adds_into_a_region_in_place);
    RUN(dce_drops_nodes_that_lost_their_last_reader);
    RUN(pass_lists_select_add_and_remove_passes);
    return harness_finish();
}
