/*
 * onnx_parse.c - decodes the messages of an ONNX file (ModelProto, OperatorSetIdProto, GraphProto,
 * NodeProto, AttributeProto, ValueInfoProto, TypeProto with its shape) into struct kiln_onnx, all in the
 * model's arena. Each message is walked twice: once to count its repeated fields (checked against the
 * KILN_MAX_ONNX_* limits before anything is allocated for them), once to fill exact tables. Fields Kiln
 * does not use (doc strings, metadata, training info, functions) are skipped by the wire reader, which
 * still checks that they are well formed. TensorProto lives in onnx_tensor.c.
 */
#include "import/onnx/onnx_internal.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

/* The newest IR version Kiln knows (onnx 1.23's); newer files may carry fields that change meaning. */
#define KILN__ONNX_MAX_IR 14

void *kiln__onnx_alloc(kiln_onnx *m, size_t n, size_t size, const char *what) {
    size_t bytes;
    void *p;
    if (kiln__mul_overflow_size(n, size, &bytes)) {
        kiln__error(KILN_E_NOMEM, "out of memory: %s (%zu x %zu bytes overflows)", what, n, size);
        return NULL;
    }
    p = kiln__gguf_arena_alloc(&m->arena, bytes ? bytes : 1);
    if (!p) {
        kiln__nomem(what);
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

kiln_status kiln__onnx_strdup(kiln_onnx *m, const uint8_t *s, size_t len, const char *what,
                              const char **out) {
    char *p;
    if (len > KILN_MAX_NAME_BYTES)
        return kiln__error(KILN_E_FORMAT, "%s: %zu bytes exceeds the limit of %u bytes (KILN_MAX_NAME_BYTES)",
                           what, len, KILN_MAX_NAME_BYTES);
    if (len && memchr(s, 0, len)) return kiln__error(KILN_E_FORMAT, "%s contains a NUL byte", what);
    p = kiln__gguf_arena_strndup(&m->arena, (const char *)s, len);
    if (!p) return kiln__nomem(what);
    *out = p;
    return KILN_OK;
}

/* A string field: LEN wire type, copied NUL-terminated. */
static kiln_status str_field(kiln_onnx *m, const kiln__pb_field *f, const char *what, const char *field,
                             const char **out) {
    char ctx[256];
    kiln_status s = kiln__pb_expect(f, KILN__PB_LEN, what, field);
    if (s) return s;
    snprintf(ctx, sizeof ctx, "%.200s: %.40s", what, field);
    return kiln__onnx_strdup(m, f->data, f->len, ctx, out);
}

/* Count field `number` of message c and check it against limit. */
static kiln_status count_limited(kiln__pb c, const char *what, uint32_t number, const char *field,
                                 uint32_t limit, const char *limit_name, int64_t *n) {
    kiln_status s = kiln__pb_count(c, what, number, n);
    if (s) return s;
    if (*n > (int64_t)limit)
        return kiln__error(KILN_E_FORMAT, "%s: %lld %s exceed the limit of %u (%s)", what, (long long)*n,
                           field, limit, limit_name);
    return KILN_OK;
}

/* ---- TypeProto and ValueInfoProto. ---- */

static kiln_status parse_dim(kiln_onnx *m, kiln__pb c, const char *what, kiln_onnx_dim *d) {
    kiln__pb_field f;
    bool done;
    d->value = -1;
    d->param = NULL;
    for (;;) {
        kiln_status s = kiln__pb_next(&c, what, &f, &done);
        if (s || done) return s;
        if (f.number == 1) {
            if ((s = kiln__pb_expect(&f, KILN__PB_VARINT, what, "dim_value"))) return s;
            if ((int64_t)f.v < 0)
                return kiln__error(KILN_E_FORMAT, "%s: dim_value %lld at byte offset %zu is negative", what,
                                   (long long)(int64_t)f.v, f.at);
            d->value = (int64_t)f.v;
            d->param = NULL;
        } else if (f.number == 2) {
            if ((s = str_field(m, &f, what, "dim_param", &d->param))) return s;
            d->value = -1;
            if (!d->param[0]) d->param = NULL;
        }
    }
}

static kiln_status parse_shape(kiln_onnx *m, kiln__pb c, const char *what, kiln__onnx_vinfo *v) {
    kiln__pb_field f;
    bool done;
    int64_t n;
    int32_t k = 0;
    kiln_status s = count_limited(c, what, 1, "dims", KILN_MAX_ONNX_RANK, "KILN_MAX_ONNX_RANK", &n);
    if (s) return s;
    v->rank = (int32_t)n;
    v->dims = kiln__onnx_alloc(m, (size_t)n, sizeof *v->dims, "a value's shape");
    if (!v->dims) return KILN_E_NOMEM;
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done)) || done) return s;
        if (f.number != 1) continue;
        if ((s = kiln__pb_expect(&f, KILN__PB_LEN, what, "dim"))) return s;
        if ((s = parse_dim(m, kiln__pb_sub(&f), what, &v->dims[k++]))) return s;
    }
}

