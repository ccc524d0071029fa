/*
 * vk_profile.c - the Vulkan backend's kernel profile (kiln_model_profile, docs/vulkan.md "Profiling").
 *
 * While profiling is on, every range is recorded with a query pool of timestamps: one at the start, then one
 * after each dispatch, all written at the bottom of the pipe, so stamp i is when dispatch i and everything
 * before it had finished. Dispatch i's time is stamp i less stamp i-1: the time it added. Two dispatches
 * with no barrier between them may overlap; the later one then carries what they took together. Profiling
 * is a byte of every recording's key, so switching it records anew, and replays of a profiled recording are
 * timed as well. After a profiled submission's fence the stamps are read back (they are ready then) and
 * added to the kernel's row: one per pipeline, named by its shader and variant.
 */
#include "backend/vulkan/vk.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

_Static_assert(KILN_VK_PIPE_COUNT <= KILN_PROFILE_KERNELS, "a profile row for every pipeline");

kiln_status kiln__vk_profile_begin(kiln_vk_ctx *c, kiln_vk_recording *rec) {
    kiln_vk_fns *fn = c->dev->fn;
    VkResult r;
    rec->n_stamps = 0;
    if (!c->profiling) return KILN_OK;
    if (!rec->queries) {
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                    .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                    .queryCount = KILN_VK_STAMPS};
        if (!rec->stamp_pipe && !(rec->stamp_pipe = kiln__calloc(KILN_VK_STAMPS, sizeof *rec->stamp_pipe)))
            return kiln__nomem("the Vulkan profile's stamps");
        if ((r = fn->vkCreateQueryPool(c->dev->device, &qi, NULL, &rec->queries))) {
            rec->queries = VK_NULL_HANDLE;
            return kiln__vk_fail(r, "vkCreateQueryPool");
        }
    }
    fn->vkCmdResetQueryPool(rec->cmd, rec->queries, 0, KILN_VK_STAMPS);
    fn->vkCmdWriteTimestamp(rec->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, rec->queries, 0);
    rec->n_stamps = 1;
    return KILN_OK;
}

void kiln__vk_profile_mark(kiln_vk_ctx *c, int pipe) {
    kiln_vk_recording *rec = c->rec;
    if (!rec->n_stamps) return; /* recorded without profiling */
    if (rec->n_stamps == KILN_VK_STAMPS) {
        c->prof.unattributed++; /* counted once, when recorded: replays past the capacity are not */
        return;
    }
    c->dev->fn->vkCmdWriteTimestamp(rec->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, rec->queries,
                                    rec->n_stamps);
    rec->stamp_pipe[rec->n_stamps++] = (uint16_t)pipe;
}

kiln_status kiln__vk_profile_collect(kiln_vk_ctx *c, const kiln_vk_recording *rec) {
    uint64_t *t = c->prof.stamps;
    uint64_t mask = c->dev->timestamp_bits >= 64 ? UINT64_MAX : (UINT64_C(1) << c->dev->timestamp_bits) - 1;
    VkResult r;
    if (rec->n_stamps < 2 || !t) return KILN_OK;
    r = c->dev->fn->vkGetQueryPoolResults(c->dev->device, rec->queries, 0, rec->n_stamps,
                                          sizeof *t * rec->n_stamps, t, sizeof *t,
                                          VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
    if (r) return kiln__vk_fail(r, "vkGetQueryPoolResults");
    for (uint32_t i = 1; i < rec->n_stamps; i++) {
        int pipe = rec->stamp_pipe[i];
        uint64_t ticks = (t[i] - t[i - 1]) & mask; /* modular: a counter that wrapped between them */
        c->prof.calls[pipe]++;
        c->prof.ns[pipe] += (uint64_t)((double)ticks * (double)c->dev->timestamp_period + 0.5);
    }
    return KILN_OK;
}

kiln_status kiln__vk_profile_set(kiln_backend *b, bool on) {
    kiln_vk_ctx *c = b->context;
    if (on && !c->dev->timestamp_bits)
        return kiln__error(KILN_E_UNSUPPORTED, "%s: its compute queue has no timestamps", c->description);
    if (on) {
        uint64_t *keep = c->prof.stamps;
        memset(&c->prof, 0, sizeof c->prof);
        c->prof.stamps = keep ? keep : kiln__calloc(KILN_VK_STAMPS, sizeof *keep);
        if (!c->prof.stamps) return kiln__nomem("the Vulkan profile's results");
    }
    c->profiling = on;
    return KILN_OK;
}

/* "mul_mv q4_0": a pipeline's shader and, for those made per type, its type. */
static void pipe_name(int pipe, char *out, size_t cap) {
    static const char *const weight[KILN_VK_WEIGHT_TYPES] = {"f32", "f16", "q8_0", "q4_0", "q4_k", "q6_k"};
    static const char *const kv[KILN_VK_KV_TYPES] = {"f32", "f16", "q8_0"};
    static const struct {
        int first, n;
        const char *name;
        const char *const *types;
    } table[] = {
        {KILN_VK_PIPE_BINARY, 1, "binary", NULL},
        {KILN_VK_PIPE_UNARY, 1, "unary", NULL},
        {KILN_VK_PIPE_NORM, 1, "norm", NULL},
        {KILN_VK_PIPE_SOFTMAX, 1, "softmax", NULL},
        {KILN_VK_PIPE_ROPE, 1, "rope", NULL},
        {KILN_VK_PIPE_ATTENTION, KILN_VK_KV_TYPES, "attention", kv},
        {KILN_VK_PIPE_CACHE_WRITE, KILN_VK_KV_TYPES, "cache_write", kv},
        {KILN_VK_PIPE_CAST, KILN_VK_KV_TYPES, "cast", kv},
        {KILN_VK_PIPE_QUANTIZE, 1, "quantize_q8", NULL},
        {KILN_VK_PIPE_ATTENTION_COMBINE, 1, "attention_combine", NULL},
        {KILN_VK_PIPE_ATTENTION_TILE, KILN_VK_KV_TYPES, "attention_tile", kv},
        {KILN_VK_PIPE_MUL_MV, KILN_VK_WEIGHT_TYPES, "mul_mv", weight},
        {KILN_VK_PIPE_MUL_MM, KILN_VK_WEIGHT_TYPES, "mul_mm", weight},
        {KILN_VK_PIPE_GET_ROWS, KILN_VK_WEIGHT_TYPES, "get_rows", weight},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (pipe >= table[i].first && pipe < table[i].first + table[i].n) {
            if (table[i].types)
                snprintf(out, cap, "%s %s", table[i].name, table[i].types[pipe - table[i].first]);
            else
                snprintf(out, cap, "%s", table[i].name);
            return;
        }
    snprintf(out, cap, "pipeline %d", pipe);
}

void kiln__vk_profile_read(const kiln_backend *b, kiln_device_profile *out) {
    const kiln_vk_ctx *c = b->context;
    out->computes = c->prof.computes;
    out->recorded = c->prof.recorded;
    out->record_ns = c->prof.record_ns;
    out->submit_ns = c->prof.submit_ns;
    out->unattributed = c->prof.unattributed;
    out->n_kernels = 0;
    out->kernel_ns = 0;
    for (int p = 0; p < KILN_VK_PIPE_COUNT && out->n_kernels < KILN_PROFILE_KERNELS; p++) {
        kiln_kernel_time *k;
        if (!c->prof.calls[p]) continue;
        k = &out->kernels[out->n_kernels++];
        pipe_name(p, k->name, sizeof k->name);
        k->calls = c->prof.calls[p];
        k->ns = c->prof.ns[p];
        out->kernel_ns += k->ns;
    }
}
