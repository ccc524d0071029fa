/*
 * vk_backend.c - the Vulkan compute backend (see backend.h, vk.h and docs/vulkan.md): buffers from the
 * device's memory pool, the buffer verbs through the staging ring, weights uploaded once per backend and
 * found again by identity, one compute pipeline per shader (and per weight type where a specialization
 * constant selects it), and compute over a node range.
 *
 * A compute call records one command buffer for its range: per node a descriptor set (five storage
 * buffers), push constants and a dispatch, with a compute-to-compute barrier before each dispatch that
 * depends on one since the last barrier (vk_hazard.h) and one at the end; then submits it and waits. The
 * recording is kept (up to KILN_VK_RECORDINGS, least recently used replaced) under a key of everything it
 * was recorded from, and a later call over a range with the same key submits it again
 * without recording: a committed plan's ranges are recorded once and replayed every step, since its
 * inputs change in content, never in address. Buffers are not host memory: their base is the pool's opaque
 * address, so the scheduler moves every byte in and out through the verbs. Weights (leaves flagged
 * KILN_TENSOR_WEIGHT or KILN_TENSOR_CONST) are read from host memory where they lie, as backend.h's
 * unified-memory contract promises: the backend uploads each once, on first use, and keeps it as long as the
 * backend (the model).
 */
#include "backend/vulkan/vk.h"
#include "backend/vulkan/vk_shaders.h"

#include "core/core.h"
#include "tensor/types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DESC_SETS 1024 /* descriptor sets per descriptor pool */

static const char *vk_name(const kiln_backend *b) {
    (void)b;
    return "vulkan";
}

static const char *vk_describe(const kiln_backend *b) {
    const kiln_vk_ctx *c = b->context;
    return c->description;
}

static bool vk_supports_op(const kiln_backend *b, const kiln_tensor *node) {
    return kiln__vk_supports(b->context, node);
}

static bool vk_holds_kv(const kiln_backend *b, kiln_type type, size_t row_bytes, int64_t n_cells) {
    return kiln__vk_holds_kv(b->context, type, row_bytes, n_cells);
}

static bool vk_owns(const kiln_backend *b, const void *data) {
    const kiln_vk_ctx *c = b->context;
    kiln_vk_span sp;
    return kiln__vk_pool_resolve(c->dev->pool, (uintptr_t)data, &sp);
}

static size_t vk_alignment(const kiln_backend *b) {
    (void)b;
    return KILN_BACKEND_ALIGN;
}

/* ---- Buffers and their verbs ---- */

static kiln_status vk_buffer_alloc(kiln_backend *b, size_t size, kiln_buffer *out) {
    kiln_vk_ctx *c = b->context;
    uintptr_t addr;
    kiln_status s = kiln__vk_pool_alloc(c->dev->pool, size, &addr);
    if (s) return kiln__error_prefix(s, "a %zu-byte vulkan buffer: ", size);
    out->base = (void *)addr;
    out->size = size;
    return KILN_OK;
}

static void vk_buffer_free(kiln_backend *b, kiln_buffer *buf) {
    kiln_vk_ctx *c = b->context;
    kiln__vk_pool_free(c->dev->pool, (uintptr_t)buf->base);
}

/* The span of buffer bytes [offset, ...) (the wrappers checked the range against the buffer). */
static kiln_status span_of(const kiln_buffer *buf, size_t offset, kiln_vk_span *out) {
    kiln_vk_ctx *c = buf->backend->context;
    if (!kiln__vk_pool_resolve(c->dev->pool, (uintptr_t)buf->base + offset, out))
        return kiln__error(KILN_E_INVALID_ARG, "vulkan: buffer %p is not one of this backend's", buf->base);
    return KILN_OK;
}

static kiln_status vk_set(kiln_buffer *buf, size_t offset, const void *src, size_t size) {
    kiln_vk_ctx *c = buf->backend->context;
    kiln_vk_span sp;
    kiln_status s = span_of(buf, offset, &sp);
    return s ? s : kiln__vk_upload(c->dev, sp, src, size);
}

static kiln_status vk_get(const kiln_buffer *buf, size_t offset, void *dst, size_t size) {
    kiln_vk_ctx *c = buf->backend->context;
    kiln_vk_span sp;
    kiln_status s = span_of(buf, offset, &sp);
    return s ? s : kiln__vk_download(c->dev, sp, dst, size);
}

static kiln_status vk_memset(kiln_buffer *buf, size_t offset, int value, size_t size) {
    kiln_vk_ctx *c = buf->backend->context;
    kiln_vk_span sp;
    kiln_status s = span_of(buf, offset, &sp);
    return s ? s : kiln__vk_fill(c->dev, sp, value, size);
}

static kiln_status vk_copy(const kiln_buffer *src, size_t src_offset, kiln_buffer *dst, size_t dst_offset,
                           size_t size) {
    kiln_vk_ctx *c = dst->backend->context;
    kiln_vk_span a, b;
    kiln_status s;
    if ((s = span_of(src, src_offset, &a)) || (s = span_of(dst, dst_offset, &b))) return s;
    return kiln__vk_copy(c->dev, a, b, size);
}

/* ---- Weights and bindings ---- */

