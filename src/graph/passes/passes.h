/*
 * passes.h - the graph compiler's pass pipeline.
 *
 * A pass is one file, kiln__pass_<name>(graph, env, &n_rewrites): it rewrites the graph in place through
 * the primitives of graph/rewrite.c and reports how many rewrites it made. The pipeline runs the enabled
 * passes in a fixed order, round after round, until a round changes nothing. Each pass can be switched off
 * by name (`--passes`, `KILN_PASSES`), and all fusions at once (`--no-fuse`). In check mode (the test
 * suite sets KILN_CHECK_PASSES=1) the graph is validated after every pass.
 */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "graph/graph.h"

/* Evaluates a constant node (all sources constant) into memory that outlives the graph; used by constant
 * folding. *data receives the result, laid out densely in the node's shape. */
typedef kiln_status (*kiln_const_eval_fn)(void *user, const kiln_tensor *node, void **data);

typedef struct kiln_pass_env {
    kiln_const_eval_fn eval; /* NULL: constant folding does nothing */
    void *eval_user;
} kiln_pass_env;

typedef kiln_status (*kiln_pass_fn)(kiln_graph *g, const kiln_pass_env *env, int32_t *n_rewrites);

typedef struct kiln_pass {
    const char *name;
    kiln_pass_fn run;
    bool fusion; /* switched off by --no-fuse */
    const char *what;
} kiln_pass;

kiln_status kiln__pass_simplify(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_fuse_attention(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_fuse_gelu(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_fuse_qkv(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_absorb(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_fuse_swiglu(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_fuse_linear(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_fuse_rms_norm(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_fuse_acc(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_cse(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_const_fold(kiln_graph *g, const kiln_pass_env *env, int32_t *n);
kiln_status kiln__pass_dce(kiln_graph *g, const kiln_pass_env *env, int32_t *n);

#define KILN_MAX_PASSES 16

/* The passes in pipeline order. */
const kiln_pass *kiln__passes(int32_t *count);

/* Which passes run: one bit per pass index. */
typedef uint32_t kiln_pass_set;
#define KILN_PASSES_ALL ((kiln_pass_set)0xffffffffu)

/* Parse "all", "none", or a comma-separated list of pass names, each optionally prefixed with '-' to
 * remove it from the set built so far (a list starting with '-' starts from "all"). */
kiln_status kiln__passes_parse(const char *list, kiln_pass_set *out);
/* The set without the fusion passes. */
kiln_pass_set kiln__passes_without_fusions(kiln_pass_set set);

typedef struct kiln_pass_stat {
    int32_t rewrites;      /* over all rounds */
    int32_t nodes_after;   /* node count after the pass ran in the first round */
    bool ran;
} kiln_pass_stat;

typedef struct kiln_pipeline_stats {
    int32_t nodes_before;
    int32_t nodes_after;
    int32_t rounds;
    kiln_pass_stat pass[KILN_MAX_PASSES];
} kiln_pipeline_stats;

/* Run the enabled passes until stable (at most 10 rounds). The graph must be ordered. check: validate
 * after every pass. */
kiln_status kiln__pipeline_run(kiln_graph *g, const kiln_pass_env *env, kiln_pass_set set, bool check,
                               kiln_pipeline_stats *stats);

#endif
