/*
 * const_store.h - the results of constant folding, kept for the life of an inference context so that
 * every compiled plan (prefill, decode) shares one copy of, say, a merged QKV weight.
 *
 * kiln__const_store_eval() matches kiln_const_eval_fn (graph/passes/passes.h): it looks the node up by
 * op, parameters, shape and source bytes, and on a miss evaluates it on the given backend. A concat of
 * weights that already lie back to back in memory is answered without copying.
 */
#ifndef KILN_CONST_STORE_H
#define KILN_CONST_STORE_H

#include "backend/backend.h"
#include "graph/graph.h"

typedef struct kiln_const_store kiln_const_store;

kiln_status kiln__const_store_create(kiln_backend *backend, kiln_const_store **out);
void kiln__const_store_destroy(kiln_const_store *store);
kiln_status kiln__const_store_eval(void *store, const kiln_tensor *node, void **data);
/* Bytes the store allocated (zero-copy results excluded). */
size_t kiln__const_store_bytes(const kiln_const_store *store);

#endif