/* The device copy of weight leaf w, or NULL when it has none yet. */
static const kiln_vk_weight *find_weight(const kiln_vk_ctx *c, const kiln_tensor *w) {
    size_t bytes = kiln__tensor_nbytes(w);
    for (int32_t i = 0; i < c->n_weights; i++) {
        const kiln_vk_weight *e = &c->weights[i];
        if (e->src == w->data && e->type == w->type && e->bytes == bytes &&
            !memcmp(e->ne, w->ne, sizeof e->ne))
            return e;
    }
    return NULL;
}

/* The weight leaf that source x of a node reads (through a view), or NULL when it reads none. */
static const kiln_tensor *weight_of(const kiln_tensor *x) {
    const kiln_tensor *root = x ? (x->view_src ? x->view_src : x) : NULL;
    return root && root->op == KILN_OP_NONE && root->data &&
                   (root->flags & (KILN_TENSOR_WEIGHT | KILN_TENSOR_CONST))
               ? root
               : NULL;
}

/* The device copy of weight leaf w, uploaded now when it has none. */
static kiln_status weight_addr(kiln_vk_ctx *c, const kiln_tensor *w, uintptr_t *addr) {
    kiln_vk_weight *e;
    kiln_vk_span sp;
    kiln_status s;
    size_t bytes = kiln__tensor_nbytes(w);
    const kiln_vk_weight *have = find_weight(c, w);
    if (have) {
        *addr = have->addr;
        return KILN_OK;
    }
    if (c->n_weights == c->cap_weights) {
        int32_t cap = c->cap_weights ? 2 * c->cap_weights : 64;
        kiln_vk_weight *grown = kiln__realloc_array(c->weights, (size_t)cap, sizeof *grown);
        if (!grown) return kiln__nomem("the Vulkan weight table");
        c->weights = grown;
        c->cap_weights = cap;
    }
    if ((s = kiln__vk_pool_alloc(c->dev->pool, bytes, addr)))
        return kiln__error_prefix(s, "uploading weight '%s': ", w->name);
    if (!kiln__vk_pool_resolve(c->dev->pool, *addr, &sp) ||
        (s = kiln__vk_upload(c->dev, sp, w->data, bytes))) {
        kiln__vk_pool_free(c->dev->pool, *addr);
        return s ? s : kiln__error(KILN_E_INTERNAL, "vulkan: a fresh buffer does not resolve");
    }
    e = &c->weights[c->n_weights++];
    e->src = w->data;
    e->type = w->type;
    memcpy(e->ne, w->ne, sizeof e->ne);
    e->bytes = bytes;
    e->addr = *addr;
    c->weight_bytes += bytes;
    return KILN_OK;
}

kiln_status kiln__vk_bind_range(kiln_vk_ctx *c, const kiln_tensor *t, size_t start, size_t bytes,
                                kiln_vk_bind *out) {
    const kiln_tensor *root = t->view_src ? t->view_src : t;
    kiln_vk_span sp;
    uintptr_t addr;
    kiln_status s;
    if (!t->data) return kiln__error(KILN_E_INVALID_ARG, "vulkan: tensor '%s' has no data", t->name);
    if (root->op == KILN_OP_NONE && (root->flags & (KILN_TENSOR_WEIGHT | KILN_TENSOR_CONST))) {
        if ((s = weight_addr(c, root, &addr))) return s;
        addr += (uintptr_t)((const char *)t->data - (const char *)root->data);
    } else {
        addr = (uintptr_t)t->data;
    }
    if (!kiln__vk_pool_resolve(c->dev->pool, addr + start, &sp))
        return kiln__error(KILN_E_INVALID_ARG, "vulkan: tensor '%s' is not in device memory", t->name);
    VkDeviceSize aligned = sp.offset - sp.offset % c->dev->min_offset;
    out->buffer = sp.buffer;
    out->offset = aligned;
    out->rem = (uint32_t)(sp.offset - aligned);
    /* Shaders read whole 32-bit words: a range ending inside one (a Q6_K row of 630 bytes, say) is
     * rounded up to it, else robust access reads the last word as zeros. The pool's allocations are whole
     * grains, so the word is ours. */
    out->range = (out->rem + (VkDeviceSize)(bytes ? bytes : 4) + 3) / 4 * 4;
    if (out->range > sp.size + out->rem) out->range = sp.size + out->rem;
    if (out->range > c->dev->max_range)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "vulkan: tensor '%s' spans %llu bytes, over maxStorageBufferRange %llu", t->name,
                           (unsigned long long)out->range, (unsigned long long)c->dev->max_range);
    return KILN_OK;
}

kiln_status kiln__vk_bind(kiln_vk_ctx *c, const kiln_tensor *t, kiln_vk_bind *out) {
    return kiln__vk_bind_range(c, t, 0, kiln__tensor_span(t), out);
}

/* ---- Dispatch ---- */