static kiln_status parse_tensor_type(kiln_onnx *m, kiln__pb c, const char *what, kiln__onnx_vinfo *v) {
    kiln__pb_field f;
    bool done;
    v->tensor = true;
    v->rank = -1;
    for (;;) {
        kiln_status s = kiln__pb_next(&c, what, &f, &done);
        if (s || done) return s;
        if (f.number == 1) {
            if ((s = kiln__pb_int32(&f, what, "elem_type", &v->type))) return s;
        } else if (f.number == 2) {
            if ((s = kiln__pb_expect(&f, KILN__PB_LEN, what, "shape"))) return s;
            if ((s = parse_shape(m, kiln__pb_sub(&f), what, v))) return s;
        }
    }
}

static kiln_status parse_type(kiln_onnx *m, kiln__pb c, const char *what, kiln__onnx_vinfo *v) {
    kiln__pb_field f;
    bool done;
    for (;;) {
        kiln_status s = kiln__pb_next(&c, what, &f, &done);
        if (s || done) return s;
        if (f.number == 1) {
            if ((s = kiln__pb_expect(&f, KILN__PB_LEN, what, "tensor_type"))) return s;
            if ((s = parse_tensor_type(m, kiln__pb_sub(&f), what, v))) return s;
        } else if (f.number == 4 || f.number == 5 || f.number == 8 || f.number == 9) {
            v->tensor = false; /* sequence, map, sparse tensor, optional */
        }
    }
}

static kiln_status parse_vinfo(kiln_onnx *m, kiln__pb c, const char *list, int32_t i, kiln__onnx_vinfo *v) {
    char what[96];
    kiln__pb_field f;
    bool done;
    snprintf(what, sizeof what, "graph %s %d", list, i);
    v->name = "";
    v->rank = -1;
    v->tensor = true;
    for (;;) {
        kiln_status s = kiln__pb_next(&c, what, &f, &done);
        if (s) return s;
        if (done) break;
        if (f.number == 1) {
            if ((s = str_field(m, &f, what, "name", &v->name))) return s;
        } else if (f.number == 2) {
            if ((s = kiln__pb_expect(&f, KILN__PB_LEN, what, "type"))) return s;
            if ((s = parse_type(m, kiln__pb_sub(&f), what, v))) return s;
        }
    }
    if (!v->name[0]) return kiln__error(KILN_E_FORMAT, "%s has an empty name", what);
    return KILN_OK;
}

/* ---- AttributeProto. ---- */

