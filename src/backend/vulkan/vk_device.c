/*
 * vk_device.c - one opened Vulkan device: its compute queue, command pool, the staging ring that every
 * upload and download passes through, and the transfers built on it (see vk.h).
 *
 * The ring has two slots. An upload goes in slot-sized pieces, each copied into the next slot by the host
 * and submitted with its own command buffer and fence, and is not waited for: the host fills one slot while
 * the device empties the other, and waits only when the ring comes back to a slot still in flight.
 * Downloads, fills and device-side copies are submitted and waited for. Device memory is never mapped, so
 * the same code serves a discrete GPU whose buffers are not host-visible.
 */
#include "backend/vulkan/vk.h"

#include "core/core.h"

#include <string.h>

#define SLOT_BYTES ((VkDeviceSize)4 << 20)

/* The first memory type allowed by bits with all of `want`; UINT32_MAX when none. */
static uint32_t memory_type(const VkPhysicalDeviceMemoryProperties *m, uint32_t bits,
                            VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < m->memoryTypeCount; i++)
        if ((bits & (1u << i)) && (m->memoryTypes[i].propertyFlags & want) == want) return i;
    return UINT32_MAX;
}

/* Device index: `index`, or with -1 the first discrete GPU, else the first integrated one. */
static kiln_status pick(kiln_vk_device *d, int32_t index) {
    VkPhysicalDevice pds[16];
    uint32_t n = 0;
    kiln_status s;
    if ((s = kiln__vk_physical_devices(&d->loader, pds, 16, &n))) return s;
    if (n == 0) return kiln__error(KILN_E_UNSUPPORTED, "no Vulkan device");
    if (index >= 0) {
        if ((uint32_t)index >= n)
            return kiln__error(KILN_E_UNSUPPORTED, "no Vulkan device %d (there are %u)", index, n);
        d->physical = pds[index];
        kiln__vk_describe(&d->loader, pds[index], index, &d->info);
        return KILN_OK;
    }
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < n; i++) {
            kiln_device_info info;
            kiln__vk_describe(&d->loader, pds[i], (int32_t)i, &info);
            if (info.type == (pass == 0 ? KILN_DEVICE_DISCRETE_GPU : KILN_DEVICE_INTEGRATED_GPU)) {
                d->physical = pds[i];
                d->info = info;
                return KILN_OK;
            }
        }
    return kiln__error(KILN_E_UNSUPPORTED, "no discrete or integrated GPU among %u Vulkan devices", n);
}

static kiln_status open_device(kiln_vk_device *d) {
    VkQueueFamilyProperties fam[16];
    uint32_t nf = 16;
    float prio = 1.0f;
    VkResult r;
    kiln_status s;
    VkPhysicalDeviceProperties props;
    d->fn->vkGetPhysicalDeviceQueueFamilyProperties(d->physical, &nf, fam);
    d->queue_family = UINT32_MAX;
    for (uint32_t i = 0; i < nf && d->queue_family == UINT32_MAX; i++)
        if (fam[i].queueFlags & VK_QUEUE_COMPUTE_BIT) d->queue_family = i;
    if (d->queue_family != UINT32_MAX) d->timestamp_bits = fam[d->queue_family].timestampValidBits;
    if (d->queue_family == UINT32_MAX)
        return kiln__error(KILN_E_UNSUPPORTED, "Vulkan device '%s' has no compute queue", d->info.name);
    VkDeviceQueueCreateInfo q = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                 .queueFamilyIndex = d->queue_family,
                                 .queueCount = 1,
                                 .pQueuePriorities = &prio};
    VkDeviceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .queueCreateInfoCount = 1, .pQueueCreateInfos = &q};
    if ((r = d->fn->vkCreateDevice(d->physical, &ci, NULL, &d->device)) != VK_SUCCESS) {
        d->device = VK_NULL_HANDLE;
        return kiln__error(KILN_E_UNSUPPORTED, "vkCreateDevice on '%s' failed (%s)", d->info.name,
                           kiln__vk_result_name(r));
    }
    if ((s = kiln__vk_load_device(&d->loader, d->device))) return s;
    d->fn->vkGetDeviceQueue(d->device, d->queue_family, 0, &d->queue);
    d->fn->vkGetPhysicalDeviceProperties(d->physical, &props);
    d->max_range = props.limits.maxStorageBufferRange;
    d->timestamp_period = props.limits.timestampPeriod;
    if (!(d->timestamp_period > 0)) d->timestamp_bits = 0;
    d->min_offset =
        props.limits.minStorageBufferOffsetAlignment ? props.limits.minStorageBufferOffsetAlignment : 1;
    return KILN_OK;
}

