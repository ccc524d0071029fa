/*
 * fuse_gelu.c - recognize GELU's two forms and replace each subgraph by one op:
 *
 *   x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   -> gelu(x): the tanh approximation, as builders
 *                                        write it (kiln__gelu_unfused) and as GPT-2's "gelu_new" exports
 *   x * 0.5 * (1 + erf(x / sqrt(2)))     -> unary(x, GELU_ERF): the exact form (torch's nn.GELU, BERT's gelu)
 *
 * each in any grouping: (x * (1 + f)) * 0.5, (x * 0.5) * (1 + f) or x * ((1 + f) * 0.5) (torch's TorchScript
 * and dynamo exporters differ), where "* c" is a scale or a mul by a one-element constant, "/ c" a div by
 * one (or a mul by 1/c), "1 +" a scale with bias 1 or an add of a one-element constant 1, and x^3 a product
 * x * x * x. Operands of mul and add may come in either order; the constants must match to 1e-6 relative.
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

/* The value of a one-element F32 constant, or false. */
static bool scalar_const(const kiln_tensor *t, float *v) {
    if (!t || !is_const(t) || t->type != KILN_TYPE_F32 || kiln__tensor_nelements(t) != 1 || !t->data)
        return false;
    *v = *(const float *)t->data;
    return true;
}

/* t = x * k (a scale, a mul by a constant either side, or a div by 1/k): x, else NULL. */
static kiln_tensor *times(const kiln_tensor *t, float k) {
    float v;
    if (is_scale(t, k, 0.0f)) return t->src[0];
    if (is_op(t, KILN_OP_MUL))
        for (int i = 0; i < 2; i++)
            if (scalar_const(t->src[1 - i], &v) && near(v, k)) return t->src[i];
    if (is_op(t, KILN_OP_DIV) && scalar_const(t->src[1], &v) && v != 0.0f && near(1.0f / v, k))
        return t->src[0];
    return NULL;
}

/* t = 1 + u (a scale with bias 1, or an add of a constant 1 either side): u, else NULL. */
static kiln_tensor *one_plus(const kiln_tensor *t) {
    float v;
    if (is_scale(t, 1.0f, 1.0f)) return t->src[0];
    if (is_op(t, KILN_OP_ADD))
        for (int i = 0; i < 2; i++)
            if (scalar_const(t->src[1 - i], &v) && near(v, 1.0f)) return t->src[i];
    return NULL;
}

/* t = 1 + erf(x / sqrt(2)): x, else NULL. */
static kiln_tensor *one_plus_erf(const kiln_tensor *t) {
    const kiln_tensor *e = one_plus(t);
    if (!is_op(e, KILN_OP_UNARY) || e->ip[0] != KILN_UNARY_ERF) return NULL;
    return times(e->src[0], 0.70710678118654752f);
}

/* t = 1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)): x, else NULL. */
static kiln_tensor *one_plus_tanh(const kiln_tensor *t) {
    const kiln_tensor *th = one_plus(t), *add;
    if (!is_op(th, KILN_OP_TANH) || !is_op(add = times(th->src[0], 0.7978845608028654f), KILN_OP_ADD)) return NULL;
    for (int k = 0; k < 2; k++) {
        kiln_tensor *x = add->src[k];
        const kiln_tensor *cube = times(add->src[1 - k], 0.044715f);
        if (cube && is_cube_of(cube, x)) return x;
    }
    return NULL;
}

/* x * 0.5 * (1 + f(x)) in any grouping, with one_plus_f recognizing 1 + f(x): x, else NULL. */
static kiln_tensor *match_form(const kiln_tensor *t, kiln_tensor *(*one_plus_f)(const kiln_tensor *)) {
    const kiln_tensor *inner = times(t, 0.5f);
    if (is_op(inner, KILN_OP_MUL)) /* (x * (1 + f)) * 0.5 */
        for (int i = 0; i < 2; i++) {
            kiln_tensor *x = one_plus_f(inner->src[1 - i]);
            if (x && x == inner->src[i]) return x;
        }
    if (is_op(t, KILN_OP_MUL)) /* (x * 0.5) * (1 + f), or x * ((1 + f) * 0.5) */
        for (int i = 0; i < 2; i++) {
            kiln_tensor *x = one_plus_f(t->src[1 - i]);
            if (x && x == times(t->src[i], 0.5f)) return x;
            const kiln_tensor *half = times(t->src[1 - i], 0.5f);
            if (half && (x = one_plus_f(half)) && x == t->src[i]) return x;
        }
    return NULL;
}

static kiln_tensor *fuse_one(kiln_graph *g, kiln_tensor *t) {
    kiln_tensor *x = match_form(t, one_plus_tanh);
    if (x && x->type == KILN_TYPE_F32 && kiln__tensor_nelements(x) == kiln__tensor_nelements(t)) return kiln__gelu(g, x);
    x = match_form(t, one_plus_erf);
    return x && x->type == KILN_TYPE_F32 && kiln__tensor_nelements(x) == kiln__tensor_nelements(t)
               ? kiln__unary(g, x, KILN_UNARY_GELU_ERF)
               : NULL;
}

kiln_status kiln__pass_fuse_gelu(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    return rewrite_each(g, fuse_one, n);
}