/* Fill a FLOATS or INTS list from every field numbered like f in c (packed or not). */
static kiln_status read_list(kiln_onnx *m, kiln__pb c, const char *what, uint32_t number, uint32_t wire,
                             kiln__onnx_attr *a) {
    kiln__pb_field f;
    bool done;
    int64_t n = 0, k, total = 0;
    uint64_t *tmp;
    kiln_status s;
    kiln__pb c2 = c;
    for (;;) {
        if ((s = kiln__pb_next(&c2, what, &f, &done))) return s;
        if (done) break;
        if (f.number != number) continue;
        if ((s = kiln__pb_packed_count(&f, wire, what, &k))) return s;
        total += k;
        if (total > (int64_t)KILN_MAX_ONNX_LIST)
            return kiln__error(KILN_E_FORMAT, "%s: more than %u list elements (KILN_MAX_ONNX_LIST)", what,
                               KILN_MAX_ONNX_LIST);
    }
    tmp = kiln__onnx_alloc(m, (size_t)total, sizeof *tmp, "an attribute list");
    if (!tmp) return KILN_E_NOMEM;
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done))) return s;
        if (done) break;
        if (f.number == number && (s = kiln__pb_packed_read(&f, wire, what, tmp, total, &n))) return s;
    }
    a->n = n;
    if (wire == KILN__PB_VARINT) {
        a->ints = (int64_t *)tmp; /* same size and alignment: reinterpret in place */
        for (int64_t j = 0; j < n; j++)
            a->ints[j] = (int64_t)tmp[j];
    } else {
        a->floats = kiln__onnx_alloc(m, (size_t)n, sizeof *a->floats, "an attribute list");
        if (!a->floats) return KILN_E_NOMEM;
        for (int64_t j = 0; j < n; j++) {
            uint32_t bits = (uint32_t)tmp[j];
            memcpy(&a->floats[j], &bits, 4);
        }
    }
    return KILN_OK;
}

static kiln_status read_strings(kiln_onnx *m, kiln__pb c, const char *what, kiln__onnx_attr *a) {
    kiln__pb_field f;
    bool done;
    int64_t n, k = 0;
    kiln_status s = count_limited(c, what, 9, "strings", KILN_MAX_ONNX_LIST, "KILN_MAX_ONNX_LIST", &n);
    if (s) return s;
    a->strings = kiln__onnx_alloc(m, (size_t)n, sizeof *a->strings, "an attribute's strings");
    if (!a->strings) return KILN_E_NOMEM;
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done))) return s;
        if (done) break;
        if (f.number != 9) continue;
        if ((s = kiln__pb_expect(&f, KILN__PB_LEN, what, "strings"))) return s;
        a->strings[k].data = (const char *)f.data;
        a->strings[k++].len = f.len;
    }
    a->n = n;
    return KILN_OK;
}

static kiln_status attr_scalar(kiln_onnx *m, const kiln__pb_field *f, const char *what, kiln__onnx_attr *a) {
    kiln_status s = KILN_OK;
    switch (f->number) {
    case 20: {
        int32_t t;
        if ((s = kiln__pb_int32(f, what, "type", &t))) return s;
        a->type = t;
        return KILN_OK;
    }
    case 2: {
        uint32_t bits = (uint32_t)f->v;
        if ((s = kiln__pb_expect(f, KILN__PB_I32, what, "f"))) return s;
        memcpy(&a->f, &bits, 4);
        return KILN_OK;
    }
    case 3:
        if ((s = kiln__pb_expect(f, KILN__PB_VARINT, what, "i"))) return s;
        a->i = (int64_t)f->v;
        return KILN_OK;
    case 4:
        if ((s = kiln__pb_expect(f, KILN__PB_LEN, what, "s"))) return s;
        a->s.data = (const char *)f->data;
        a->s.len = f->len;
        return KILN_OK;
    case 21:
        return kiln__error(KILN_E_UNSUPPORTED,
                           "%s: ref_attr_name (attributes of a function body) is not supported", what);
    default: return KILN_OK;
    }
}