static kiln_status next_set(kiln_vk_ctx *c, VkDescriptorSet *out) {
    kiln_vk_fns *fn = c->dev->fn;
    kiln_vk_recording *rec = c->rec;
    VkResult r;
    if (rec->used_desc_pools == 0 || rec->sets_in_pool == DESC_SETS) {
        if (rec->used_desc_pools == rec->n_desc_pools) {
            VkDescriptorPool *grown =
                kiln__realloc_array(rec->desc_pools, (size_t)rec->n_desc_pools + 1, sizeof *grown);
            if (!grown) return kiln__nomem("the Vulkan descriptor pools");
            rec->desc_pools = grown;
            VkDescriptorPoolSize size = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, KILN_VK_BINDINGS * DESC_SETS};
            VkDescriptorPoolCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                             .maxSets = DESC_SETS,
                                             .poolSizeCount = 1,
                                             .pPoolSizes = &size};
            if ((r = fn->vkCreateDescriptorPool(c->dev->device, &ci, NULL,
                                                &rec->desc_pools[rec->n_desc_pools])))
                return kiln__vk_fail(r, "vkCreateDescriptorPool");
            rec->n_desc_pools++;
        }
        rec->used_desc_pools++;
        rec->sets_in_pool = 0;
    }
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = rec->desc_pools[rec->used_desc_pools - 1],
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &c->set_layout};
    if ((r = fn->vkAllocateDescriptorSets(c->dev->device, &ai, out)))
        return kiln__vk_fail(r, "vkAllocateDescriptorSets");
    rec->sets_in_pool++;
    return KILN_OK;
}

static uint64_t buffer_bits(VkBuffer buffer) {
    uint64_t bits = 0;
    memcpy(&bits, &buffer, sizeof buffer < sizeof bits ? sizeof buffer : sizeof bits);
    return bits;
}

/* Whether a dispatch over bindings b must wait for the dispatches recorded since the last barrier: every
 * shader writes binding 3 only and reads the others (they are declared readonly); a binding left unused
 * (bound to binding 3's buffer as a placeholder) is not read. */
static bool hazard(kiln_vk_ctx *c, const kiln_vk_bind b[KILN_VK_BINDINGS]) {
    kiln_vk_range r[KILN_VK_BINDINGS], w[1];
    int nr = 0, nw = 0;
    for (int i = 0; i < KILN_VK_BINDINGS; i++) {
        if (!b[i].buffer) continue;
        kiln_vk_range x = {buffer_bits(b[i].buffer), b[i].offset, b[i].offset + b[i].range};
        if (i == 3)
            w[nw++] = x;
        else
            r[nr++] = x;
    }
    return kiln__vk_hazards_add(&c->hazards, r, nr, w, nw);
}

