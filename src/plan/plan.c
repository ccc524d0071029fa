/*
 * plan.c - the arena planner (see plan.h). Each computed node gets the next KILN_PLAN_ALIGN-aligned slot;
 * views alias their base. Sizes are summed with overflow checks.
 */
#include "plan/plan.h"

#include "core/core.h"

static bool needs_slot(const kiln_tensor *t) { return t->op != KILN_OP_NONE && !kiln__op_is_view(t->op); }

kiln_status kiln__plan_measure(const kiln_graph *g, size_t *size) {
    uint64_t total = 0;
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        const kiln_tensor *t = kiln__graph_node(g, i);
        uint64_t slot;
        if (!needs_slot(t)) continue;
        if (kiln__align_up(kiln__tensor_nbytes(t), KILN_PLAN_ALIGN, &slot) ||
            kiln__add_overflow_u64(total, slot, &total) || total > SIZE_MAX)
            return kiln__error(KILN_E_RANGE, "graph intermediates overflow the arena size");
    }
    *size = (size_t)total;
    return KILN_OK;
}

kiln_status kiln__plan_commit(kiln_graph *g, void *base, size_t size) {
    size_t offset = 0;
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        for (int k = 0; k < KILN_MAX_SRC; k++) {
            const kiln_tensor *s = t->src[k];
            if (s && s->op == KILN_OP_NONE && !s->data)
                return kiln__error(KILN_E_INVALID_ARG, "node '%s' reads leaf '%s', which has no data", t->name,
                                   s->name);
        }
        if (kiln__op_is_view(t->op)) {
            t->data = (char *)t->view_src->data + t->view_offset;
            continue;
        }
        size_t bytes = kiln__tensor_nbytes(t);
        if (bytes > size - offset)
            return kiln__error(KILN_E_INTERNAL, "arena of %zu bytes too small for '%s'", size, t->name);
        t->data = (char *)base + offset;
        offset += (bytes + KILN_PLAN_ALIGN - 1) & ~(size_t)(KILN_PLAN_ALIGN - 1);
        if (offset > size) offset = size;
    }
    return KILN_OK;
}
