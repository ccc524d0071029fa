/*
 * vk_absent.c - what stands in for the Vulkan backend in a library built without Vulkan (no headers or
 * no glslc at configure time; see cmake/vulkan.cmake): an empty device list that says why, and a
 * constructor that fails with KILN_E_UNSUPPORTED so that a "vulkan" device falls back to the CPU.
 */
#include "backend/backend.h"

#include "core/core.h"

int32_t kiln_device_count(void) {
    return 0;
}

kiln_status kiln_device_get(int32_t i, kiln_device_info *out) {
    (void)out;
    return kiln__error(KILN_E_RANGE, "device %d: Kiln was built without Vulkan", i);
}

const char *kiln_devices_note(void) {
    return "built without Vulkan";
}

kiln_status kiln__backend_vulkan_create(int32_t device, kiln_backend **out) {
    (void)device;
    *out = NULL;
    return kiln__error(KILN_E_UNSUPPORTED, "built without Vulkan");
}

void kiln__backend_vulkan_replays(const kiln_backend *b, uint64_t *recorded, uint64_t *replayed) {
    (void)b;
    *recorded = *replayed = 0;
}

uint64_t kiln__backend_vulkan_submits(const kiln_backend *b) {
    (void)b;
    return 0;
}

void kiln__backend_vulkan_ring(const kiln_backend *b, uint32_t *in_flight, uint64_t *waits) {
    (void)b;
    *in_flight = 0;
    *waits = 0;
}

void kiln__backend_vulkan_barriers(const kiln_backend *b, uint64_t *dispatches, uint64_t *barriers) {
    (void)b;
    *dispatches = *barriers = 0;
}

uint64_t kiln__backend_vulkan_q8_reused(const kiln_backend *b) {
    (void)b;
    return 0;
}