static kiln_status make_commands(kiln_vk_device *d) {
    VkResult r;
    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = d->queue_family};
    if ((r = d->fn->vkCreateCommandPool(d->device, &pci, NULL, &d->cmd_pool)))
        return kiln__vk_fail(r, "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = d->cmd_pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    if ((r = d->fn->vkAllocateCommandBuffers(d->device, &ai, &d->transfer_cmd)) ||
        (r = d->fn->vkAllocateCommandBuffers(d->device, &ai, &d->pending_cmd)))
        return kiln__vk_fail(r, "vkAllocateCommandBuffers");
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = d->fn->vkCreateFence(d->device, &fci, NULL, &d->transfer_fence)))
        return kiln__vk_fail(r, "vkCreateFence");
    d->pending_slot = -1;
    for (int i = 0; i < KILN_VK_RING_SLOTS; i++) {
        if ((r = d->fn->vkAllocateCommandBuffers(d->device, &ai, &d->ring[i].cmd)))
            return kiln__vk_fail(r, "vkAllocateCommandBuffers (staging ring)");
        if ((r = d->fn->vkCreateFence(d->device, &fci, NULL, &d->ring[i].fence)))
            return kiln__vk_fail(r, "vkCreateFence (staging ring)");
    }
    return KILN_OK;
}

static kiln_status make_staging(kiln_vk_device *d) {
    VkPhysicalDeviceMemoryProperties mp;
    VkMemoryRequirements req;
    VkResult r;
    d->fn->vkGetPhysicalDeviceMemoryProperties(d->physical, &mp);
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = SLOT_BYTES * KILN_VK_RING_SLOTS,
                             .usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    if ((r = d->fn->vkCreateBuffer(d->device, &bi, NULL, &d->staging_buf)))
        return kiln__vk_fail(r, "vkCreateBuffer (staging)");
    d->fn->vkGetBufferMemoryRequirements(d->device, d->staging_buf, &req);
    d->staging_type_index = memory_type(
        &mp, req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    /* Device buffers: device-local memory when there is any (all memory is, on lavapipe). */
    d->device_type_index = memory_type(&mp, UINT32_MAX, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (d->device_type_index == UINT32_MAX) d->device_type_index = memory_type(&mp, UINT32_MAX, 0);
    if (d->staging_type_index == UINT32_MAX)
        return kiln__error(KILN_E_UNSUPPORTED, "Vulkan device '%s' has no host-visible coherent memory",
                           d->info.name);
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = d->staging_type_index};
    if ((r = d->fn->vkAllocateMemory(d->device, &ai, NULL, &d->staging_mem)))
        return kiln__vk_fail(r, "vkAllocateMemory (staging)");
    if ((r = d->fn->vkBindBufferMemory(d->device, d->staging_buf, d->staging_mem, 0)))
        return kiln__vk_fail(r, "vkBindBufferMemory");
    if ((r = d->fn->vkMapMemory(d->device, d->staging_mem, 0, VK_WHOLE_SIZE, 0, &d->staging_map)))
        return kiln__vk_fail(r, "vkMapMemory (staging)");
    d->staging_size = SLOT_BYTES;
    return KILN_OK;
}

kiln_status kiln__vk_device_create(int32_t index, bool pooled, kiln_vk_device **out) {
    kiln_vk_device *d;
    kiln_status s;
    *out = NULL;
    if (!(d = kiln__calloc(1, sizeof *d))) return kiln__nomem("the Vulkan device");
    d->fn = &d->loader.fn;
    if (!(s = kiln__vk_open(&d->loader)) && !(s = pick(d, index)) && !(s = open_device(d)) &&
        !(s = make_commands(d)) && !(s = make_staging(d)))
        s = kiln__vk_pool_create(d, pooled, 0, &d->pool);
    if (s) {
        kiln__vk_device_destroy(d);
        return s;
    }
    *out = d;
    return KILN_OK;
}

void kiln__vk_device_destroy(kiln_vk_device *d) {
    if (!d) return;
    if (d->device) {
        (void)kiln__vk_drain(d);
        kiln__vk_pool_destroy(d->pool);
        if (d->staging_map) d->fn->vkUnmapMemory(d->device, d->staging_mem);
        if (d->staging_buf) d->fn->vkDestroyBuffer(d->device, d->staging_buf, NULL);
        if (d->staging_mem) d->fn->vkFreeMemory(d->device, d->staging_mem, NULL);
        if (d->transfer_fence) d->fn->vkDestroyFence(d->device, d->transfer_fence, NULL);
        for (int i = 0; i < KILN_VK_RING_SLOTS; i++)
            if (d->ring[i].fence) d->fn->vkDestroyFence(d->device, d->ring[i].fence, NULL);
        if (d->cmd_pool) d->fn->vkDestroyCommandPool(d->device, d->cmd_pool, NULL);
        d->fn->vkDestroyDevice(d->device, NULL);
    }
    kiln__vk_close(&d->loader);
    kiln__dealloc(d);
}

/* Whatever small uploads are pending, closed with a barrier that makes them visible to every later
 * command; *n becomes 1, or stays 0 when nothing is pending. */
static kiln_status close_pending(kiln_vk_device *d, uint32_t *n) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT};
    VkResult r;
    *n = 0;
    if (!d->pending_open) return KILN_OK;
    d->fn->vkCmdPipelineBarrier(d->pending_cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    d->pending_open = false;
    d->pending_bytes = 0;
    if ((r = d->fn->vkEndCommandBuffer(d->pending_cmd))) return kiln__vk_fail(r, "vkEndCommandBuffer");
    *n = 1;
    return KILN_OK;
}

