/*
 * backend.c - the public wrappers around a backend's iface (see backend.h): they check arguments and
 * support once, so backends implement only the happy path.
 */
#include "backend/backend.h"

#include "core/core.h"

#include <string.h>

const char *kiln__backend_name(const kiln_backend *b) { return b->iface->name(b); }

bool kiln__backend_supports_op(const kiln_backend *b, const kiln_tensor *node) {
    return b->iface->supports_op(b, node);
}

kiln_status kiln__backend_buffer_alloc(kiln_backend *b, size_t size, kiln_buffer *out) {
    out->base = NULL;
    out->size = 0;
    return b->iface->buffer_alloc(b, size, out);
}

void kiln__backend_buffer_free(kiln_backend *b, kiln_buffer *buf) {
    if (buf && buf->base) b->iface->buffer_free(b, buf);
    if (buf) {
        buf->base = NULL;
        buf->size = 0;
    }
}

kiln_status kiln__backend_compute(kiln_backend *b, kiln_graph *g) {
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        const kiln_tensor *t = kiln__graph_node(g, i);
        if (!kiln__backend_supports_op(b, t))
            return kiln__error(KILN_E_UNSUPPORTED, "backend %s cannot run node '%s' (%s)", kiln__backend_name(b),
                               t->name, kiln__op_name(t->op));
    }
    return b->iface->compute(b, g);
}

void kiln__backend_destroy(kiln_backend *b) {
    if (b) b->iface->destroy(b);
}

void kiln__backend_memory(const kiln_backend *b, kiln_backend_memory *out) {
    memset(out, 0, sizeof *out);
    if (b->iface->memory) b->iface->memory(b, out);
}

kiln_status kiln__backend_create_named(const char *name, size_t len, int32_t n_threads, kiln_backend **out) {
    (void)n_threads;
    *out = NULL;
    return kiln__error(KILN_E_NOT_FOUND, "device '%.*s' is not known (known: cpu)", (int)KILN__MIN(len, 64), name);
}

void kiln__backend_set_abort(kiln_backend *b, kiln_abort_fn fn, void *user) {
    b->abort_fn = fn;
    b->abort_user = user;
}