kiln_status kiln__vk_dispatch(kiln_vk_ctx *c, int pipe, const kiln_vk_bind b[KILN_VK_BINDINGS],
                              const void *push, uint32_t push_size, uint64_t groups, uint32_t gz) {
    kiln_vk_fns *fn = c->dev->fn;
    VkDescriptorBufferInfo infos[KILN_VK_BINDINGS];
    VkWriteDescriptorSet writes[KILN_VK_BINDINGS];
    VkDescriptorSet set;
    const kiln_vk_bind *fill = &b[3];
    kiln_status s;
    uint32_t gx = (uint32_t)KILN__MIN(groups, 65535u), gy;
    if (groups == 0 || gz == 0) return KILN_OK;
    if ((groups + gx - 1) / gx > 65535u)
        return kiln__error(KILN_E_UNSUPPORTED, "vulkan: %llu workgroups exceed the dispatch grid",
                           (unsigned long long)groups);
    gy = (uint32_t)((groups + gx - 1) / gx);
    if ((s = next_set(c, &set))) return s;
    for (int i = 0; i < KILN_VK_BINDINGS; i++) {
        const kiln_vk_bind *x = b[i].buffer ? &b[i] : fill;
        infos[i] = (VkDescriptorBufferInfo){x->buffer, x->offset, x->range};
        writes[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                           .dstSet = set,
                                           .dstBinding = (uint32_t)i,
                                           .descriptorCount = 1,
                                           .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                           .pBufferInfo = &infos[i]};
    }
    fn->vkUpdateDescriptorSets(c->dev->device, KILN_VK_BINDINGS, writes, 0, NULL);
    fn->vkCmdBindPipeline(c->rec->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->pipes[pipe]);
    fn->vkCmdBindDescriptorSets(c->rec->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->layout, 0, 1, &set, 0, NULL);
    fn->vkCmdPushConstants(c->rec->cmd, c->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, push);
    if (hazard(c, b)) {
        VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                              .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                              .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
        fn->vkCmdPipelineBarrier(c->rec->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                 VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
        c->n_barriers++;
    }
    fn->vkCmdDispatch(c->rec->cmd, gx, gy, gz);
    kiln__vk_profile_mark(c, pipe);
    if (c->q8.valid && b[3].buffer) { /* the reusable q8 rows: gone once their source or they are written */
        VkDeviceSize lo = b[3].offset, hi = b[3].offset + b[3].range;
        if ((b[3].buffer == c->q8.src_buffer && lo < c->q8.src_hi && c->q8.src_lo < hi) ||
            (b[3].buffer == c->q8.rows_buffer && lo < c->q8.rows_hi && c->q8.rows_lo < hi))
            c->q8.valid = false;
    }
    c->n_dispatches++;
    return KILN_OK;
}

/* ---- Compute ---- */

/* ---- Compute: record a range once, replay it while nothing it recorded changed ---- */

static bool key_put(kiln_vk_ctx *c, const void *bytes, size_t n) {
    if (c->key_len + n > c->key_cap) {
        size_t cap = c->key_cap ? c->key_cap : 4096;
        unsigned char *grown;
        while (cap < c->key_len + n)
            cap *= 2;
        if (!(grown = kiln__realloc(c->key, cap))) return false;
        c->key = grown;
        c->key_cap = cap;
    }
    memcpy(c->key + c->key_len, bytes, n);
    c->key_len += n;
    return true;
}

/* Everything recording [i0, i1) reads: per computing node its op, parameters, shape, strides and address,
 * and the same of each source and of the source's root (a weight is found by its root); then the pool's
 * generation. Two ranges with equal keys record the same commands. */
static kiln_status make_key(kiln_vk_ctx *c, kiln_graph *g, int32_t i0, int32_t i1) {
    uint64_t gen = kiln__vk_pool_generation(c->dev->pool);
    bool ok = true;
    c->key_len = 0;
    for (int32_t i = i0; i < i1 && ok; i++) {
        const kiln_tensor *t = kiln__graph_node(g, i);
        if (kiln__op_is_view(t->op) && t->op != KILN_OP_CACHE_WRITE) continue;
        ok = key_put(c, &t->op, sizeof t->op) && key_put(c, t->ip, sizeof t->ip) &&
             key_put(c, t->fp, sizeof t->fp);
        for (int k = -1; k < KILN_MAX_SRC && ok; k++) {
            const kiln_tensor *x = k < 0 ? t : t->src[k], *root;
            const void *none = NULL;
            if (!x) {
                ok = key_put(c, &none, sizeof none);
                continue;
            }
            root = x->view_src ? x->view_src : x;
            ok = key_put(c, &x->data, sizeof x->data) && key_put(c, &x->type, sizeof x->type) &&
                 key_put(c, x->ne, sizeof x->ne) && key_put(c, x->nb, sizeof x->nb) &&
                 key_put(c, &root->data, sizeof root->data) && key_put(c, &root->flags, sizeof root->flags) &&
                 key_put(c, root->ne, sizeof root->ne);
        }
    }
    if (!ok || !key_put(c, &gen, sizeof gen) || !key_put(c, &c->profiling, sizeof c->profiling))
        return kiln__nomem("the Vulkan recording key");
    return KILN_OK;
}

/* The slot to record into: an unused one (given its command buffer), else the least recently used. */
static kiln_status free_slot(kiln_vk_ctx *c, kiln_vk_recording **out) {
    kiln_vk_fns *fn = c->dev->fn;
    kiln_vk_recording *lru = &c->recs[0];
    VkResult r;
    for (int i = 0; i < KILN_VK_RECORDINGS; i++) {
        kiln_vk_recording *rec = &c->recs[i];
        if (!rec->cmd) {
            VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                              .commandPool = c->dev->cmd_pool,
                                              .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                              .commandBufferCount = 1};
            if ((r = fn->vkAllocateCommandBuffers(c->dev->device, &ai, &rec->cmd))) {
                rec->cmd = VK_NULL_HANDLE;
                return kiln__vk_fail(r, "vkAllocateCommandBuffers");
            }
            *out = rec;
            return KILN_OK;
        }
        if (rec->last_used < lru->last_used) lru = rec;
    }
    *out = lru;
    return KILN_OK;
}

/* Upload every weight the nodes [i0, i1) read that the device has no copy of yet, before recording, telling
 * the backend's progress callback the bytes uploaded of the bytes to upload. Each upload goes through the
 * staging ring (kiln__vk_upload), which overlaps the host's copy of one piece with the device's copy of the
 * one before; the recording submitted after them is ordered after them on the queue. */
static kiln_status upload_weights(kiln_backend *b, kiln_graph *g, int32_t i0, int32_t i1) {
    kiln_vk_ctx *c = b->context;
    uint64_t total = 0, done = 0;
    uintptr_t addr;
    kiln_status s;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = i0; i < i1; i++) {
            const kiln_tensor *t = kiln__graph_node(g, i);
            if (kiln__op_is_view(t->op) && t->op != KILN_OP_CACHE_WRITE) continue;
            for (int k = 0; k < KILN_MAX_SRC; k++) {
                const kiln_tensor *w = weight_of(t->src[k]);
                if (!w || find_weight(c, w)) continue;
                if (pass == 0) {
                    /* counted once: an earlier source of this range reading the same leaf counted it */
                    bool seen = false;
                    for (int32_t j = i0; j <= i && !seen; j++)
                        for (int q = 0; q < KILN_MAX_SRC && !seen && (j < i || q < k); q++) {
                            const kiln_tensor *x = kiln__graph_node(g, j);
                            const kiln_tensor *v = weight_of(x->src[q]);
                            /* the identity find_weight uses: two leaves over the same bytes are one */
                            seen = !(kiln__op_is_view(x->op) && x->op != KILN_OP_CACHE_WRITE) && v &&
                                   v->data == w->data && v->type == w->type &&
                                   !memcmp(v->ne, w->ne, sizeof v->ne);
                        }
                    if (!seen) total += kiln__tensor_nbytes(w);
                    continue;
                }
                if ((s = weight_addr(c, w, &addr))) return s;
                done += kiln__tensor_nbytes(w);
                if (b->progress) b->progress(b->progress_user, done, total);
            }
        }
        if (total == 0) break;
    }
    return KILN_OK;
}

