/*
 * test_graph.c - the graph IR's builder contract: shape and type checks with clear errors as nodes are
 * added, the sticky status, topological order, validation after a (bad) rewrite, views, and the dump.
 */
#include "harness.h"
#include "graph_run.h"

#include <stdlib.h>

static float buf[4096];

static kiln_tensor *leaf(kiln_graph *g, const char *name, kiln_type type, int nd, int64_t a, int64_t b, int64_t c) {
    int64_t ne[3] = {a, b, c};
    return kiln__graph_leaf(g, name, type, nd, ne, buf, 0);
}

static void matmul_with_mismatched_inner_dims_is_a_builder_error(void) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(16, &g));
    kiln_tensor *w = leaf(g, "w", KILN_TYPE_F32, 2, 64, 32, 1);
    kiln_tensor *x = leaf(g, "x", KILN_TYPE_F32, 2, 63, 5, 1);
    CHECK(kiln__matmul(g, w, x) == NULL);
    CHECK_STATUS(kiln__graph_status(g), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("matmul: inner dimensions differ");
    CHECK_ERROR_MENTIONS("'w' [64, 32, 1, 1] f32");
    CHECK_ERROR_MENTIONS("'x' [63, 5, 1, 1] f32");
    kiln__graph_destroy(g);
}

static void the_first_error_sticks_and_later_calls_return_null(void) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(16, &g));
    kiln_tensor *x = leaf(g, "x", KILN_TYPE_F32, 2, 8, 2, 1);
    kiln_tensor *ids = leaf(g, "ids", KILN_TYPE_F32, 1, 2, 1, 1);
    CHECK(kiln__get_rows(g, x, ids) == NULL); /* ids must be i32 */
    CHECK_ERROR_MENTIONS("get_rows: ids must be i32");
    CHECK(kiln__silu(g, x) == NULL);           /* valid, but the graph already failed */
    CHECK(kiln__add(g, NULL, x) == NULL);
    CHECK_ERROR_MENTIONS("get_rows");          /* still the first message */
    CHECK_STATUS(kiln__graph_order(g), KILN_E_INVALID_ARG);
    kiln__graph_reset(g);
    CHECK_OK(kiln__graph_status(g));
    kiln__graph_destroy(g);
}

static void each_op_rejects_wrong_types_and_shapes(void) {
    struct {
        const char *fragment;
        int which;
    } cases[] = {
        {"rms_norm: operand must be f32", 0},      {"add: second operand does not broadcast", 1},
        {"rope: n_rot must be even", 2},           {"rope: positions must be i32", 3},
        {"attention: query heads are not a multiple", 4}, {"attention: mask must be f32 [C, T]", 5},
        {"reshape needs a source whose layout allows the new shape", 6},
        {"view reaches outside its base", 7},      {"cache_write: destination must be a 2-D f32, f16 or q8_0 cache leaf", 8},
        {"cache_write: cell indices must be i32 [T]", 9}, {"permute: axes (0, 0, 1, 2) are not a permutation", 10},
        {"matmul: weight batch dims do not broadcast", 11}, {"graph is full", 12},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_graph *g;
        CHECK_OK(kiln__graph_create(8, &g));
        kiln_tensor *f = leaf(g, "f", KILN_TYPE_F32, 3, 8, 4, 3);
        kiln_tensor *pos = leaf(g, "pos", KILN_TYPE_I32, 1, 3, 1, 1);
        int64_t ne_c[2] = {32, 4};
        switch (cases[i].which) {
        case 0: kiln__rms_norm(g, leaf(g, "h", KILN_TYPE_F16, 2, 8, 4, 1), 1e-5f); break;
        case 1: kiln__add(g, f, leaf(g, "b", KILN_TYPE_F32, 2, 3, 4, 1)); break;
        case 2: kiln__rope(g, f, pos, 3, KILN_ROPE_NORMAL, 10000.0f, 1.0f); break;
        case 3: kiln__rope(g, f, leaf(g, "p", KILN_TYPE_I32, 1, 2, 1, 1), 8, KILN_ROPE_NORMAL, 1e4f, 1.0f); break;
        case 4:
            kiln__attention(g, f, leaf(g, "k", KILN_TYPE_F32, 3, 8, 3, 5), leaf(g, "v", KILN_TYPE_F32, 3, 8, 3, 5),
                            leaf(g, "mask", KILN_TYPE_F32, 2, 5, 3, 1), 1.0f);
            break;
        case 5: /* a mask for 2 queries where q has 3 */
            kiln__attention(g, f, leaf(g, "k", KILN_TYPE_F32, 3, 8, 2, 5), leaf(g, "v", KILN_TYPE_F32, 3, 8, 2, 5),
                            leaf(g, "mask", KILN_TYPE_F32, 2, 5, 2, 1), 1.0f);
            break;
        case 6: kiln__reshape_2d(g, f, 8, 5); break;
        case 7: {
            int64_t ne[2] = {8, 4};
            size_t nb[2] = {4, 32};
            kiln__view(g, f, 2, ne, nb, 3 * 32 * 4);
            break;
        }
        case 8: kiln__cache_write(g, f, leaf(g, "x", KILN_TYPE_F32, 2, 8, 1, 1), leaf(g, "idx", KILN_TYPE_I32, 1, 1, 1, 1)); break;
        case 9: {
            kiln_tensor *cache = kiln__graph_leaf(g, "cache", KILN_TYPE_F32, 2, ne_c, buf, KILN_TENSOR_CACHE);
            kiln__cache_write(g, cache, leaf(g, "x", KILN_TYPE_F32, 2, 32, 3, 1), leaf(g, "idx", KILN_TYPE_I32, 1, 2, 1, 1));
            break;
        }
        case 10: kiln__permute(g, f, 0, 0, 1, 2); break;
        case 11: kiln__matmul(g, leaf(g, "w", KILN_TYPE_F32, 3, 8, 2, 2), f); break;
        case 12:
            for (int k = 0; k < 10; k++) kiln__silu(g, f);
            break;
        }
        CHECK(kiln__graph_status(g) != KILN_OK);
        CHECK_ERROR_MENTIONS(cases[i].fragment);
        kiln__graph_destroy(g);
    }
}

