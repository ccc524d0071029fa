/*
 * compile.h - the inference context's private state and its compiled plans (context.c, compile.c).
 *
 * A compiled plan is the forward graph for one batch size after the pass pipeline, with its memory
 * planned and the nodes that take the KV position as a run-time argument listed. The context keeps up
 * to KILN_PLAN_CACHE plans (least recently used replaced); all share one arena, grown to the largest.
 */
#ifndef KILN_MODEL_COMPILE_H
#define KILN_MODEL_COMPILE_H

#include "model/model.h"

#include "backend/backend.h"
#include "graph/passes/passes.h"
#include "plan/const_store.h"
#include "plan/plan.h"

#define KILN_PLAN_CACHE 4

typedef struct kiln_compiled {
    int32_t n_tokens;     /* the batch size; 0 = empty slot */
    kiln_graph *graph;
    kiln_tensor *logits;  /* [V, 1] output */
    kiln_tensor **npast;  /* nodes whose ip[0] is the KV position */
    int32_t n_npast;
    kiln_plan_stats plan;
    kiln_pipeline_stats passes;
    uint64_t last_used;
} kiln_compiled;

struct kiln_ctx {
    const kiln_model *model;
    kiln_backend *backend;
    int32_t n_ctx;
    int32_t n_past;
    kiln_buffer kv;       /* [L][K|V][n_ctx rows of Hkv * D elements of kv_type] */
    kiln_type kv_type;
    size_t kv_row_bytes;
    kiln_buffer arena;    /* planned intermediates, shared by all plans */
    kiln_const_store *consts;
    kiln_pass_set passes;
    bool check_passes;
    int32_t *ids;         /* [n_ctx] inputs of the current batch */
    int32_t *pos;         /* [n_ctx] */
    kiln_compiled plans[KILN_PLAN_CACHE];
    uint64_t clock;
};

/* Build the graph for n_tokens into a new graph, optionally running the passes. */
kiln_status kiln__compile_graph(kiln_ctx *c, int32_t n_tokens, bool optimize, kiln_graph **out,
                                kiln_pipeline_stats *stats);
/* The plan for n_tokens from the cache, compiled if missing. */
kiln_status kiln__ctx_plan(kiln_ctx *c, int32_t n_tokens, kiln_compiled **out);
/* Set the run-time argument, commit the plan into the arena and compute. */
kiln_status kiln__compiled_run(kiln_ctx *c, kiln_compiled *plan);
void kiln__compiled_free(kiln_compiled *plan);

#endif