/* Submit cmd (after whatever small uploads are pending) to signal fence; *submitted is false when there was
 * nothing to submit. */
static kiln_status submit(kiln_vk_device *d, VkCommandBuffer cmd, VkFence fence, bool *submitted) {
    VkResult r;
    VkCommandBuffer cmds[2];
    uint32_t n;
    kiln_status s = close_pending(d, &n);
    *submitted = false;
    if (s) return s;
    if (n) cmds[0] = d->pending_cmd;
    if (cmd) cmds[n++] = cmd;
    if (n == 0) return KILN_OK;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = n, .pCommandBuffers = cmds};
    if ((r = d->fn->vkResetFences(d->device, 1, &fence))) return kiln__vk_fail(r, "vkResetFences");
    if ((r = d->fn->vkQueueSubmit(d->queue, 1, &si, fence))) return kiln__vk_fail(r, "vkQueueSubmit");
    d->submits++;
    *submitted = true;
    return KILN_OK;
}

kiln_status kiln__vk_submit_wait(kiln_vk_device *d, VkCommandBuffer cmd, VkFence fence) {
    VkResult r;
    bool submitted;
    kiln_status s = submit(d, cmd, fence, &submitted);
    if (s || !submitted) return s;
    if ((r = d->fn->vkWaitForFences(d->device, 1, &fence, VK_TRUE, UINT64_MAX)))
        return kiln__vk_fail(r, "vkWaitForFences");
    /* A fence signalled by vkQueueSubmit also waits for every command submitted before it. */
    for (int i = 0; i < KILN_VK_RING_SLOTS; i++)
        d->ring[i].busy = false;
    d->pending_slot = -1;
    return KILN_OK;
}

static kiln_status slot_wait(kiln_vk_device *d, int i) {
    VkResult r;
    if (!d->ring[i].busy) return KILN_OK;
    if ((r = d->fn->vkWaitForFences(d->device, 1, &d->ring[i].fence, VK_TRUE, UINT64_MAX)))
        return kiln__vk_fail(r, "vkWaitForFences (staging ring)");
    d->ring[i].busy = false;
    if (d->pending_slot == i) d->pending_slot = -1;
    return KILN_OK;
}

