/*
 * onnx_session.c - kiln_onnx_session: an ONNX model run as a compiled program (runtime/program.h).
 *
 * The session owns an engine of its own (threads, devices) and one program whose builder is the lowering
 * (onnx_lower.c). A run checks the caller's inputs against the model (names, types, ranks, fixed dims,
 * sizes), binds the dynamic dims into the program's shape key, and runs the plan for that key, compiled
 * on first use. The inputs are read in place; outputs stay in the plan's arena until the next run, and
 * kiln_onnx_session_output copies them out. After a key has been compiled, running it allocates nothing.
 */
#include "import/onnx/onnx_lower.h"

#include "core/core.h"
#include "runtime/program.h"

#include <stdint.h>
#include <string.h>

struct kiln_onnx_session {
    const kiln_onnx *m;
    kiln__onnx_lowering lowering;
    kiln_engine *engine;
    kiln_program *program;
    const char **input_names; /* [n_feed], the model's strings */
    kiln_program_plan *last;  /* the plan of the last successful run */
    int64_t runs;
};

kiln_onnx_session_params kiln_onnx_session_params_default(void) {
    kiln_onnx_session_params p;
    memset(&p, 0, sizeof p);
    return p;
}

static int32_t capacity_of(void *user, const int64_t *key) {
    (void)key;
    return kiln__onnx_lower_capacity(&((kiln_onnx_session *)user)->lowering);
}

static kiln_status build(void *user, kiln_graph *g, const int64_t *key) {
    kiln_onnx_session *s = user;
    return kiln__onnx_lower(&s->lowering, g, key);
}

static kiln_status start(kiln_onnx_session *s, const kiln_onnx_session_params *params) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_program_def def;
    kiln_status st;
    const kiln_onnx *m = s->m;
    if (m->n_feed > KILN_PROGRAM_MAX_INPUTS)
        return kiln__error(KILN_E_UNSUPPORTED, "the model has %d inputs; Kiln runs up to %d", m->n_feed,
                           KILN_PROGRAM_MAX_INPUTS);
    if (params->n_plans < 0)
        return kiln__error(KILN_E_INVALID_ARG, "n_plans %d is negative", params->n_plans);
    if ((st = kiln__onnx_lower_init(&s->lowering, m))) return st;
    s->input_names = kiln__alloc_array((size_t)KILN__MAX(1, m->n_feed), sizeof *s->input_names);
    if (!s->input_names) return kiln__nomem("an ONNX session's input names");
    for (int32_t i = 0; i < m->n_feed; i++)
        s->input_names[i] = m->inputs[m->feed[i]].name;
    mp.n_threads = params->n_threads;
    mp.devices = params->devices;
    if ((st = kiln__engine_create(&mp, NULL, NULL, 0, &s->engine))) return st;
    memset(&def, 0, sizeof def);
    def.name = m->graph_name && m->graph_name[0] ? m->graph_name : "onnx";
    def.n_inputs = m->n_feed;
    def.inputs = s->input_names;
    def.n_key = KILN__MAX(1, s->lowering.n_syms);
    def.n_plans = params->n_plans;
    def.capacity = capacity_of;
    def.build = build;
    def.user = s;
    def.passes = KILN_PASSES_ALL;
    return kiln__program_create(s->engine, &def, &s->program);
}

kiln_status kiln_onnx_session_create(const kiln_onnx *model, const kiln_onnx_session_params *params,
                                     kiln_onnx_session **out) {
    kiln_onnx_session_params defaults = kiln_onnx_session_params_default();
    kiln_onnx_session *s;
    kiln_status st;
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_onnx_session_create: out is NULL");
    *out = NULL;
    if (!model) return kiln__error(KILN_E_INVALID_ARG, "kiln_onnx_session_create: model is NULL");
    s = kiln__calloc(1, sizeof *s);
    if (!s) return kiln__nomem("an ONNX session");
    s->m = model;
    if ((st = start(s, params ? params : &defaults))) {
        kiln_onnx_session_destroy(s);
        return st;
    }
    *out = s;
    return KILN_OK;
}

