/*
 * onnx_session.c - kiln_onnx_session: an ONNX model run as a compiled program (runtime/program.h).
 *
 * The session owns an engine of its own (threads, devices) and one program whose builder is the lowering
 * (onnx_lower.c). A run checks the caller's inputs against the model (names, types, ranks, fixed dims,
 * sizes), binds the dynamic dims into the program's shape key, and runs the plan for that key, compiled
 * on first use. Float inputs are read in place; integer and bool inputs are converted into buffers of the
 * session's (I32 ids, range-checked against the tables they index, or exact floats up to 2^24). Float
 * outputs stay in the plan's arena until the next run; integer and bool outputs are converted back after
 * the run. Once a key has been compiled and its buffers have grown, running it allocates nothing.
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
    struct stage { /* a converted input or output */
        void *data;
        size_t cap;
    } * in_stage, *out_stage; /* [n_feed], [n_outputs] */
};

size_t kiln_onnx_type_size(kiln_onnx_type type) {
    switch (type) {
    case KILN_ONNX_FLOAT:
    case KILN_ONNX_INT32: return 4;
    case KILN_ONNX_INT64: return 8;
    case KILN_ONNX_UINT8:
    case KILN_ONNX_INT8:
    case KILN_ONNX_BOOL: return 1;
    default: return 0;
    }
}

/* Bytes of one element of a type Kiln feeds or returns (never another: the session refuses those). */
static size_t elem_size(int32_t type) {
    return kiln_onnx_type_size((kiln_onnx_type)type);
}

/* Room for size bytes in a stage (grown, never shrunk). */
static void *stage_room(struct stage *st, size_t size) {
    if (size > st->cap) {
        void *p = kiln__realloc(st->data, KILN__MAX(size, 64));
        if (!p) return NULL;
        st->data = p;
        st->cap = KILN__MAX(size, 64);
    }
    return st->data;
}

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
    if (params->weights && params->weights[0] && strcmp(params->weights, "float") != 0 &&
        strcmp(params->weights, "q8_0") != 0)
        return kiln__error(KILN_E_INVALID_ARG, "weights '%.32s': give \"float\" or \"q8_0\"",
                           params->weights);
    if ((st = kiln__onnx_lower_init(&s->lowering, m))) return st;
    s->lowering.q8_weights = params->weights && !strcmp(params->weights, "q8_0");
    s->input_names = kiln__alloc_array((size_t)KILN__MAX(1, m->n_feed), sizeof *s->input_names);
    s->in_stage = kiln__calloc((size_t)KILN__MAX(1, m->n_feed), sizeof *s->in_stage);
    s->out_stage = kiln__calloc((size_t)KILN__MAX(1, m->n_outputs), sizeof *s->out_stage);
    if (!s->input_names || !s->in_stage || !s->out_stage) return kiln__nomem("an ONNX session's tables");
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
    for (int32_t i = 0; s->in_stage && i < s->m->n_feed; i++)
        kiln__dealloc(s->in_stage[i].data);
    for (int32_t i = 0; s->out_stage && i < s->m->n_outputs; i++)
        kiln__dealloc(s->out_stage[i].data);
    kiln__dealloc(s->in_stage);
    kiln__dealloc(s->out_stage);
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
    if ((int32_t)b->type != info->type)
        return kiln__error(KILN_E_INVALID_ARG, "input '%s': type %s given, the model takes %s", b->name,
                           kiln_onnx_type_name(b->type), kiln__onnx_type_name(info->type));
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
    size_t es = elem_size(info->type);
    if (!b->data || (info->type == KILN_ONNX_FLOAT && ((uintptr_t)b->data & 3u)))
        return kiln__error(KILN_E_INVALID_ARG, "input '%s': data is %s", b->name,
                           b->data ? "not aligned to 4 bytes" : "NULL");
    if (n > SIZE_MAX / es || b->size != n * es)
        return kiln__error(KILN_E_INVALID_ARG, "input '%s': %zu bytes given, its shape needs %llu", b->name,
                           b->size, (unsigned long long)(n * es));
    return KILN_OK;
}

/* Input i's data as the lowering holds it: float in place; integers and bools converted (I32 ids within
 * the rows of the tables they index, negative ids counted from the end; or floats, exact up to 2^24). */
static kiln_status convert_input(kiln_onnx_session *s, int32_t i, const kiln_onnx_buffer *b, void **data) {
    size_t es = elem_size(b->type), n = b->size / es;
    bool ids = s->lowering.feed_type[i] == KILN_TYPE_I32;
    int64_t rows = s->lowering.feed_rows[i];
    void *out;
    if (b->type == KILN_ONNX_FLOAT) return *data = b->data, KILN_OK;
    if (!(out = stage_room(&s->in_stage[i], n * 4))) return kiln__nomem("an input's conversion");
    for (size_t j = 0; j < n; j++) {
        const uint8_t *p = (const uint8_t *)b->data + j * es;
        int64_t v;
        if (b->type == KILN_ONNX_INT64) {
            memcpy(&v, p, 8);
        } else if (b->type == KILN_ONNX_INT32) {
            int32_t w;
            memcpy(&w, p, 4);
            v = w;
        } else if (b->type == KILN_ONNX_UINT8) {
            v = p[0];
        } else if (b->type == KILN_ONNX_INT8) {
            v = (int8_t)p[0];
        } else {
            v = p[0] != 0;
        }
        if (ids) {
            if (v < -rows || v >= rows)
                return kiln__error(KILN_E_INVALID_ARG,
                                   "input '%s': element %zu is %lld, out of [%lld, %lld) (the rows "
                                   "of the table it indexes)",
                                   b->name, j, (long long)v, (long long)-rows, (long long)rows);
            ((int32_t *)out)[j] = (int32_t)(v < 0 ? v + rows : v);
        } else {
            if (v > (1 << 24) || v < -(1 << 24))
                return kiln__error(KILN_E_INVALID_ARG,
                                   "input '%s': element %zu is %lld; Kiln computes integer "
                                   "data exactly up to 2^24",
                                   b->name, j, (long long)v);
            ((float *)out)[j] = (float)v;
        }
    }
    *data = out;
    return KILN_OK;
}