kiln_status kiln__vk_drain(kiln_vk_device *d) {
    kiln_status s;
    for (int i = 0; i < KILN_VK_RING_SLOTS; i++)
        if ((s = slot_wait(d, i))) return s;
    return KILN_OK;
}

/* The next slot of the ring, free: waited for when it is still in flight. */
static kiln_status slot_take(kiln_vk_device *d, int *out) {
    int i = (int)d->ring_next;
    kiln_status s;
    d->ring_next = (d->ring_next + 1) % KILN_VK_RING_SLOTS;
    if (d->ring[i].busy) {
        d->ring_waits++;
        if ((s = slot_wait(d, i))) return s;
    }
    *out = i;
    return KILN_OK;
}

static VkDeviceSize slot_offset(const kiln_vk_device *d, int i) {
    return (VkDeviceSize)i * d->staging_size;
}

/* Up to 64 KiB in whole words, recorded into the pending buffer (vkCmdUpdateBuffer's limits); false when
 * the upload must take the staging ring. At most 1 MiB waits at a time. */
static kiln_status defer_upload(kiln_vk_device *d, kiln_vk_span dst, const void *src, size_t size, bool *done) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult r;
    *done = false;
    if (size == 0 || size > 65536 || size % 4 || dst.offset % 4 || d->pending_bytes + size > ((size_t)1 << 20))
        return KILN_OK;
    if (!d->pending_open) {
        kiln_status s;
        /* an upload that carried the last batch may still be running it */
        if (d->pending_slot >= 0 && (s = slot_wait(d, d->pending_slot))) return s;
        if ((r = d->fn->vkResetCommandBuffer(d->pending_cmd, 0))) return kiln__vk_fail(r, "vkResetCommandBuffer");
        if ((r = d->fn->vkBeginCommandBuffer(d->pending_cmd, &bi))) return kiln__vk_fail(r, "vkBeginCommandBuffer");
        d->pending_open = true;
    }
    d->fn->vkCmdUpdateBuffer(d->pending_cmd, dst.buffer, dst.offset, size, src);
    d->pending_bytes += size;
    *done = true;
    return KILN_OK;
}

/* Record one copy (or fill, when src is VK_NULL_HANDLE) into the transfer buffer, then run it. */
static kiln_status transfer(kiln_vk_device *d, VkBuffer src, VkDeviceSize src_off, VkBuffer dst,
                            VkDeviceSize dst_off, VkDeviceSize size, uint32_t fill) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT};
    VkResult r;
    if ((r = d->fn->vkResetCommandBuffer(d->transfer_cmd, 0))) return kiln__vk_fail(r, "vkResetCommandBuffer");
    if ((r = d->fn->vkBeginCommandBuffer(d->transfer_cmd, &bi))) return kiln__vk_fail(r, "vkBeginCommandBuffer");
    if (src) {
        VkBufferCopy region = {src_off, dst_off, size};
        d->fn->vkCmdCopyBuffer(d->transfer_cmd, src, dst, 1, &region);
    } else {
        d->fn->vkCmdFillBuffer(d->transfer_cmd, dst, dst_off, size, fill);
    }
    d->fn->vkCmdPipelineBarrier(d->transfer_cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &mb, 0,
                                NULL, 0, NULL);
    if ((r = d->fn->vkEndCommandBuffer(d->transfer_cmd))) return kiln__vk_fail(r, "vkEndCommandBuffer");
    return kiln__vk_submit_wait(d, d->transfer_cmd, d->transfer_fence);
}

