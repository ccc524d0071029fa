/*
 * pipeline.c - the ordered list of passes, the pass-set syntax, and run-until-stable.
 *
 * Order matters: the attention fusion must see the plain attention subgraph before absorption turns its
 * scale and transposed matmul into linear flags; SwiGLU must claim silu(gate) before the linear fusion
 * could fold the silu into the gate projection.
 */
#include "graph/passes/passes.h"

#include "core/core.h"

#include <string.h>

static const kiln_pass pass_list[] = {
    {"simplify", kiln__pass_simplify, false, "collapse view chains, drop identity views and copies"},
    {"fuse_attention", kiln__pass_fuse_attention, true, "QK^T, scale, mask add, softmax, V -> attention"},
    {"fuse_gelu", kiln__pass_fuse_gelu, true, "the tanh-approximation subgraph -> gelu"},
    {"fuse_qkv", kiln__pass_fuse_qkv, true, "three projections of one input -> one matmul and views"},
    {"absorb", kiln__pass_absorb, false, "scalar multiplies and transposes -> linear alpha and flags"},
    {"fuse_swiglu", kiln__pass_fuse_swiglu, true, "silu(gate) * up -> swiglu"},
    {"fuse_linear", kiln__pass_fuse_linear, true, "matmul + bias (+ activation), add + activation"},
    {"fuse_rms_norm", kiln__pass_fuse_rms_norm, true, "rms_norm * weight -> rms_norm_mul"},
    {"fuse_acc", kiln__pass_fuse_acc, true, "set(d, view(d) + x) -> acc(d, x), in place"},
    {"cse", kiln__pass_cse, false, "merge nodes with the same op, sources and parameters"},
    {"const_fold", kiln__pass_const_fold, false, "evaluate subgraphs of constants once"},
    {"dce", kiln__pass_dce, false, "drop nodes that reach no output"},
};

_Static_assert(sizeof pass_list / sizeof pass_list[0] <= KILN_MAX_PASSES, "too many passes");

const kiln_pass *kiln__passes(int32_t *count) {
    *count = (int32_t)(sizeof pass_list / sizeof pass_list[0]);
    return pass_list;
}

kiln_pass_set kiln__passes_without_fusions(kiln_pass_set set) {
    for (size_t i = 0; i < sizeof pass_list / sizeof pass_list[0]; i++)
        if (pass_list[i].fusion) set &= ~(1u << i);
    return set;
}

static int find_pass(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof pass_list / sizeof pass_list[0]; i++)
        if (strlen(pass_list[i].name) == len && !strncmp(pass_list[i].name, name, len)) return (int)i;
    return -1;
}

kiln_status kiln__passes_parse(const char *list, kiln_pass_set *out) {
    kiln_pass_set set = (list && list[0] == '-') ? KILN_PASSES_ALL : 0;
    const char *p = list ? list : "all";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        bool remove = len > 0 && p[0] == '-';
        const char *name = remove ? p + 1 : p;
        size_t n = remove ? len - 1 : len;
        if (n == 3 && !strncmp(name, "all", 3)) set = remove ? 0 : KILN_PASSES_ALL;
        else if (n == 4 && !strncmp(name, "none", 4)) set = 0;
        else if (n > 0) {
            int i = find_pass(name, n);
            if (i < 0) return kiln__error(KILN_E_INVALID_ARG, "unknown pass '%.*s'", (int)KILN__MIN(n, 64), name);
            set = remove ? set & ~(1u << i) : set | (1u << i);
        }
        p += len;
        if (*p == ',') p++;
    }
    *out = set;
    return KILN_OK;
}

kiln_status kiln__pipeline_run(kiln_graph *g, const kiln_pass_env *env, kiln_pass_set set, bool check,
                               kiln_pipeline_stats *stats) {
    int32_t n_passes = (int32_t)(sizeof pass_list / sizeof pass_list[0]);
    kiln_status s;
    memset(stats, 0, sizeof *stats);
    if ((s = kiln__graph_order(g))) return s;
    stats->nodes_before = kiln__graph_n_nodes(g);
    for (int round = 0; round < 10; round++) {
        int32_t changed = 0;
        stats->rounds = round + 1;
        for (int32_t i = 0; i < n_passes; i++) {
            int32_t n = 0;
            if (!(set & (1u << i))) continue;
            if ((s = pass_list[i].run(g, env, &n)))
                return kiln__error_prefix(s, "pass %s: ", pass_list[i].name);
            if ((s = kiln__graph_status(g))) return kiln__error_prefix(s, "pass %s: ", pass_list[i].name);
            stats->pass[i].ran = true;
            stats->pass[i].rewrites += n;
            if (round == 0) stats->pass[i].nodes_after = kiln__graph_n_nodes(g);
            changed += n;
            if (check && (s = kiln__graph_validate(g)))
                return kiln__error_prefix(s, "graph invalid after pass %s: ", pass_list[i].name);
        }
        if (!changed) break;
    }
    stats->nodes_after = kiln__graph_n_nodes(g);
    return KILN_OK;
}