/* The scratch buffer grown to what recording [i0, i1) needs. A grown scratch is a new buffer, so every
 * recording (each names the old one) is dropped first. */
static kiln_status size_scratch(kiln_vk_ctx *c, kiln_graph *g, int32_t i0, int32_t i1) {
    size_t need = 0, cap;
    uintptr_t addr;
    kiln_status s;
    for (int32_t i = i0; i < i1; i++) {
        const kiln_tensor *t = kiln__graph_node(g, i);
        if (!(kiln__op_is_view(t->op) && t->op != KILN_OP_CACHE_WRITE))
            need = KILN__MAX(need, kiln__vk_scratch_bytes(c, t));
    }
    if (need <= c->scratch_bytes) return KILN_OK;
    for (cap = 1 << 16; cap < need; cap *= 2) {
    }
    if ((s = kiln__vk_pool_alloc(c->dev->pool, cap, &addr)))
        return kiln__error_prefix(s, "the %zu-byte Vulkan scratch buffer: ", cap);
    for (int i = 0; i < KILN_VK_RECORDINGS; i++)
        c->recs[i].valid = false;
    if (c->scratch) kiln__vk_pool_free(c->dev->pool, c->scratch);
    c->scratch = addr;
    c->scratch_bytes = cap;
    return KILN_OK;
}

kiln_status kiln__vk_bind_scratch(kiln_vk_ctx *c, size_t bytes, kiln_vk_bind *out) {
    if (bytes > c->scratch_bytes)
        return kiln__error(KILN_E_INTERNAL, "vulkan: the scratch buffer holds %zu bytes, %zu needed",
                           c->scratch_bytes, bytes);
    return kiln__vk_bind_addr(c, c->scratch, bytes, out);
}

kiln_status kiln__vk_bind_addr(kiln_vk_ctx *c, uintptr_t addr, size_t bytes, kiln_vk_bind *out) {
    kiln_vk_span sp;
    if (!kiln__vk_pool_resolve(c->dev->pool, addr, &sp))
        return kiln__error(KILN_E_INTERNAL, "vulkan: address %#llx is not in the pool", (unsigned long long)addr);
    VkDeviceSize aligned = sp.offset - sp.offset % c->dev->min_offset;
    out->buffer = sp.buffer;
    out->offset = aligned;
    out->rem = (uint32_t)(sp.offset - aligned);
    out->range = out->rem + (bytes + 3) / 4 * 4;
    return KILN_OK;
}

static kiln_status record(kiln_backend *b, kiln_graph *g, int32_t i0, int32_t i1, kiln_vk_recording *rec) {
    kiln_vk_ctx *c = b->context;
    kiln_vk_fns *fn = c->dev->fn;
    kiln_status s = KILN_OK;
    VkResult r;
    rec->valid = false;
    if ((s = upload_weights(b, g, i0, i1)) || (s = size_scratch(c, g, i0, i1))) return s;
    for (int32_t i = 0; i < rec->used_desc_pools; i++)
        if ((r = fn->vkResetDescriptorPool(c->dev->device, rec->desc_pools[i], 0)))
            return kiln__vk_fail(r, "vkResetDescriptorPool");
    rec->used_desc_pools = 0;
    if ((r = fn->vkResetCommandBuffer(rec->cmd, 0))) return kiln__vk_fail(r, "vkResetCommandBuffer");
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if ((r = fn->vkBeginCommandBuffer(rec->cmd, &bi))) return kiln__vk_fail(r, "vkBeginCommandBuffer");
    if ((s = kiln__vk_profile_begin(c, rec))) return s;
    c->rec = rec;
    c->q8.valid = false;
    kiln__vk_hazards_clear(&c->hazards); /* the last submission ended with a barrier */
    for (int32_t i = i0; i < i1 && !s; i++) {
        const kiln_tensor *t = kiln__graph_node(g, i);
        if (kiln__op_is_view(t->op) && t->op != KILN_OP_CACHE_WRITE) continue;
        if (b->abort_fn && b->abort_fn(b->abort_user))
            s = kiln__error(KILN_E_ABORTED, "aborted by the caller's callback");
        else if ((s = kiln__vk_record(c, t)))
            s = kiln__error_prefix(s, "vulkan: node '%s' (%s): ", t->name, kiln__op_name(t->op));
    }
    c->rec = NULL;
    /* Every write of the range made visible to whatever comes next in the queue: the next range's
     * dispatches, the download of an output, a copy. */
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT};
    fn->vkCmdPipelineBarrier(rec->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0,
                             1, &mb, 0, NULL, 0, NULL);
    if ((r = fn->vkEndCommandBuffer(rec->cmd)) && !s) s = kiln__vk_fail(r, "vkEndCommandBuffer");
    if (s) return s;
    /* Recording may have uploaded weights (new blocks), so the key is taken again. */
    if ((s = make_key(c, g, i0, i1))) return s;
    if (rec->key_cap < c->key_len) {
        unsigned char *grown = kiln__realloc(rec->key, c->key_len);
        if (!grown) return kiln__nomem("the Vulkan recording key");
        rec->key = grown;
        rec->key_cap = c->key_len;
    }
    memcpy(rec->key, c->key, c->key_len);
    rec->key_len = c->key_len;
    rec->valid = true;
    c->n_recorded++;
    return KILN_OK;
}