static void order_lists_each_needed_node_once_after_its_sources(void) {
    kiln_graph *g;
    kiln_status s;
    CHECK_OK(kiln__graph_create(32, &g));
    kiln_tensor *x = leaf(g, "x", KILN_TYPE_F32, 2, 4, 3, 1);
    kiln_tensor *a = kiln__silu(g, x);
    kiln_tensor *b = kiln__mul(g, a, a);
    kiln_tensor *c = kiln__add(g, b, a);
    kiln__silu(g, x); /* dead: reaches no output */
    kiln__graph_set_output(g, c);
    CHECK_OK(kiln__graph_order(g));
    CHECK_EQ_INT(kiln__graph_n_nodes(g), 3);
    CHECK(kiln__graph_node(g, 0) == a);
    CHECK(kiln__graph_node(g, 1) == b);
    CHECK(kiln__graph_node(g, 2) == c);
    CHECK_OK(kiln__graph_validate(g));
    void *arena = graph_run(g, 2, &s);
    CHECK_OK(s);
    CHECK(c->flags & KILN_TENSOR_OUTPUT);
    free(arena);
    kiln__graph_destroy(g);
}

static void validation_catches_a_node_whose_shape_no_longer_matches_its_op(void) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(32, &g));
    kiln_tensor *w = leaf(g, "w", KILN_TYPE_F32, 2, 8, 6, 1);
    kiln_tensor *x = leaf(g, "x", KILN_TYPE_F32, 2, 8, 3, 1);
    kiln_tensor *y = kiln__matmul(g, w, x);
    kiln__graph_set_output(g, y);
    CHECK_OK(kiln__graph_order(g));
    CHECK_OK(kiln__graph_validate(g));
    y->ne[0] = 7; /* a broken rewrite */
    CHECK_STATUS(kiln__graph_validate(g), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("node shape differs from what its op produces");
    kiln__graph_destroy(g);
}

static void views_are_zero_copy_and_chain_to_the_root_base(void) {
    kiln_graph *g;
    kiln_status s;
    CHECK_OK(kiln__graph_create(32, &g));
    kiln_tensor *x = leaf(g, "x", KILN_TYPE_F32, 2, 8, 6, 1);
    kiln_tensor *r = kiln__reshape_3d(g, x, 4, 2, 6);
    kiln_tensor *t = kiln__transpose(g, r);
    int64_t ne[1] = {4};
    size_t nb[1] = {4};
    kiln_tensor *v = kiln__view(g, r, 1, ne, nb, 16);
    kiln_tensor *out = kiln__add(g, kiln__cont(g, t), kiln__cont(g, t));
    kiln__graph_set_output(g, out);
    kiln__graph_set_output(g, kiln__silu(g, v));
    CHECK(r->view_src == x && t->view_src == x && v->view_src == x);
    CHECK_EQ_INT(v->view_offset, 16);
    void *arena = graph_run(g, 1, &s);
    CHECK_OK(s);
    CHECK(r->data == (void *)buf);
    CHECK(v->data == (void *)((char *)buf + 16));
    free(arena);
    kiln__graph_destroy(g);
}

static void lines_collect(void *user, const char *line) {
    char *acc = user;
    strncat(acc, line, 4096 - strlen(acc) - 2);
    strcat(acc, "\n");
}

static void dump_lists_op_shape_and_sources(void) {
    kiln_graph *g;
    static char text[4096];
    CHECK_OK(kiln__graph_create(32, &g));
    kiln_tensor *w = leaf(g, "w", KILN_TYPE_F32, 2, 8, 6, 1);
    kiln_tensor *x = leaf(g, "x", KILN_TYPE_F32, 2, 8, 3, 1);
    kiln__graph_set_output(g, kiln__tensor_set_name(kiln__matmul(g, w, x), "proj"));
    CHECK_OK(kiln__graph_order(g));
    text[0] = '\0';
    kiln__graph_dump(g, lines_collect, text);
    CHECK(strstr(text, "proj") != NULL);
    CHECK(strstr(text, "matmul") != NULL);
    CHECK(strstr(text, "f32 [6, 3, 1, 1]") != NULL);
    CHECK(strstr(text, "<- w, x") != NULL);
    kiln__graph_destroy(g);
}

int main(void) {
    RUN(matmul_with_mismatched_inner_dims_is_a_builder_error);
    RUN(the_first_error_sticks_and_later_calls_return_null);
    RUN(each_op_rejects_wrong_types_and_shapes);
    RUN(order_lists_each_needed_node_once_after_its_sources);
    RUN(validation_catches_a_node_whose_shape_no_longer_matches_its_op);
    RUN(views_are_zero_copy_and_chain_to_the_root_base);
    RUN(dump_lists_op_shape_and_sources);
    return harness_finish();
}
