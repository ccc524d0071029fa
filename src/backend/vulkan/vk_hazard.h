/*
 * vk_hazard.h - which dispatch of a Vulkan recording must wait for the dispatches before it (docs/vulkan.md,
 * "Dispatch"). A recording keeps the byte ranges of buffers that its dispatches read and wrote since its
 * last barrier; a dispatch that reads or writes what one of them wrote (read after write, write after
 * write), or writes what one of them read (write after read), gets a barrier first, and any other dispatch
 * may overlap the ones before it on the device (independent matmuls on one activation, the ropes of Q and
 * K, the K and V cache writes). Pure bookkeeping: no Vulkan calls, so it is built, and tested, on every
 * machine.
 */
#ifndef KILN_VK_HAZARD_H
#define KILN_VK_HAZARD_H

#include <stdbool.h>
#include <stdint.h>

#define KILN_VK_HAZARD_RANGES 48 /* ranges of each kind tracked; a dispatch beyond them waits */

typedef struct kiln_vk_range {
    uint64_t buffer; /* the buffer's handle, as bits */
    uint64_t lo, hi; /* bytes [lo, hi) */
} kiln_vk_range;

typedef struct kiln_vk_hazards {
    kiln_vk_range written[KILN_VK_HAZARD_RANGES], read[KILN_VK_HAZARD_RANGES];
    int n_written, n_read;
} kiln_vk_hazards;

/* Forget every range (after a barrier, or at the start of a recording that follows one). */
void kiln__vk_hazards_clear(kiln_vk_hazards *h);

/* A dispatch that reads r[0..nr) and writes w[0..nw) (empty ranges ignored): true when it must wait for
 * the dispatches since the last barrier, or when its ranges do not fit beside theirs; the caller then
 * records a barrier before it and h starts again from this dispatch. Its ranges are added either way. */
bool kiln__vk_hazards_add(kiln_vk_hazards *h, const kiln_vk_range *r, int nr, const kiln_vk_range *w, int nw);

#endif
