/*
 * onnx_validate.c - the checks a decoded model passes before kiln_onnx_load returns it, in this order:
 *  1. names: initializers and node outputs are defined once each (SSA); graph inputs are unique;
 *  2. every node is an operator Kiln claims (onnx_ops.c) in the ai.onnx domain and present in the model's
 *     opset, with input and output counts in range, and attributes the specification gives it at that
 *     opset, each once and of its type (required ones present);
 *  3. the graph is a DAG: every input is defined by an initializer, a graph input or a node, with no cycle
 *     (Kahn's algorithm gives the topological order kept in m->order), and every graph output is defined;
 *  4. types and shapes are inferred node by node in that order (onnx_shape.c), each node's T checked
 *     against what it accepts, and declared shapes (value_info, outputs) merged: a declared dimension fills
 *     an unknown one, and a known one that disagrees is an error.
 * Each error names the node ("node 'name' (OpType, opset N)"), the field and the values.
 */
#include "import/onnx/onnx_internal.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

#define NODE_FMT "node %d '%.64s' (%.64s, opset %lld)"
#define NODE_ARGS(m, i, n) (int)(i), (n)->name, (n)->op_type, (long long)(m)->opset

const kiln__onnx_attr *kiln__onnx_find_attr(const kiln__onnx_node *n, const char *name) {
    for (int32_t j = 0; j < n->n_attrs; j++)
        if (!strcmp(n->attrs[j].name, name)) return &n->attrs[j];
    return NULL;
}

kiln__onnx_value *kiln__onnx_value_find(const kiln_onnx *m, const char *name) {
    int64_t i = kiln__gguf_index_find(&m->value_index, name, strlen(name));
    return i < 0 ? NULL : &m->values[i];
}

/* Add a value named name; *dup receives the index of an earlier value of that name, or -1. */
static kiln_status add_value(kiln_onnx *m, const char *name, int32_t producer, int64_t *dup) {
    kiln_status s = kiln__gguf_index_insert(&m->value_index, name, strlen(name), m->n_values, dup);
    if (s) return s;
    if (*dup >= 0) return KILN_OK;
    kiln__onnx_value *v = &m->values[m->n_values++];
    v->info.name = name;
    v->info.rank = -1;
    v->info.tensor = true;
    v->producer = producer;
    return KILN_OK;
}

static kiln_status define_sources(kiln_onnx *m) {
    int64_t dup;
    kiln_status s;
    for (int32_t i = 0; i < m->n_inits; i++) {
        const kiln__onnx_tensor *t = &m->inits[i];
        if (!t->name[0]) return kiln__error(KILN_E_FORMAT, "initializer %d has no name", i);
        if ((s = add_value(m, t->name, -1, &dup))) return s;
        if (dup >= 0) return kiln__error(KILN_E_FORMAT, "initializer '%.128s' is defined twice", t->name);
        kiln__onnx_value *v = &m->values[m->n_values - 1];
        v->init = t;
        v->info.type = t->type;
        v->info.rank = t->rank;
        v->info.dims = kiln__onnx_alloc(m, (size_t)t->rank, sizeof *v->info.dims, "an initializer's shape");
        if (!v->info.dims) return KILN_E_NOMEM;
        for (int32_t d = 0; d < t->rank; d++)
            v->info.dims[d].value = t->dims[d];
    }
    m->feed = kiln__onnx_alloc(m, (size_t)m->n_inputs, sizeof *m->feed, "the graph's fed inputs");
    if (!m->feed) return KILN_E_NOMEM;
    for (int32_t i = 0; i < m->n_inputs; i++) {
        const kiln__onnx_vinfo *in = &m->inputs[i];
        for (int32_t j = 0; j < i; j++)
            if (!strcmp(m->inputs[j].name, in->name))
                return kiln__error(KILN_E_FORMAT, "graph input '%.128s' is declared twice", in->name);
        if ((s = add_value(m, in->name, -1, &dup))) return s;
        if (dup >= 0)
            continue; /* an initializer with a declared input (IR < 4 lists them): it keeps its data */
        if (!in->tensor)
            return kiln__error(KILN_E_UNSUPPORTED,
                               "graph input '%.128s' is not a tensor (sequence, map or optional "
                               "types are not supported)",
                               in->name);
        m->values[m->n_values - 1].info = *in;
        m->feed[m->n_feed++] = i;
    }
    return KILN_OK;
}