/* After a run: integer and bool outputs converted from the floats that hold them. */
static kiln_status convert_outputs(kiln_onnx_session *s, kiln_program_plan *plan) {
    for (int32_t i = 0; i < s->m->n_outputs; i++) {
        int32_t type = kiln__onnx_value_find(s->m, s->m->outputs[i].name)->info.type;
        const kiln_tensor *t = kiln__program_output(plan, i);
        int64_t n = kiln__tensor_nelements(t);
        uint8_t *out;
        if (type == KILN_ONNX_FLOAT) continue;
        if (!(out = stage_room(&s->out_stage[i], (size_t)n * elem_size(type))))
            return kiln__nomem("an output's conversion");
        for (int64_t j = 0; j < n; j++) {
            float v = ((const float *)t->data)[j];
            if (type == KILN_ONNX_BOOL) {
                out[j] = v != 0.0f;
            } else if (type == KILN_ONNX_UINT8 || type == KILN_ONNX_INT8) {
                out[j] = (uint8_t)(int32_t)(v == v && v > -1e9f && v < 1e9f ? v : 0.0f); /* exact integers */
            } else {
                int64_t w = v == v && v > -9.2e18f && v < 9.2e18f ? (int64_t)v : 0;
                if (type == KILN_ONNX_INT64)
                    memcpy(out + 8 * j, &w, 8);
                else {
                    int32_t w32 = (int32_t)w;
                    memcpy(out + 4 * j, &w32, 4);
                }
            }
        }
    }
    return KILN_OK;
}

/* The key of a run from its inputs; slot[i] = the buffer fed to input i. */
static kiln_status key_of(const kiln_onnx_session *s, const kiln_onnx_buffer *inputs, int32_t n_inputs,
                          int64_t *key, const kiln_onnx_buffer **slot, bool shapes_only) {
    bool bound[KILN_ONNX_MAX_SYMS] = {false};
    kiln_status st;
    key[0] = 1;
    if (n_inputs < 0 || (n_inputs && !inputs))
        return kiln__error(KILN_E_INVALID_ARG, "%d inputs given, the model takes %d", n_inputs, s->m->n_feed);
    /* Each given input by name first (an unknown or repeated one is named), then what is missing. */
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
    for (int32_t i = 0; i < s->m->n_feed; i++)
        if (!slot[i])
            return kiln__error(KILN_E_INVALID_ARG,
                               "%d inputs given, the model takes %d: input '%s' is missing", n_inputs,
                               s->m->n_feed, s->input_names[i]);
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
    int64_t compiles = kiln__program_compiles(s->program);
    st = kiln__program_plan(s->program, key, &plan);
    for (int32_t i = 0; !st && i < s->m->n_feed; i++) {
        void *data = NULL;
        if (!(st = convert_input(s, i, slot[i], &data))) kiln__program_bind(plan, i, data);
    }
    if (!st) st = kiln__program_run(s->program, plan);
    if (!st) st = convert_outputs(s, plan);
    /* A new plan's first run has read what it needs of the file into folded constants, packed copies and
     * device uploads: the file's pages can go (BERT-base: 1.43 -> 1.02 GB resident). */
    if (!st && kiln__program_compiles(s->program) != compiles) kiln__onnx_release_pages(s->m);
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
    int32_t type = kiln__onnx_value_find(s->m, s->m->outputs[i].name)->info.type;
    memset(out, 0, sizeof *out);
    out->name = s->m->outputs[i].name;
    out->type = (kiln_onnx_type)type;
    out->rank = rank;
    kiln__onnx_shape_of(t, rank, out->shape);
    out->data = type == KILN_ONNX_FLOAT ? t->data : s->out_stage[i].data;
    out->size = (size_t)kiln__tensor_nelements(t) * elem_size(type);
    if (dst) {
        if (dst_size < out->size)
            return kiln__error(KILN_E_RANGE, "output '%s' needs %zu bytes, the buffer holds %zu", out->name,
                               out->size, dst_size);
        memcpy(dst, out->data, out->size);
    }
    return KILN_OK;
}

int64_t kiln_onnx_session_runs(const kiln_onnx_session *s) {
    return s ? s->runs : 0;
}
int64_t kiln_onnx_session_compiles(const kiln_onnx_session *s) {
    return s ? kiln__program_compiles(s->program) : 0;
}