static kiln_status vk_compute(kiln_backend *b, kiln_graph *g, int32_t i0, int32_t i1) {
    kiln_vk_ctx *c = b->context;
    kiln_vk_recording *rec = NULL;
    kiln_status s;
    uint64_t t0 = c->profiling ? kiln__now_ns() : 0, t1;
    if ((s = make_key(c, g, i0, i1))) return s;
    for (int i = 0; i < KILN_VK_RECORDINGS && !rec; i++)
        if (c->recs[i].valid && c->recs[i].key_len == c->key_len &&
            !memcmp(c->recs[i].key, c->key, c->key_len))
            rec = &c->recs[i];
    if (rec) {
        if (b->abort_fn && b->abort_fn(b->abort_user))
            return kiln__error(KILN_E_ABORTED, "aborted by the caller's callback");
        c->n_replayed++;
    } else if ((s = free_slot(c, &rec)) || (s = record(b, g, i0, i1, rec))) {
        return s;
    } else {
        c->prof.recorded += c->profiling;
    }
    rec->last_used = ++c->clock;
    if (!c->profiling) return kiln__vk_submit_wait(c->dev, rec->cmd, c->fence);
    t1 = kiln__now_ns();
    if ((s = kiln__vk_submit_wait(c->dev, rec->cmd, c->fence))) return s;
    c->prof.computes++;
    c->prof.record_ns += t1 - t0;
    c->prof.submit_ns += kiln__now_ns() - t1;
    return kiln__vk_profile_collect(c, rec);
}

static void vk_memory(const kiln_backend *b, kiln_backend_memory *out) {
    const kiln_vk_ctx *c = b->context;
    kiln_vk_pool_stats st;
    kiln__vk_pool_stats(c->dev->pool, &st);
    out->device.allocations = st.device_allocs;
    out->device.frees = st.device_frees;
    out->device.requests = st.requests;
    out->device.reuses = st.reuses;
    out->device.evictions = st.evictions;
    out->device.bytes = st.bytes_device;
    out->device.peak_bytes = st.bytes_peak;
    out->device.weight_bytes = c->weight_bytes;
    out->capacity = 0;
    for (int32_t h = 0; h < c->dev->info.n_heaps && h < 8; h++)
        if (c->dev->info.heap_device_local[h]) out->capacity = KILN__MAX(out->capacity, c->dev->info.heap_bytes[h]);
}

static void vk_destroy(kiln_backend *b) {
    kiln_vk_ctx *c = b->context;
    if (c->dev && c->dev->device) {
        kiln_vk_fns *fn = c->dev->fn;
        VkDevice dev = c->dev->device;
        for (int i = 0; i < KILN_VK_PIPE_COUNT; i++)
            if (c->pipes[i]) fn->vkDestroyPipeline(dev, c->pipes[i], NULL);
        if (c->layout) fn->vkDestroyPipelineLayout(dev, c->layout, NULL);
        if (c->set_layout) fn->vkDestroyDescriptorSetLayout(dev, c->set_layout, NULL);
        for (int i = 0; i < KILN_VK_RECORDINGS; i++) {
            for (int32_t j = 0; j < c->recs[i].n_desc_pools; j++)
                fn->vkDestroyDescriptorPool(dev, c->recs[i].desc_pools[j], NULL);
            if (c->recs[i].queries) fn->vkDestroyQueryPool(dev, c->recs[i].queries, NULL);
        }
        if (c->fence) fn->vkDestroyFence(dev, c->fence, NULL);
    }
    kiln__vk_device_destroy(c->dev); /* its pool frees every block, the weights' included; its command
                                      * pool every command buffer */
    for (int i = 0; i < KILN_VK_RECORDINGS; i++) {
        kiln__dealloc(c->recs[i].desc_pools);
        kiln__dealloc(c->recs[i].key);
        kiln__dealloc(c->recs[i].stamp_pipe);
    }
    kiln__dealloc(c->prof.stamps);
    kiln__dealloc(c->key);
    kiln__dealloc(c->weights);
    kiln__dealloc(c->rope_tables); /* their buffers went with the pool */
    kiln__dealloc(c);
    kiln__dealloc(b);
}

static const kiln_backend_iface vk_iface = {
    .name = vk_name,
    .supports_op = vk_supports_op,
    .alignment = vk_alignment,
    .buffer_alloc = vk_buffer_alloc,
    .buffer_free = vk_buffer_free,
    .buffer_set = vk_set,
    .buffer_get = vk_get,
    .buffer_memset = vk_memset,
    .buffer_copy = vk_copy,
    .compute = vk_compute,
    .destroy = vk_destroy,
    .memory = vk_memory,
    .describe = vk_describe,
    .holds_kv = vk_holds_kv,
    .owns = vk_owns,
    .profile = kiln__vk_profile_set,
    .profile_read = kiln__vk_profile_read,
};

/* ---- Pipelines ---- */

static const kiln_vk_shader *shader_named(const char *name) {
    for (int i = 0; i < kiln__vk_n_shaders; i++)
        if (!strcmp(kiln__vk_shaders[i].name, name)) return &kiln__vk_shaders[i];
    return NULL;
}