/* Copy piece bytes from slot i of the ring to dst and submit it, without waiting. */
static kiln_status slot_send(kiln_vk_device *d, int i, VkBuffer dst, VkDeviceSize dst_off,
                             VkDeviceSize piece) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT};
    VkBufferCopy region = {slot_offset(d, i), dst_off, piece};
    VkCommandBuffer cmd = d->ring[i].cmd;
    VkResult r;
    bool submitted;
    kiln_status s;
    if ((r = d->fn->vkResetCommandBuffer(cmd, 0))) return kiln__vk_fail(r, "vkResetCommandBuffer");
    if ((r = d->fn->vkBeginCommandBuffer(cmd, &bi))) return kiln__vk_fail(r, "vkBeginCommandBuffer");
    bool carries_pending = d->pending_open;
    d->fn->vkCmdCopyBuffer(cmd, d->staging_buf, dst, 1, &region);
    d->fn->vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1,
                                &mb, 0, NULL, 0, NULL);
    if ((r = d->fn->vkEndCommandBuffer(cmd))) return kiln__vk_fail(r, "vkEndCommandBuffer");
    if ((s = submit(d, cmd, d->ring[i].fence, &submitted))) return s;
    d->ring[i].busy = submitted;
    if (carries_pending) d->pending_slot = i;
    return KILN_OK;
}

kiln_status kiln__vk_upload(kiln_vk_device *d, kiln_vk_span dst, const void *src, size_t size) {
    bool deferred;
    kiln_status s = defer_upload(d, dst, src, size, &deferred);
    if (s || deferred) return s;
    for (size_t done = 0; done < size;) {
        size_t piece = (size_t)KILN__MIN((VkDeviceSize)(size - done), d->staging_size);
        int i;
        if ((s = slot_take(d, &i))) return s;
        memcpy((char *)d->staging_map + slot_offset(d, i), (const char *)src + done, piece);
        if ((s = slot_send(d, i, dst.buffer, dst.offset + done, piece))) return s;
        done += piece;
    }
    return KILN_OK;
}

kiln_status kiln__vk_download(kiln_vk_device *d, kiln_vk_span src, void *dst, size_t size) {
    for (size_t done = 0; done < size;) {
        size_t piece = (size_t)KILN__MIN((VkDeviceSize)(size - done), d->staging_size);
        kiln_status s;
        int i;
        if ((s = slot_take(d, &i)) ||
            (s = transfer(d, src.buffer, src.offset + done, d->staging_buf, slot_offset(d, i), piece, 0)))
            return s;
        memcpy((char *)dst + done, (const char *)d->staging_map + slot_offset(d, i), piece);
        done += piece;
    }
    return KILN_OK;
}

kiln_status kiln__vk_fill(kiln_vk_device *d, kiln_vk_span dst, int value, size_t size) {
    uint32_t word = (uint32_t)(value & 0xff) * 0x01010101u;
    kiln_status s;
    if (dst.offset % 4 == 0 && size % 4 == 0)
        return transfer(d, VK_NULL_HANDLE, 0, dst.buffer, dst.offset, size, word);
    /* Unaligned ends: the bytes go through the ring. */
    for (size_t done = 0; done < size;) {
        size_t piece = (size_t)KILN__MIN((VkDeviceSize)(size - done), d->staging_size);
        int i;
        if ((s = slot_take(d, &i))) return s;
        memset((char *)d->staging_map + slot_offset(d, i), value, piece);
        if ((s = transfer(d, d->staging_buf, slot_offset(d, i), dst.buffer, dst.offset + done, piece, 0)))
            return s;
        done += piece;
    }
    return KILN_OK;
}

kiln_status kiln__vk_copy(kiln_vk_device *d, kiln_vk_span src, kiln_vk_span dst, size_t size) {
    bool overlap =
        src.buffer == dst.buffer && src.offset < dst.offset + size && dst.offset < src.offset + size;
    kiln_status s;
    if (!overlap) return transfer(d, src.buffer, src.offset, dst.buffer, dst.offset, size, 0);
    /* vkCmdCopyBuffer forbids overlapping regions: go through the ring, in the direction memmove would. */
    for (size_t done = 0; done < size;) {
        size_t piece = (size_t)KILN__MIN((VkDeviceSize)(size - done), d->staging_size);
        size_t at = dst.offset > src.offset ? size - done - piece : done;
        int i;
        if ((s = slot_take(d, &i)) ||
            (s = transfer(d, src.buffer, src.offset + at, d->staging_buf, slot_offset(d, i), piece, 0)) ||
            (s = transfer(d, d->staging_buf, slot_offset(d, i), dst.buffer, dst.offset + at, piece, 0)))
            return s;
        done += piece;
    }
    return KILN_OK;
}