void kiln_onnx_session_destroy(kiln_onnx_session *s) {
    if (!s) return;
    kiln__program_destroy(s->program); /* its only user: no lock needed */
    kiln__engine_destroy(s->engine);
    kiln__onnx_lower_free(&s->lowering);
    kiln__dealloc(s->input_names);
    kiln__dealloc(s);
}

/* The fed input named name, or -1. */
static int32_t feed_index(const kiln_onnx_session *s, const char *name) {
    for (int32_t i = 0; i < s->m->n_feed; i++)
        if (!strcmp(s->input_names[i], name)) return i;
    return -1;
}

/* Check one input buffer against fed input i and bind its dynamic dims into key; shapes_only: its data
 * and size are not looked at (a graph dump). */
static kiln_status check_buffer(const kiln_onnx_session *s, int32_t i, const kiln_onnx_buffer *b,
                                int64_t *key, bool *bound, bool shapes_only) {
    const kiln__onnx_vinfo *info = &kiln__onnx_value_find(s->m, b->name)->info;
    uint64_t n = 1;
    if (b->type != KILN_ONNX_FLOAT)
        return kiln__error(KILN_E_INVALID_ARG, "input '%s': type %s given, the model takes float", b->name,
                           kiln_onnx_type_name(b->type));
    if (b->rank != info->rank)
        return kiln__error(KILN_E_INVALID_ARG, "input '%s': rank %d given, the model takes rank %d", b->name,
                           b->rank, info->rank);
    for (int32_t j = 0; j < b->rank; j++) {
        int8_t sym = s->lowering.axis_sym[i][j];
        int64_t d = b->shape[j];
        if (d <= 0 || d > INT32_MAX)
            return kiln__error(KILN_E_INVALID_ARG, "input '%s': dim %d is %lld (1 to 2^31-1 run)", b->name, j,
                               (long long)d);
        if (sym < 0 && d != info->dims[j].value)
            return kiln__error(KILN_E_INVALID_ARG, "input '%s': dim %d is %lld, the model's is %lld", b->name,
                               j, (long long)d, (long long)info->dims[j].value);
        if (sym >= 0 && bound[sym] && key[sym] != d)
            return kiln__error(KILN_E_INVALID_ARG,
                               "input '%s': dim %d ('%s') is %lld, bound to %lld by an earlier dim", b->name,
                               j, s->lowering.sym_names[sym], (long long)d, (long long)key[sym]);
        if (sym >= 0) {
            key[sym] = d;
            bound[sym] = true;
        }
        if (kiln__mul_overflow_u64(n, (uint64_t)d, &n))
            return kiln__error(KILN_E_RANGE, "input '%s': the element count overflows", b->name);
    }
    if (shapes_only) return KILN_OK;
    if (!b->data || ((uintptr_t)b->data & 3u))
        return kiln__error(KILN_E_INVALID_ARG, "input '%s': data is %s", b->name,
                           b->data ? "not aligned to 4 bytes" : "NULL");
    if (n > SIZE_MAX / sizeof(float) || b->size != n * sizeof(float))
        return kiln__error(KILN_E_INVALID_ARG, "input '%s': %zu bytes given, its shape needs %llu", b->name,
                           b->size, (unsigned long long)(n * sizeof(float)));
    return KILN_OK;
}

/* The key of a run from its inputs; slot[i] = the buffer fed to input i. */
static kiln_status key_of(const kiln_onnx_session *s, const kiln_onnx_buffer *inputs, int32_t n_inputs,
                          int64_t *key, const kiln_onnx_buffer **slot, bool shapes_only) {
    bool bound[KILN_ONNX_MAX_SYMS] = {false};
    kiln_status st;
    key[0] = 1;
    if (n_inputs != s->m->n_feed || (n_inputs && !inputs))
        return kiln__error(KILN_E_INVALID_ARG, "%d inputs given, the model takes %d", n_inputs, s->m->n_feed);
    for (int32_t k = 0; k < n_inputs; k++) {
        const kiln_onnx_buffer *b = &inputs[k];
        int32_t i = b->name ? feed_index(s, b->name) : -1;
        if (i < 0)
            return kiln__error(KILN_E_NOT_FOUND, "input '%s' is not one the model takes",
                               b->name ? b->name : "(null)");
        if (slot[i]) return kiln__error(KILN_E_INVALID_ARG, "input '%s' is given twice", b->name);
        slot[i] = b;
        if ((st = check_buffer(s, i, b, key, bound, shapes_only))) return st;
    }
    return KILN_OK;
}