static kiln_status check_attrs(const kiln_onnx *m, int32_t i, const kiln__onnx_node *n) {
    for (int32_t j = 0; j < n->n_attrs; j++) {
        const kiln__onnx_attr *a = &n->attrs[j];
        const kiln__onnx_attr_spec *spec = n->op->attrs;
        while (spec->name && (strcmp(spec->name, a->name) || (spec->since && m->opset < spec->since) ||
                              (spec->until && m->opset > spec->until)))
            spec++;
        if (!spec->name)
            return kiln__error(KILN_E_UNSUPPORTED, NODE_FMT ": attribute '%.64s' is not supported",
                               NODE_ARGS(m, i, n), a->name);
        if (spec->type != a->type)
            return kiln__error(KILN_E_FORMAT,
                               NODE_FMT ": attribute '%.64s' has type %s, the specification gives %s",
                               NODE_ARGS(m, i, n), a->name, kiln__onnx_attr_type_name(a->type),
                               kiln__onnx_attr_type_name(spec->type));
        for (int32_t k = 0; k < j; k++)
            if (!strcmp(n->attrs[k].name, a->name))
                return kiln__error(KILN_E_FORMAT, NODE_FMT ": attribute '%.64s' is given twice",
                                   NODE_ARGS(m, i, n), a->name);
    }
    if (!strcmp(n->op_type, "Cast") && !kiln__onnx_find_attr(n, "to"))
        return kiln__error(KILN_E_FORMAT, NODE_FMT ": the required attribute 'to' is missing",
                           NODE_ARGS(m, i, n));
    if (!strcmp(n->op_type, "Concat") && !kiln__onnx_find_attr(n, "axis"))
        return kiln__error(KILN_E_FORMAT, NODE_FMT ": the required attribute 'axis' is missing",
                           NODE_ARGS(m, i, n));
    if (!strcmp(n->op_type, "Constant") && n->n_attrs != 1)
        return kiln__error(KILN_E_FORMAT, NODE_FMT ": exactly one value attribute is required, %d given",
                           NODE_ARGS(m, i, n), n->n_attrs);
    return KILN_OK;
}

static kiln_status check_node(kiln_onnx *m, int32_t i, kiln__onnx_node *n) {
    const kiln__onnx_op *op;
    if (n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "node %d '%.64s' (%.64s): domain '%.64s' is not supported (Kiln reads "
                           "the ai.onnx domain)",
                           i, n->name, n->op_type, n->domain);
    op = kiln__onnx_op_find(n->op_type);
    if (!op)
        return kiln__error(KILN_E_UNSUPPORTED, NODE_FMT ": operator %.64s is not supported",
                           NODE_ARGS(m, i, n), n->op_type);
    if (op->since > m->opset)
        return kiln__error(KILN_E_FORMAT, NODE_FMT ": %s does not exist before opset %d", NODE_ARGS(m, i, n),
                           op->name, op->since);
    n->op = op;
    if (n->n_inputs < op->min_in || n->n_inputs > op->max_in)
        return kiln__error(KILN_E_FORMAT, NODE_FMT ": %d inputs, the operator takes %d to %d",
                           NODE_ARGS(m, i, n), n->n_inputs, op->min_in, op->max_in);
    for (int32_t k = 0; k < op->min_in; k++)
        if (!n->inputs[k][0])
            return kiln__error(KILN_E_FORMAT, NODE_FMT ": the required input %d is empty", NODE_ARGS(m, i, n),
                               k);
    if (n->n_outputs < op->min_out || n->n_outputs > op->max_out)
        return kiln__error(KILN_E_FORMAT, NODE_FMT ": %d outputs, the operator gives %d to %d",
                           NODE_ARGS(m, i, n), n->n_outputs, op->min_out, op->max_out);
    return check_attrs(m, i, n);
}

static kiln_status define_outputs(kiln_onnx *m) {
    int64_t dup;
    kiln_status s;
    for (int32_t i = 0; i < m->n_nodes; i++) {
        kiln__onnx_node *n = &m->nodes[i];
        if ((s = check_node(m, i, n))) return s;
        for (int32_t k = 0; k < n->n_outputs; k++) {
            if (!n->outputs[k][0]) continue;
            if ((s = add_value(m, n->outputs[k], i, &dup))) return s;
            if (dup >= 0)
                return kiln__error(KILN_E_FORMAT, NODE_FMT ": output '%.128s' is already defined%s",
                                   NODE_ARGS(m, i, n), n->outputs[k],
                                   m->values[dup].producer < 0 ? " by the graph" : " by another node");
        }
    }
    return KILN_OK;
}