static kiln_status parse_attr(kiln_onnx *m, kiln__pb c, const char *node_what, int32_t j,
                              kiln__onnx_attr *a) {
    char what[256];
    kiln__pb_field f;
    bool done;
    kiln_status s;
    kiln__pb c0 = c;
    snprintf(what, sizeof what, "%.160s, attribute %d", node_what, j);
    a->name = "";
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done))) return s;
        if (done) break;
        if (f.number == 1) {
            if ((s = str_field(m, &f, what, "name", &a->name))) return s;
        } else if (f.number == 5) {
            if ((s = kiln__pb_expect(&f, KILN__PB_LEN, what, "t"))) return s;
            a->t = kiln__onnx_alloc(m, 1, sizeof *a->t, "an attribute tensor");
            if (!a->t) return KILN_E_NOMEM;
            if ((s = kiln__onnx_parse_tensor(m, kiln__pb_sub(&f), a->t, what))) return s;
        } else if ((s = attr_scalar(m, &f, what, a))) {
            return s;
        }
    }
    if (!a->name[0]) return kiln__error(KILN_E_FORMAT, "%s has an empty name", what);
    snprintf(what, sizeof what, "%.160s, attribute '%.64s'", node_what, a->name);
    if (a->type == KILN_ONNX_ATTR_FLOATS) return read_list(m, c0, what, 7, KILN__PB_I32, a);
    if (a->type == KILN_ONNX_ATTR_INTS) return read_list(m, c0, what, 8, KILN__PB_VARINT, a);
    if (a->type == KILN_ONNX_ATTR_STRINGS) return read_strings(m, c0, what, a);
    if (a->type == KILN_ONNX_ATTR_TENSOR && !a->t)
        return kiln__error(KILN_E_FORMAT, "%s has type TENSOR but no tensor", what);
    return KILN_OK;
}

/* ---- NodeProto. ---- */

static kiln_status node_strings(kiln_onnx *m, kiln__pb c, const char *what, uint32_t number,
                                const char *field, const char ***out, int32_t *count) {
    kiln__pb_field f;
    bool done;
    int64_t n;
    int32_t k = 0;
    kiln_status s = count_limited(c, what, number, field, KILN_MAX_ONNX_NODE_IO, "KILN_MAX_ONNX_NODE_IO", &n);
    if (s) return s;
    *out = kiln__onnx_alloc(m, (size_t)n, sizeof **out, "a node's inputs or outputs");
    if (!*out) return KILN_E_NOMEM;
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done))) return s;
        if (done) break;
        if (f.number == number && (s = str_field(m, &f, what, field, &(*out)[k++]))) return s;
    }
    *count = (int32_t)n;
    return KILN_OK;
}

static kiln_status parse_node(kiln_onnx *m, kiln__pb c, int32_t i, kiln__onnx_node *node) {
    char what[160];
    kiln__pb_field f;
    bool done;
    int64_t n_attrs;
    int32_t j = 0;
    kiln_status s;
    kiln__pb c0 = c;
    snprintf(what, sizeof what, "node %d", i);
    node->name = node->op_type = node->domain = "";
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done))) return s;
        if (done) break;
        if (f.number == 3 && (s = str_field(m, &f, what, "name", &node->name))) return s;
        if (f.number == 4 && (s = str_field(m, &f, what, "op_type", &node->op_type))) return s;
        if (f.number == 7 && (s = str_field(m, &f, what, "domain", &node->domain))) return s;
    }
    snprintf(what, sizeof what, "node %d '%.64s' (%.64s)", i, node->name, node->op_type);
    if (!node->op_type[0]) return kiln__error(KILN_E_FORMAT, "%s has no op_type", what);
    if ((s = node_strings(m, c0, what, 1, "input", &node->inputs, &node->n_inputs))) return s;
    if ((s = node_strings(m, c0, what, 2, "output", &node->outputs, &node->n_outputs))) return s;
    if ((s = count_limited(c0, what, 5, "attributes", KILN_MAX_ONNX_ATTRS, "KILN_MAX_ONNX_ATTRS", &n_attrs)))
        return s;
    node->n_attrs = (int32_t)n_attrs;
    node->attrs = kiln__onnx_alloc(m, (size_t)n_attrs, sizeof *node->attrs, "a node's attributes");
    if (!node->attrs) return KILN_E_NOMEM;
    c = c0;
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done))) return s;
        if (done) return KILN_OK;
        if (f.number != 5) continue;
        if ((s = kiln__pb_expect(&f, KILN__PB_LEN, what, "attribute"))) return s;
        if ((s = parse_attr(m, kiln__pb_sub(&f), what, j, &node->attrs[j]))) return s;
        j++;
    }
}

