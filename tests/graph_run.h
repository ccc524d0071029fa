/*
 * graph_run.h - test helper: order, plan and compute a graph on a CPU backend with n threads, the same
 * way the inference context does. Header-only (each test file is compiled with harness.c alone).
 */
#ifndef KILN_TEST_GRAPH_RUN_H
#define KILN_TEST_GRAPH_RUN_H

#include "backend/backend.h"
#include "graph/graph.h"
#include "plan/plan.h"

#include <stdlib.h>

/* Returns the arena (free it with free()) or NULL on failure, with *status set. */
static inline void *graph_run(kiln_graph *g, int n_threads, kiln_status *status) {
    kiln_backend *b = NULL;
    size_t size = 0;
    void *arena = NULL;
    kiln_status s = kiln__graph_order(g);
    if (!s) s = kiln__graph_validate(g);
    if (!s) s = kiln__plan_measure(g, &size, NULL);
    if (!s) {
        arena = malloc(size ? size : 1);
        s = arena ? kiln__plan_commit(g, arena, size) : KILN_E_NOMEM;
    }
    if (!s) s = kiln__backend_cpu_create(n_threads, &b);
    if (!s) s = kiln__backend_compute(b, g);
    kiln__backend_destroy(b);
    *status = s;
    if (s) {
        free(arena);
        return NULL;
    }
    return arena;
}

/* Deterministic pseudo-random floats in [-1, 1). */
static inline float test_rand(uint64_t *state) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static inline void fill_random(float *x, size_t n, uint64_t seed) {
    uint64_t st = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) x[i] = test_rand(&st);
}

#endif