/* The pipeline of shader `name` (spec: its specialization constant 0, or -1 for none). A shader embedded in
 * two variants (shaders/reduce.glsl) is made from its NAME_subgroup module when c->subgroup. */
static kiln_status make_pipeline(kiln_vk_ctx *c, int pipe, const char *name, int32_t spec) {
    kiln_vk_fns *fn = c->dev->fn;
    char variant[64];
    snprintf(variant, sizeof variant, "%s_subgroup", name);
    const kiln_vk_shader *sh =
        c->subgroup && shader_named(variant) ? shader_named(variant) : shader_named(name);
    VkShaderModule mod;
    VkResult r;
    uint32_t value = (uint32_t)(spec < 0 ? 0 : spec);
    if (!sh) return kiln__error(KILN_E_INTERNAL, "vulkan: shader '%s' was not embedded", name);
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = sh->size,
                                   .pCode = (const uint32_t *)(const void *)sh->code};
    if ((r = fn->vkCreateShaderModule(c->dev->device, &mi, NULL, &mod)))
        return kiln__vk_fail(r, "vkCreateShaderModule");
    VkSpecializationMapEntry entry = {0, 0, sizeof value};
    VkSpecializationInfo si = {1, &entry, sizeof value, &value};
    VkComputePipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                      .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                                .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                                .module = mod,
                                                .pName = "main",
                                                .pSpecializationInfo = spec < 0 ? NULL : &si},
                                      .layout = c->layout};
    r = fn->vkCreateComputePipelines(c->dev->device, VK_NULL_HANDLE, 1, &ci, NULL, &c->pipes[pipe]);
    fn->vkDestroyShaderModule(c->dev->device, mod, NULL);
    if (r) {
        c->pipes[pipe] = VK_NULL_HANDLE;
        return kiln__error(KILN_E_INTERNAL, "vulkan: the pipeline of shader '%s' failed (%s)", name,
                           kiln__vk_result_name(r));
    }
    return KILN_OK;
}

/* norm.comp's workgroup: 512 invocations on a GPU (a decode step's one row is the whole dispatch), 128 on a
 * CPU device (lavapipe runs the invocations a SIMD width at a time), never more than the device runs. */
static uint32_t norm_size(const kiln_device_info *info) {
    uint32_t n = info->type == KILN_DEVICE_CPU ? KILN_VK_NORM_CPU : KILN_VK_NORM_GPU;
    while (n > KILN_VK_MIN_INVOCATIONS && n > info->max_workgroup_invocations)
        n /= 2;
    return n;
}

static kiln_status make_pipelines(kiln_vk_ctx *c) {
    kiln_vk_fns *fn = c->dev->fn;
    VkResult r;
    kiln_status s;
    VkDescriptorSetLayoutBinding binds[KILN_VK_BINDINGS];
    for (uint32_t i = 0; i < KILN_VK_BINDINGS; i++)
        binds[i] = (VkDescriptorSetLayoutBinding){i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                                                  VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = KILN_VK_BINDINGS,
                                          .pBindings = binds};
    if ((r = fn->vkCreateDescriptorSetLayout(c->dev->device, &li, NULL, &c->set_layout)))
        return kiln__vk_fail(r, "vkCreateDescriptorSetLayout");
    VkPushConstantRange pc = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
    VkPipelineLayoutCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                     .setLayoutCount = 1,
                                     .pSetLayouts = &c->set_layout,
                                     .pushConstantRangeCount = 1,
                                     .pPushConstantRanges = &pc};
    if ((r = fn->vkCreatePipelineLayout(c->dev->device, &pi, NULL, &c->layout)))
        return kiln__vk_fail(r, "vkCreatePipelineLayout");
    c->subgroup = c->dev->info.subgroup_arithmetic && !c->opt.portable_reduce;
    if ((s = make_pipeline(c, KILN_VK_PIPE_BINARY, "binary", -1)) ||
        (s = make_pipeline(c, KILN_VK_PIPE_UNARY, "unary", -1)) ||
        (s = make_pipeline(c, KILN_VK_PIPE_NORM, "norm", (int32_t)norm_size(&c->dev->info))) ||
        (s = make_pipeline(c, KILN_VK_PIPE_SOFTMAX, "softmax", -1)) ||
        (s = make_pipeline(c, KILN_VK_PIPE_ROPE, "rope", -1)))
        return s;
    for (int32_t t = 0; t < KILN_VK_KV_TYPES; t++)
        if ((s = make_pipeline(c, KILN_VK_PIPE_ATTENTION + t, "attention", t)) ||
            (s = make_pipeline(c, KILN_VK_PIPE_CACHE_WRITE + t, "cache_write", t)) ||
            (s = make_pipeline(c, KILN_VK_PIPE_CAST + t, "cast", t)) ||
            (kiln__vk_attention_tiles(c->dev) &&
             (s = make_pipeline(c, KILN_VK_PIPE_ATTENTION_TILE + t, "attention_tile", t))))
            return s;
    if ((s = make_pipeline(c, KILN_VK_PIPE_QUANTIZE, "quantize_q8", -1)) ||
        (s = make_pipeline(c, KILN_VK_PIPE_ATTENTION_COMBINE, "attention_combine", -1)))
        return s;
    for (int32_t t = 0; t < KILN_VK_WEIGHT_TYPES; t++)
        if ((s = make_pipeline(c, KILN_VK_PIPE_MUL_MV + t, "mul_mv", t)) ||
            (s = make_pipeline(c, KILN_VK_PIPE_MUL_MM + t, "mul_mm", t)) ||
            (s = make_pipeline(c, KILN_VK_PIPE_GET_ROWS + t, "get_rows", t)))
            return s;
    return KILN_OK;
}