/* ---- GraphProto. ---- */

typedef struct graph_counts {
    int64_t nodes, inits, inputs, outputs, vinfos;
} graph_counts;

static kiln_status count_graph(kiln__pb c, graph_counts *n) {
    kiln_status s;
    const char *what = "graph";
    if ((s = count_limited(c, what, 1, "nodes", KILN_MAX_ONNX_NODES, "KILN_MAX_ONNX_NODES", &n->nodes)))
        return s;
    if ((s = count_limited(c, what, 5, "initializers", KILN_MAX_ONNX_VALUES, "KILN_MAX_ONNX_VALUES",
                           &n->inits)))
        return s;
    if ((s = count_limited(c, what, 11, "inputs", KILN_MAX_ONNX_VALUES, "KILN_MAX_ONNX_VALUES", &n->inputs)))
        return s;
    if ((s = count_limited(c, what, 12, "outputs", KILN_MAX_ONNX_VALUES, "KILN_MAX_ONNX_VALUES",
                           &n->outputs)))
        return s;
    return count_limited(c, what, 13, "value_info entries", KILN_MAX_ONNX_VALUES, "KILN_MAX_ONNX_VALUES",
                         &n->vinfos);
}

static kiln_status graph_field(kiln_onnx *m, const kiln__pb_field *f) {
    char what[64];
    kiln_status s = KILN_OK;
    if (f->number == 2) return str_field(m, f, "graph", "name", &m->graph_name);
    if (f->number == 15)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "graph: sparse_initializer at byte offset %zu is not supported", f->at);
    if (f->number != 1 && f->number != 5 && (f->number < 11 || f->number > 13)) return KILN_OK;
    if ((s = kiln__pb_expect(f, KILN__PB_LEN, "graph", "node/initializer/input/output/value_info"))) return s;
    switch (f->number) {
    case 1: {
        int32_t i = m->n_nodes++;
        return parse_node(m, kiln__pb_sub(f), i, &m->nodes[i]);
    }
    case 5:
        snprintf(what, sizeof what, "initializer %d", m->n_inits);
        return kiln__onnx_parse_tensor(m, kiln__pb_sub(f), &m->inits[m->n_inits++], what);
    case 11:
        m->n_inputs++;
        return parse_vinfo(m, kiln__pb_sub(f), "input", m->n_inputs - 1, &m->inputs[m->n_inputs - 1]);
    case 12:
        m->n_outputs++;
        return parse_vinfo(m, kiln__pb_sub(f), "output", m->n_outputs - 1, &m->outputs[m->n_outputs - 1]);
    default:
        m->n_vinfos++;
        return parse_vinfo(m, kiln__pb_sub(f), "value_info", m->n_vinfos - 1, &m->vinfos[m->n_vinfos - 1]);
    }
}

static kiln_status parse_graph(kiln_onnx *m, kiln__pb c) {
    graph_counts n;
    kiln__pb_field f;
    bool done;
    kiln_status s = count_graph(c, &n);
    if (s) return s;
    m->nodes = kiln__onnx_alloc(m, (size_t)n.nodes, sizeof *m->nodes, "the graph's nodes");
    m->inits = kiln__onnx_alloc(m, (size_t)n.inits, sizeof *m->inits, "the graph's initializers");
    m->inputs = kiln__onnx_alloc(m, (size_t)n.inputs, sizeof *m->inputs, "the graph's inputs");
    m->outputs = kiln__onnx_alloc(m, (size_t)n.outputs, sizeof *m->outputs, "the graph's outputs");
    m->vinfos = kiln__onnx_alloc(m, (size_t)n.vinfos, sizeof *m->vinfos, "the graph's value_info");
    if (!m->nodes || !m->inits || !m->inputs || !m->outputs || !m->vinfos) return KILN_E_NOMEM;
    for (;;) {
        if ((s = kiln__pb_next(&c, "graph", &f, &done))) return s;
        if (done) return KILN_OK;
        if ((s = graph_field(m, &f))) return s;
    }
}

/* ---- ModelProto. ---- */