kiln_status kiln_onnx_session_run(kiln_onnx_session *s, const kiln_onnx_buffer *inputs, int32_t n_inputs) {
    int64_t key[KILN_PROGRAM_MAX_KEY] = {1};
    const kiln_onnx_buffer *slot[KILN_PROGRAM_MAX_INPUTS] = {NULL};
    kiln_program_plan *plan = NULL;
    kiln_status st;
    if (!s) return kiln__error(KILN_E_INVALID_ARG, "kiln_onnx_session_run: session is NULL");
    s->last = NULL;
    if ((st = key_of(s, inputs, n_inputs, key, slot, false))) return st;
    pthread_mutex_lock(&s->engine->lock);
    st = kiln__program_plan(s->program, key, &plan);
    if (!st) {
        for (int32_t i = 0; i < s->m->n_feed; i++)
            kiln__program_bind(plan, i, slot[i]->data);
        st = kiln__program_run(s->program, plan);
    }
    pthread_mutex_unlock(&s->engine->lock);
    if (st) return st;
    s->last = plan;
    s->runs++;
    return KILN_OK;
}

kiln_status kiln_onnx_session_graph_dump(kiln_onnx_session *s, const kiln_onnx_buffer *inputs,
                                         int32_t n_inputs, bool optimized,
                                         void (*write)(void *user, const char *line), void *user) {
    int64_t key[KILN_PROGRAM_MAX_KEY] = {1};
    const kiln_onnx_buffer *slot[KILN_PROGRAM_MAX_INPUTS] = {NULL};
    kiln_graph *g = NULL;
    kiln_status st;
    if (!s || !write) return kiln__error(KILN_E_INVALID_ARG, "kiln_onnx_session_graph_dump: NULL argument");
    if ((st = key_of(s, inputs, n_inputs, key, slot, true))) return st;
    pthread_mutex_lock(&s->engine->lock); /* folding constants runs on the engine's CPU backend */
    st = kiln__program_graph(s->program, key, optimized, &g, NULL);
    pthread_mutex_unlock(&s->engine->lock);
    if (st) return st;
    kiln__graph_dump(g, write, user);
    kiln__graph_destroy(g);
    return KILN_OK;
}

kiln_status kiln_onnx_session_output(const kiln_onnx_session *s, int32_t i, void *dst, size_t dst_size,
                                     kiln_onnx_buffer *out) {
    const kiln_tensor *t;
    int32_t rank;
    if (!s || !out)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_onnx_session_output: session or out is NULL");
    if (i < 0 || i >= s->m->n_outputs)
        return kiln__error(KILN_E_RANGE, "output %d: the model has %d outputs", i, s->m->n_outputs);
    if (!s->last) return kiln__error(KILN_E_INVALID_ARG, "output %d: no successful run to read", i);
    t = kiln__program_output(s->last, i);
    rank = kiln__onnx_value_find(s->m, s->m->outputs[i].name)->info.rank;
    memset(out, 0, sizeof *out);
    out->name = s->m->outputs[i].name;
    out->type = KILN_ONNX_FLOAT;
    out->rank = rank;
    kiln__onnx_shape_of(t, rank, out->shape);
    out->data = t->data;
    out->size = (size_t)kiln__tensor_nelements(t) * sizeof(float);
    if (dst) {
        if (dst_size < out->size)
            return kiln__error(KILN_E_RANGE, "output '%s' needs %zu bytes, the buffer holds %zu", out->name,
                               out->size, dst_size);
        memcpy(dst, t->data, out->size);
    }
    return KILN_OK;
}

int64_t kiln_onnx_session_runs(const kiln_onnx_session *s) {
    return s ? s->runs : 0;
}
int64_t kiln_onnx_session_compiles(const kiln_onnx_session *s) {
    return s ? kiln__program_compiles(s->program) : 0;
}
