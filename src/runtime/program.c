/*
 * program.c - compiling and running a program (see program.h): the client's builder emits the plain
 * graph for a key, the pass pipeline rewrites it, the scheduler places its nodes on the engine's backends
 * and the planner lays out their arenas; the result is kept per key so that varied shapes reuse a few
 * plans, and every plan shares the program's arenas.
 */
#include "runtime/program.h"

#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct kiln_program {
    kiln_engine *engine;
    kiln_program_def def;
    kiln_program_plan *plans;              /* [def.n_plans] */
    kiln_buffer arenas[KILN_MAX_BACKENDS]; /* one per backend of the engine, shared by every plan */
    uint64_t clock;
    kiln_program_plan *last;
    int64_t compiles; /* plans compiled so far */
};

static double now_ms(void) {
    return (double)kiln__now_ns() / 1e6;
}

static void logf_program(const kiln_program *p, const char *fmt, ...) KILN__PRINTF(2, 3);
static void logf_program(const kiln_program *p, const char *fmt, ...) {
    char line[256];
    va_list ap;
    if (!p->def.log) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    p->def.log(p->def.log_user, line);
}

kiln_status kiln__program_create(kiln_engine *e, const kiln_program_def *def, kiln_program **out) {
    kiln_program *p;
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln__program_create: out is NULL");
    *out = NULL;
    if (!e || !def || !def->build || !def->capacity)
        return kiln__error(KILN_E_INVALID_ARG, "a program needs an engine, a builder and a capacity");
    if (def->n_inputs < 0 || def->n_inputs > KILN_PROGRAM_MAX_INPUTS || (def->n_inputs && !def->inputs))
        return kiln__error(KILN_E_INVALID_ARG, "a program has 0 to %d named inputs, not %d",
                           KILN_PROGRAM_MAX_INPUTS, def->n_inputs);
    if (def->n_key < 1 || def->n_key > KILN_PROGRAM_MAX_KEY || def->n_plans < 0)
        return kiln__error(KILN_E_INVALID_ARG, "a program's key has 1 to %d integers, not %d",
                           KILN_PROGRAM_MAX_KEY, def->n_key);
    for (int32_t i = 0; i < def->n_inputs; i++)
        if (!def->inputs[i] || !*def->inputs[i])
            return kiln__error(KILN_E_INVALID_ARG, "a program's input %d has no name", i);
    p = kiln__calloc(1, sizeof *p);
    if (!p) return kiln__nomem("a program");
    p->engine = e;
    p->def = *def;
    if (!p->def.n_plans) p->def.n_plans = KILN_PROGRAM_PLANS;
    if (!p->def.name) p->def.name = "program";
    p->plans = kiln__calloc((size_t)p->def.n_plans, sizeof *p->plans);
    if (!p->plans) {
        kiln__dealloc(p);
        return kiln__nomem("a program's plan cache");
    }
    *out = p;
    return KILN_OK;
}

static void plan_free(kiln_program_plan *pl) {
    kiln__sched_plan_destroy(pl->sched);
    kiln__graph_destroy(pl->graph);
    memset(pl, 0, sizeof *pl);
}

void kiln__program_destroy(kiln_program *p) {
    if (!p) return;
    for (int32_t i = 0; i < p->def.n_plans; i++)
        plan_free(&p->plans[i]);
    for (int32_t i = 0; i < p->engine->n_backends; i++)
        kiln__backend_buffer_free(p->engine->backends[i], &p->arenas[i]);
    kiln__dealloc(p->plans);
    kiln__dealloc(p);
}

kiln_status kiln__program_graph(kiln_program *p, const int64_t *key, bool optimize, kiln_graph **out,
                                kiln_pipeline_stats *stats) {
    kiln_graph *g = NULL;
    kiln_pipeline_stats local;
    kiln_pass_env env = {kiln__const_store_eval, p->engine->consts};
    int32_t capacity = p->def.capacity(p->def.user, key);
    kiln_status s = kiln__graph_create(capacity, &g);
    if (!s) {
        s = p->def.build(p->def.user, g, key);
        if (!s && kiln__graph_status(g))
            s = kiln__error_prefix(kiln__graph_status(g), "building the graph: ");
    }
    if (!s)
        s = optimize ? kiln__pipeline_run(g, &env, p->def.passes, p->def.check_passes, stats ? stats : &local)
                     : kiln__graph_order(g);
    if (s) {
        kiln__graph_destroy(g);
        return s;
    }
    *out = g;
    return KILN_OK;
}

