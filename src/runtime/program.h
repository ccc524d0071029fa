/*
 * program.h - a compiled program: any graph with named inputs and outputs, compiled on an engine by the
 * pass pipeline, the scheduler and the planner, and run as often as its client likes.
 *
 * A program is defined by its client (kiln_program_def): the names of its inputs, the length of its shape
 * key, and a builder that emits the graph for one key. The key is a short vector of integers the client
 * chooses: the LLM context's is (token bucket, output bucket); an imported model's is the values bound to
 * its dynamic dimensions (bucketed where the client wants fewer plans). The builder creates each input as
 * a leaf flagged KILN_TENSOR_INPUT with the declared name (its data may be NULL: it is bound before each
 * run), creates whatever other leaves it needs (weights, caches, constants), and marks the outputs
 * (kiln__graph_set_output) in the order the client will read them.
 *
 * The program compiles one plan per key on first use, keeps up to def->n_plans of them (the least recently
 * used replaced), and gives all its plans one arena per backend of the engine, grown to the largest plan's
 * need. Once every key in use has been compiled, planning and running allocate nothing.
 *
 * Running, with the engine's lock held (engine.h) from plan to the last read of an output:
 *   kiln__program_plan(p, key, &plan);           compiled on first use
 *   kiln__program_bind(plan, i, data);           for every input i the client fills
 *   kiln__program_run(p, plan);                  arenas grown if needed, commit, compute
 *   kiln__program_output(plan, i)->data;         output i, in host memory
 *
 * Ownership: a program borrows its engine (which must outlive it) and the builder's user pointer; it owns
 * its plans and arenas. Not thread-safe: the engine lock serializes users.
 */
#ifndef KILN_RUNTIME_PROGRAM_H
#define KILN_RUNTIME_PROGRAM_H

#include "graph/graph.h"
#include "graph/passes/passes.h"
#include "plan/plan.h"
#include "runtime/engine.h"

#define KILN_PROGRAM_MAX_KEY 8     /* integers in a shape key */
#define KILN_PROGRAM_MAX_INPUTS 32 /* named inputs */
#define KILN_PROGRAM_PLANS 8       /* plans kept when the definition says 0 */

typedef struct kiln_program kiln_program;

typedef struct kiln_program_def {
    const char *name;          /* for the log: "decoder", an ONNX file's graph name */
    int32_t n_inputs;          /* 0 .. KILN_PROGRAM_MAX_INPUTS */
    const char *const *inputs; /* their names; the strings must outlive the program */
    int32_t n_key;             /* 1 .. KILN_PROGRAM_MAX_KEY */
    int32_t n_plans;           /* plans kept; 0: KILN_PROGRAM_PLANS */
    /* Tensors the graph for key needs room for (leaves, nodes, and what the passes and the scheduler add). */
    int32_t (*capacity)(void *user, const int64_t *key);
    /* Emit the graph for key into g (empty, of capacity(key)): the inputs, everything else, the outputs.
     * A failure is returned, or left in the graph's sticky status. */
    kiln_status (*build)(void *user, kiln_graph *g, const int64_t *key);
    /* The batch size the scheduler's cost rule holds each backend's min_batch to (kiln_sched_backend),
     * e.g. the tokens of the batch; NULL: key[0]. */
    int32_t (*work)(void *user, const int64_t *key);
    void *user;
    kiln_pass_set passes; /* the pass pipeline's selection (passes.h) */
    bool check_passes;    /* validate the graph after every pass (tests, --check-passes) */
    kiln_log_fn log;      /* one line per compiled plan, and the scheduler's listing; NULL: quiet */
    void *log_user;
} kiln_program_def;

/* One compiled plan. Clients read it; the program writes it. */
typedef struct kiln_program_plan {
    int64_t key[KILN_PROGRAM_MAX_KEY];
    kiln_graph *graph;                            /* after the passes and the scheduler's rewrite */
    kiln_tensor *inputs[KILN_PROGRAM_MAX_INPUTS]; /* in declared order; NULL where a pass removed it */
    kiln_sched_plan *sched;                       /* which backend runs each node; the copies */
    kiln_plan_stats plan;                         /* the planner's figures; arena_bytes over all backends */
    kiln_pipeline_stats passes;                   /* what the pass pipeline did */
    double compile_ms;
    uint64_t last_used; /* 0: an empty slot */
} kiln_program_plan;

/* The definition is copied (the strings it points at are not). */
kiln_status kiln__program_create(kiln_engine *e, const kiln_program_def *def, kiln_program **out);
void kiln__program_destroy(kiln_program *p); /* frees the arenas: hold the engine lock, or be its only user */

/* The plan for key from the cache, compiled if missing. On failure no plan is replaced. */
kiln_status kiln__program_plan(kiln_program *p, const int64_t *key, kiln_program_plan **out);
/* Point input i (declared order) at data for the next runs. An input the passes removed is ignored. */
void kiln__program_bind(kiln_program_plan *plan, int32_t i, void *data);
/* Grow the arenas if this plan needs more, commit it and compute. */
kiln_status kiln__program_run(kiln_program *p, kiln_program_plan *plan);
/* Output i (the builder's order) in host memory, valid until the plan is replaced or the program goes. */
kiln_tensor *kiln__program_output(const kiln_program_plan *plan, int32_t i);

/* The graph for key, built afresh and, when optimize, run through the passes (not scheduled nor planned):
 * for dumps and tests. The caller destroys it. stats may be NULL. */
kiln_status kiln__program_graph(kiln_program *p, const int64_t *key, bool optimize, kiln_graph **out,
                                kiln_pipeline_stats *stats);
/* The plan run or compiled most recently (tests), or NULL. */
const kiln_program_plan *kiln__program_last(const kiln_program *p);
/* Plans compiled so far (kiln__program_graph builds count not). */
int64_t kiln__program_compiles(const kiln_program *p);
/* Bytes of arena the program holds on the engine's backend i. */
size_t kiln__program_arena_bytes(const kiln_program *p, int32_t backend_index);

#endif