/* Kahn's algorithm over node -> node edges (an input made by another node). */
static kiln_status topo_sort(kiln_onnx *m) {
    int32_t *pending = kiln__onnx_alloc(m, (size_t)m->n_nodes, sizeof *pending, "the topological sort");
    int32_t *users_start =
        kiln__onnx_alloc(m, (size_t)m->n_nodes + 1, sizeof *users_start, "the topological sort");
    int32_t *users, n_edges = 0, head = 0, tail = 0;
    m->order = kiln__onnx_alloc(m, (size_t)m->n_nodes, sizeof *m->order, "the topological order");
    if (!pending || !users_start || !m->order) return KILN_E_NOMEM;
    for (int32_t i = 0; i < m->n_nodes; i++) {
        const kiln__onnx_node *n = &m->nodes[i];
        for (int32_t k = 0; k < n->n_inputs; k++) {
            const kiln__onnx_value *v;
            if (!n->inputs[k][0]) continue;
            v = kiln__onnx_value_find(m, n->inputs[k]);
            if (!v)
                return kiln__error(KILN_E_FORMAT,
                                   NODE_FMT ": input '%.128s' is not defined by any initializer, graph "
                                            "input or node",
                                   NODE_ARGS(m, i, n), n->inputs[k]);
            if (v->producer >= 0) {
                pending[i]++;
                users_start[v->producer + 1]++;
                n_edges++;
            }
        }
    }
    for (int32_t i = 0; i < m->n_nodes; i++)
        users_start[i + 1] += users_start[i];
    users = kiln__onnx_alloc(m, (size_t)n_edges, sizeof *users, "the topological sort");
    int32_t *fill = kiln__onnx_alloc(m, (size_t)m->n_nodes, sizeof *fill, "the topological sort");
    if (!users || !fill) return KILN_E_NOMEM;
    for (int32_t i = 0; i < m->n_nodes; i++)
        for (int32_t k = 0; k < m->nodes[i].n_inputs; k++) {
            const kiln__onnx_value *v =
                m->nodes[i].inputs[k][0] ? kiln__onnx_value_find(m, m->nodes[i].inputs[k]) : NULL;
            if (v && v->producer >= 0) users[users_start[v->producer] + fill[v->producer]++] = i;
        }
    for (int32_t i = 0; i < m->n_nodes; i++)
        if (!pending[i]) m->order[tail++] = i;
    while (head < tail) {
        int32_t i = m->order[head++];
        for (int32_t e = users_start[i]; e < users_start[i + 1]; e++)
            if (--pending[users[e]] == 0) m->order[tail++] = users[e];
    }
    if (tail < m->n_nodes)
        for (int32_t i = 0; i < m->n_nodes; i++)
            if (pending[i])
                return kiln__error(KILN_E_FORMAT, NODE_FMT ": the graph has a cycle through this node",
                                   NODE_ARGS(m, i, &m->nodes[i]));
    return KILN_OK;
}

/* Merge a declared type and shape into an inferred one. */
static kiln_status merge_declared(kiln__onnx_value *v, const kiln__onnx_vinfo *d, const char *where) {
    if (!d->tensor) return KILN_OK;
    if (d->type && v->info.type && d->type != v->info.type)
        return kiln__error(KILN_E_FORMAT, "%s '%.128s' is declared %s but computes %s", where, d->name,
                           kiln__onnx_type_name(d->type), kiln__onnx_type_name(v->info.type));
    if (!v->info.type) v->info.type = d->type;
    if (d->rank < 0) return KILN_OK;
    if (v->info.rank < 0) {
        v->info.rank = d->rank;
        v->info.dims = d->dims;
        return KILN_OK;
    }
    if (v->info.rank != d->rank)
        return kiln__error(KILN_E_FORMAT, "%s '%.128s' is declared with rank %d but has rank %d", where,
                           d->name, d->rank, v->info.rank);
    for (int32_t k = 0; k < d->rank; k++) {
        kiln_onnx_dim *x = &v->info.dims[k];
        if (d->dims[k].value >= 0 && x->value >= 0 && d->dims[k].value != x->value)
            return kiln__error(KILN_E_FORMAT, "%s '%.128s': dimension %d is declared %lld but is %lld", where,
                               d->name, k, (long long)d->dims[k].value, (long long)x->value);
        if (x->value < 0 && !x->param) *x = d->dims[k];
    }
    return KILN_OK;
}

static kiln_status infer_all(kiln_onnx *m) {
    kiln_status s;
    for (int32_t k = 0; k < m->n_nodes; k++) {
        int32_t i = m->order[k];
        const kiln__onnx_node *n = &m->nodes[i];
        if ((s = kiln__onnx_infer(m, n)) || (s = kiln__onnx_fold(m, n)))
            return kiln__error_prefix(s, NODE_FMT ": ", NODE_ARGS(m, i, n));
    }
    for (int32_t j = 0; j < m->n_vinfos; j++) {
        kiln__onnx_value *v = kiln__onnx_value_find(m, m->vinfos[j].name);
        if (v && v->producer >= 0 && (s = merge_declared(v, &m->vinfos[j], "value"))) return s;
    }
    for (int32_t i = 0; i < m->n_outputs; i++) {
        kiln__onnx_value *v = kiln__onnx_value_find(m, m->outputs[i].name);
        if (!v)
            return kiln__error(KILN_E_FORMAT,
                               "graph output '%.128s' is not defined by any node, input or initializer",
                               m->outputs[i].name);
        if (!m->outputs[i].tensor)
            return kiln__error(KILN_E_UNSUPPORTED, "graph output '%.128s' is not a tensor",
                               m->outputs[i].name);
        if ((s = merge_declared(v, &m->outputs[i], "graph output"))) return s;
    }
    return KILN_OK;
}

kiln_status kiln__onnx_validate(kiln_onnx *m) {
    size_t n = (size_t)m->n_inits + (size_t)m->n_inputs;
    kiln_status s;
    for (int32_t i = 0; i < m->n_nodes; i++)
        n += (size_t)m->nodes[i].n_outputs;
    m->values = kiln__onnx_alloc(m, n, sizeof *m->values, "the graph's values");
    if (!m->values) return KILN_E_NOMEM;
    if ((s = define_sources(m)) || (s = define_outputs(m)) || (s = topo_sort(m))) return s;
    return infer_all(m);
}
