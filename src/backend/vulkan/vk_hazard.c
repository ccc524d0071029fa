/*
 * vk_hazard.c - the dependencies between a recording's dispatches (vk_hazard.h).
 */
#include "backend/vulkan/vk_hazard.h"

void kiln__vk_hazards_clear(kiln_vk_hazards *h) {
    h->n_written = h->n_read = 0;
}

static bool overlaps(const kiln_vk_range *set, int n, const kiln_vk_range *x) {
    for (int i = 0; i < n; i++)
        if (set[i].buffer == x->buffer && set[i].lo < x->hi && x->lo < set[i].hi) return true;
    return false;
}

static void put(kiln_vk_range *set, int *n, const kiln_vk_range *x) {
    for (int i = 0; i < *n; i++) /* a range already covered adds nothing */
        if (set[i].buffer == x->buffer && set[i].lo <= x->lo && x->hi <= set[i].hi) return;
    set[(*n)++] = *x;
}

bool kiln__vk_hazards_add(kiln_vk_hazards *h, const kiln_vk_range *r, int nr, const kiln_vk_range *w,
                          int nw) {
    bool wait = h->n_read + nr > KILN_VK_HAZARD_RANGES || h->n_written + nw > KILN_VK_HAZARD_RANGES;
    for (int i = 0; i < nr && !wait; i++)
        wait = r[i].lo < r[i].hi && overlaps(h->written, h->n_written, &r[i]);
    for (int i = 0; i < nw && !wait; i++)
        wait = w[i].lo < w[i].hi &&
               (overlaps(h->written, h->n_written, &w[i]) || overlaps(h->read, h->n_read, &w[i]));
    if (wait) kiln__vk_hazards_clear(h);
    for (int i = 0; i < nr; i++)
        if (r[i].lo < r[i].hi) put(h->read, &h->n_read, &r[i]);
    for (int i = 0; i < nw; i++)
        if (w[i].lo < w[i].hi) put(h->written, &h->n_written, &w[i]);
    return wait;
}