static kiln_status make_fence(kiln_vk_ctx *c) {
    VkResult r;
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = c->dev->fn->vkCreateFence(c->dev->device, &fci, NULL, &c->fence)))
        return kiln__vk_fail(r, "vkCreateFence");
    return KILN_OK;
}

kiln_status kiln__backend_vulkan_create_ex(const kiln_vk_options *o, kiln_backend **out) {
    kiln_backend *b = kiln__calloc(1, sizeof *b);
    kiln_vk_ctx *c = kiln__calloc(1, sizeof *c);
    kiln_status s;
    *out = NULL;
    if (!b || !c) {
        kiln__dealloc(b);
        kiln__dealloc(c);
        return kiln__nomem("the Vulkan backend");
    }
    b->iface = &vk_iface;
    b->context = c;
    c->opt = *o;
    if (!(s = kiln__vk_device_create(o->device, o->pooled, &c->dev)) &&
        c->dev->info.max_workgroup_invocations < KILN_VK_MIN_INVOCATIONS)
        s = kiln__error(KILN_E_UNSUPPORTED, "Vulkan device '%s' runs %u invocations per workgroup; Kiln's kernels "
                        "need %u", c->dev->info.name, c->dev->info.max_workgroup_invocations,
                        KILN_VK_MIN_INVOCATIONS);
    if (!s && !(s = make_pipelines(c))) s = make_fence(c);
    if (s) {
        vk_destroy(b);
        return s;
    }
    snprintf(c->description, sizeof c->description, "vulkan:%d (%s, %s, %s reductions)", c->dev->info.index,
             c->dev->info.name, kiln_device_type_name(c->dev->info.type),
             c->subgroup ? "subgroup" : "shared-memory");
    *out = b;
    return KILN_OK;
}

/* A backend with the test hooks of backend.h applied (kiln__vulkan_set_test_hooks; none unless a test set
 * them), then a probe: one small buffer allocated and freed, so that a device without memory is dropped at
 * start rather than failing every decode. */
kiln_status kiln__backend_vulkan_create(int32_t device, kiln_backend **out) {
    const kiln_vulkan_test_hooks *h = kiln__vulkan_test_hooks();
    kiln_vk_options o = {
        .device = device, .pooled = !h->no_pool, .refuse = h->refuse, .portable_reduce = h->portable_reduce};
    kiln_status s;
    uintptr_t probe;
    if ((s = kiln__backend_vulkan_create_ex(&o, out))) return s;
    kiln_vk_ctx *c = (*out)->context;
    if (h->fail_alloc > 0) kiln__vk_pool_fail_after(c->dev->pool, h->fail_alloc);
    if ((s = kiln__vk_pool_alloc(c->dev->pool, 1, &probe))) {
        vk_destroy(*out);
        *out = NULL;
        return s;
    }
    kiln__vk_pool_free(c->dev->pool, probe);
    return KILN_OK;
}

kiln_vk_pool *kiln__backend_vulkan_pool(kiln_backend *b) {
    return b->iface == &vk_iface ? ((kiln_vk_ctx *)b->context)->dev->pool : NULL;
}

void kiln__backend_vulkan_replays(const kiln_backend *b, uint64_t *recorded, uint64_t *replayed) {
    const kiln_vk_ctx *c = b->iface == &vk_iface ? b->context : NULL;
    *recorded = c ? c->n_recorded : 0;
    *replayed = c ? c->n_replayed : 0;
}

uint64_t kiln__backend_vulkan_submits(const kiln_backend *b) {
    return b->iface == &vk_iface ? ((const kiln_vk_ctx *)b->context)->dev->submits : 0;
}

void kiln__backend_vulkan_ring(const kiln_backend *b, uint32_t *in_flight, uint64_t *waits) {
    const kiln_vk_device *d = b->iface == &vk_iface ? ((const kiln_vk_ctx *)b->context)->dev : NULL;
    *in_flight = 0;
    *waits = d ? d->ring_waits : 0;
    for (int i = 0; d && i < KILN_VK_RING_SLOTS; i++)
        *in_flight += d->ring[i].busy;
}

uint64_t kiln__backend_vulkan_q8_reused(const kiln_backend *b) {
    return b->iface == &vk_iface ? ((const kiln_vk_ctx *)b->context)->n_q8_reused : 0;
}

void kiln__backend_vulkan_barriers(const kiln_backend *b, uint64_t *dispatches, uint64_t *barriers) {
    const kiln_vk_ctx *c = b->iface == &vk_iface ? b->context : NULL;
    *dispatches = c ? c->n_dispatches : 0;
    *barriers = c ? c->n_barriers : 0;
}

void kiln__backend_vulkan_pool_stats(const kiln_backend *b, kiln_vk_pool_stats *out) {
    memset(out, 0, sizeof *out);
    if (b->iface == &vk_iface) kiln__vk_pool_stats(((const kiln_vk_ctx *)b->context)->dev->pool, out);
}
