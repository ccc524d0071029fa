/*
 * fuse_gelu.c - recognize the tanh approximation of GELU as builders write it (kiln__gelu_unfused):
 *
 *   mul(scale(x, 0.5), scale(tanh(scale(add(x, scale(mul(mul(x, x), x), 0.044715)), sqrt(2/pi))), 1, +1))
 *
 * and replace the subgraph by gelu(x). Operands of mul and add may come in either order; the constants
 * must match to 1e-6 relative.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

static bool is_scale(const kiln_tensor *t, float s, float b) {
    return is_op(t, KILN_OP_SCALE) && near(t->fp[0], s) && near(t->fp[1], b);
}

/* x * x * x, in either association order of the outer product. */
static bool is_cube_of(const kiln_tensor *t, const kiln_tensor *x) {
    if (!is_op(t, KILN_OP_MUL)) return false;
    for (int k = 0; k < 2; k++) {
        const kiln_tensor *sq = t->src[k];
        if (t->src[1 - k] == x && is_op(sq, KILN_OP_MUL) && sq->src[0] == x && sq->src[1] == x) return true;
    }
    return false;
}

/* The inner argument x of add(x, scale(cube(x), 0.044715)), or NULL. */
static kiln_tensor *inner_arg(const kiln_tensor *add) {
    if (!is_op(add, KILN_OP_ADD)) return NULL;
    for (int k = 0; k < 2; k++) {
        kiln_tensor *x = add->src[k];
        const kiln_tensor *sc = add->src[1 - k];
        if (is_scale(sc, 0.044715f, 0.0f) && is_cube_of(sc->src[0], x)) return x;
    }
    return NULL;
}

static kiln_tensor *match(const kiln_tensor *t) {
    if (!is_op(t, KILN_OP_MUL)) return NULL;
    for (int k = 0; k < 2; k++) {
        const kiln_tensor *half = t->src[k], *one_plus = t->src[1 - k];
        if (!is_scale(half, 0.5f, 0.0f) || !is_scale(one_plus, 1.0f, 1.0f)) continue;
        const kiln_tensor *th = one_plus->src[0];
        if (!is_op(th, KILN_OP_TANH) || !is_scale(th->src[0], 0.7978845608028654f, 0.0f)) continue;
        kiln_tensor *x = inner_arg(th->src[0]->src[0]);
        if (x && x == half->src[0]) return x;
    }
    return NULL;
}

static kiln_tensor *fuse_one(kiln_graph *g, kiln_tensor *t) {
    kiln_tensor *x = match(t);
    return x ? kiln__gelu(g, x) : NULL;
}

kiln_status kiln__pass_fuse_gelu(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    return rewrite_each(g, fuse_one, n);
}