static kiln_status parse_opset(kiln_onnx *m, kiln__pb c, int32_t i) {
    char what[64];
    kiln__pb_field f;
    bool done;
    const char *domain = "";
    int64_t version = -1;
    snprintf(what, sizeof what, "opset_import %d", i);
    for (;;) {
        kiln_status s = kiln__pb_next(&c, what, &f, &done);
        if (s) return s;
        if (done) break;
        if (f.number == 1 && (s = str_field(m, &f, what, "domain", &domain))) return s;
        if (f.number == 2) {
            if ((s = kiln__pb_expect(&f, KILN__PB_VARINT, what, "version"))) return s;
            version = (int64_t)f.v;
        }
    }
    if (strcmp(domain, "") != 0 && strcmp(domain, "ai.onnx") != 0) return KILN_OK; /* checked per node */
    if (m->opset >= 0)
        return kiln__error(KILN_E_FORMAT, "%s: a second opset_import for the ai.onnx domain", what);
    if (version < 13 || version > 21)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "%s: ai.onnx opset %lld is not supported (Kiln reads opsets 13 to 21)", what,
                           (long long)version);
    m->opset = version;
    return KILN_OK;
}

static kiln_status model_field(kiln_onnx *m, const kiln__pb_field *f, int32_t *n_opsets, bool *have_graph) {
    kiln_status s;
    switch (f->number) {
    case 1:
        if ((s = kiln__pb_expect(f, KILN__PB_VARINT, "model", "ir_version"))) return s;
        m->ir_version = (int64_t)f->v;
        return KILN_OK;
    case 2: return str_field(m, f, "model", "producer_name", &m->producer);
    case 3: return str_field(m, f, "model", "producer_version", &m->producer_version);
    case 7:
        if ((s = kiln__pb_expect(f, KILN__PB_LEN, "model", "graph"))) return s;
        if (*have_graph) return kiln__error(KILN_E_FORMAT, "model: a second graph at byte offset %zu", f->at);
        *have_graph = true;
        return parse_graph(m, kiln__pb_sub(f));
    case 8:
        if ((s = kiln__pb_expect(f, KILN__PB_LEN, "model", "opset_import"))) return s;
        if (++*n_opsets > (int32_t)KILN_MAX_ONNX_OPSETS)
            return kiln__error(KILN_E_FORMAT,
                               "model: more than %u opset_import entries (KILN_MAX_ONNX_OPSETS)",
                               KILN_MAX_ONNX_OPSETS);
        return parse_opset(m, kiln__pb_sub(f), *n_opsets - 1);
    default: return KILN_OK;
    }
}

kiln_status kiln__onnx_parse(kiln_onnx *m) {
    kiln__pb c = {m->base, m->size, 0, 0};
    kiln__pb_field f;
    bool done, have_graph = false;
    int32_t n_opsets = 0;
    kiln_status s;
    m->opset = -1;
    m->producer = m->producer_version = m->graph_name = "";
    /* The opset comes first, whatever the field order, so that graph errors can name it. */
    for (kiln__pb c2 = c;;) {
        if ((s = kiln__pb_next(&c2, "model", &f, &done))) return s;
        if (done) break;
        if (f.number == 8 && (s = model_field(m, &f, &n_opsets, &have_graph))) return s;
    }
    if (m->opset < 0)
        return kiln__error(KILN_E_FORMAT,
                           "model: no opset_import for the ai.onnx domain (not an ONNX model?)");
    for (;;) {
        if ((s = kiln__pb_next(&c, "model", &f, &done))) return s;
        if (done) break;
        if (f.number != 8 && (s = model_field(m, &f, &n_opsets, &have_graph))) return s;
    }
    if (m->ir_version < 3 || m->ir_version > KILN__ONNX_MAX_IR)
        return kiln__error(KILN_E_UNSUPPORTED, "model: IR version %lld is not supported (Kiln reads 3 to %d)",
                           (long long)m->ir_version, KILN__ONNX_MAX_IR);
    if (!have_graph) return kiln__error(KILN_E_FORMAT, "model: no graph");
    return KILN_OK;
}