/* The input leaf named `name` (the passes keep input leaves as they are), or NULL. */
static kiln_tensor *find_input(kiln_graph *g, const char *name) {
    for (int32_t i = 0; i < kiln__graph_n_tensors(g); i++) {
        kiln_tensor *t = kiln__graph_tensor(g, i);
        if (t->op == KILN_OP_NONE && (t->flags & KILN_TENSOR_INPUT) && !strcmp(t->name, name)) return t;
    }
    return NULL;
}

static void log_key(const kiln_program *p, const int64_t *key, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (int32_t i = 0; i < p->def.n_key && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "", (long long)key[i]);
}

static kiln_status compile(kiln_program *p, const int64_t *key, kiln_program_plan *pl) {
    size_t arena = 0;
    double t0 = now_ms();
    int32_t work = p->def.work ? p->def.work(p->def.user, key) : (int32_t)KILN__MIN(key[0], INT32_MAX);
    char text[128];
    kiln_status s = kiln__program_graph(p, key, true, &pl->graph, &pl->passes);
    if (s) return s;
    /* The one-arena figures of kiln_plan_info; the scheduler then plans each backend's own arena. */
    if ((s = kiln__plan_measure(pl->graph, &arena, &pl->plan))) return s;
    if ((s = kiln__sched_plan_create(p->engine->sched, pl->graph, work, &pl->sched))) return s;
    pl->plan.arena_bytes = 0;
    for (int32_t i = 0; i < p->engine->n_backends; i++)
        pl->plan.arena_bytes += kiln__sched_plan_arena_bytes(pl->sched, i);
    for (int32_t i = 0; i < p->def.n_inputs; i++)
        pl->inputs[i] = find_input(pl->graph, p->def.inputs[i]);
    memcpy(pl->key, key, (size_t)p->def.n_key * sizeof *key);
    pl->compile_ms = now_ms() - t0;
    log_key(p, key, text, sizeof text);
    logf_program(p, "compiled the %s plan for (%s): %d -> %d nodes, arena %.1f MiB, %.1f ms", p->def.name,
                 text, pl->passes.nodes_before, pl->passes.nodes_after,
                 (double)pl->plan.arena_bytes / (1 << 20), pl->compile_ms);
    if (p->def.log && p->engine->n_backends > 1)
        kiln__sched_plan_describe(pl->sched, p->def.log, p->def.log_user);
    return KILN_OK;
}

kiln_status kiln__program_plan(kiln_program *p, const int64_t *key, kiln_program_plan **out) {
    kiln_program_plan *slot = &p->plans[0], fresh;
    size_t key_bytes = (size_t)p->def.n_key * sizeof *key;
    kiln_status s;
    for (int32_t i = 0; i < p->def.n_plans; i++) {
        kiln_program_plan *pl = &p->plans[i];
        if (pl->last_used && !memcmp(pl->key, key, key_bytes)) {
            pl->last_used = ++p->clock;
            *out = p->last = pl;
            return KILN_OK;
        }
        if (pl->last_used < slot->last_used) slot = pl;
    }
    memset(&fresh, 0, sizeof fresh);
    if ((s = compile(p, key, &fresh))) {
        plan_free(&fresh);
        return s;
    }
    if (p->last == slot) p->last = NULL;
    plan_free(slot);
    *slot = fresh;
    slot->last_used = ++p->clock;
    p->compiles++;
    *out = p->last = slot;
    return KILN_OK;
}

void kiln__program_bind(kiln_program_plan *plan, int32_t i, void *data) {
    if (i >= 0 && i < KILN_PROGRAM_MAX_INPUTS && plan->inputs[i]) plan->inputs[i]->data = data;
}

kiln_status kiln__program_run(kiln_program *p, kiln_program_plan *plan) {
    kiln_status s;
    for (int32_t i = 0; i < p->engine->n_backends; i++) {
        kiln_backend *b = p->engine->backends[i];
        size_t need = kiln__sched_plan_arena_bytes(plan->sched, i);
        if (need > p->arenas[i].size) {
            kiln__backend_buffer_free(b, &p->arenas[i]);
            if ((s = kiln__backend_buffer_alloc(b, need, &p->arenas[i]))) return s;
        }
    }
    if ((s = kiln__sched_plan_commit(plan->sched, p->arenas))) return s;
    p->last = plan;
    return kiln__sched_compute(plan->sched);
}

kiln_tensor *kiln__program_output(const kiln_program_plan *plan, int32_t i) {
    return kiln__sched_plan_output(plan->sched, i);
}

const kiln_program_plan *kiln__program_last(const kiln_program *p) {
    return p ? p->last : NULL;
}

int64_t kiln__program_compiles(const kiln_program *p) {
    return p ? p->compiles : 0;
}

size_t kiln__program_arena_bytes(const kiln_program *p, int32_t backend_index) {
    return backend_index >= 0 && backend_index < p->engine->n_backends ? p->arenas[backend_index].size : 0;
}
