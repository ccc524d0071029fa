/*
 * engine.c - the shared runtime of programs (see engine.h): parses the device list, starts the backends with
 * the CPU last, and owns the constant store.
 */
#include "runtime/engine.h"

#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One entry of the device list, "NAME" or "NAME@N", in [s, end). */
static kiln_status start_device(kiln_engine *e, const char *s, const char *end) {
    const char *at = memchr(s, '@', (size_t)(end - s));
    size_t len = (size_t)((at ? at : end) - s);
    long min_batch = 0;
    kiln_status st;
    if (at) {
        char num[16] = {0};
        char *stop;
        if ((size_t)(end - at - 1) >= sizeof num || end == at + 1)
            return kiln__error(KILN_E_INVALID_ARG,
                               "device '%.*s': the batch threshold after '@' is not a number", (int)(end - s),
                               s);
        memcpy(num, at + 1, (size_t)(end - at - 1));
        min_batch = strtol(num, &stop, 10);
        if (*stop || min_batch < 0 || min_batch > 1 << 20)
            return kiln__error(KILN_E_INVALID_ARG, "device '%.*s': batch threshold '%s' is not in 0..%d",
                               (int)(end - s), s, num, 1 << 20);
    }
    if (len == 3 && !memcmp(s, "cpu", 3)) {
        if (e->cpu) return kiln__error(KILN_E_INVALID_ARG, "device 'cpu' is listed twice");
        if ((st = kiln__backend_cpu_create(e->n_threads, &e->cpu))) return st;
        e->backends[e->n_backends] = e->cpu;
        e->min_batch[e->n_backends++] = 0; /* the fallback takes everything */
        return KILN_OK;
    }
    if (e->cpu)
        return kiln__error(KILN_E_INVALID_ARG, "device '%.*s' after 'cpu': the CPU is the last, the fallback",
                           (int)len, s);
    if (e->n_backends >= KILN_MAX_BACKENDS - 1)
        return kiln__error(KILN_E_INVALID_ARG, "more than %d devices", KILN_MAX_BACKENDS - 1);
    kiln_backend *b = NULL;
    if ((st = kiln__backend_create_named(s, len, e->n_threads, &b))) {
        /* A Vulkan device that cannot start (built without Vulkan, no loader, no such device, no memory)
         * is dropped: the CPU runs its nodes, and the note says why. */
        if (!kiln__backend_name_is_vulkan(s, len) || st == KILN_E_INVALID_ARG) return st;
        size_t used = strlen(e->note);
        snprintf(e->note + used, sizeof e->note - used, "%s%.*s: %s; its nodes run on the CPU", used ? "; " : "",
                 (int)KILN__MIN(len, 32), s, kiln_last_error());
        kiln__error_clear();
        return KILN_OK;
    }
    e->backends[e->n_backends] = b;
    e->min_batch[e->n_backends++] = (int32_t)min_batch;
    return KILN_OK;
}

static kiln_status start_devices(kiln_engine *e, const char *list) {
    kiln_status st;
    if (list && *list) {
        for (const char *s = list; *s;) {
            const char *end = strchr(s, ',');
            if (!end) end = s + strlen(s);
            if (end == s) return kiln__error(KILN_E_INVALID_ARG, "device list '%s' has an empty entry", list);
            if ((st = start_device(e, s, end))) return st;
            s = *end ? end + 1 : end;
        }
    }
    static const char cpu[] = "cpu";
    if (!e->cpu) return start_device(e, cpu, cpu + 3);
    return KILN_OK;
}

/* The memory of the device behind backend b, in bytes (0: unknown): its largest device-local heap, as the
 * backend reports it. */
static uint64_t device_memory(const kiln_backend *b) {
    kiln_backend_memory m;
    kiln__backend_memory(b, &m);
    return m.capacity;
}

int32_t kiln__engine_fit_layers(uint64_t mem, const kiln_engine_layers *l) {
    uint64_t usable, all;
    if (!mem || !l->layer_bytes) return l->n_layer;
    usable = mem - mem / 10 > (256u << 20) ? mem - mem / 10 - (256u << 20) : 0;
    all = l->embd_bytes + l->head_bytes + l->layer_bytes * (uint64_t)l->n_layer;
    if (all <= usable) return l->n_layer;
    if (usable <= l->head_bytes) return 0;
    return (int32_t)KILN__MIN((usable - l->head_bytes) / l->layer_bytes, (uint64_t)l->n_layer);
}

/* The first layer the backends before the CPU take (engine.h), from params->gpu_layers: the default 0 is
 * everything; otherwise the last n layers (auto: as many as fit), none when n is 0. */
static kiln_status resolve_layers(kiln_engine *e, const kiln_model_params *p, const kiln_engine_layers *l) {
    int32_t n = p->gpu_layers;
    if (n < KILN_GPU_LAYERS_AUTO)
        return kiln__error(KILN_E_INVALID_ARG,
                           "gpu_layers %d is not a layer count, KILN_GPU_LAYERS_NONE or _AUTO", n);
    e->first_layer = 0;
    if (n == 0 || e->n_backends == 1) return KILN_OK;
    if (!l)
        return kiln__error(KILN_E_INVALID_ARG, "gpu_layers %d: partial offload needs a model's layers", n);
    if (n == KILN_GPU_LAYERS_AUTO) {
        n = kiln__engine_fit_layers(device_memory(e->backends[0]), l);
        size_t used = strlen(e->note);
        snprintf(e->note + used, sizeof e->note - used, "%sgpu layers auto: %d of %d on %s", used ? "; " : "",
                 n, l->n_layer, kiln__backend_name(e->backends[0]));
    }
    e->first_layer = n <= 0 ? INT32_MAX : n >= l->n_layer ? 0 : l->n_layer - n;
    return KILN_OK;
}

kiln_status kiln__engine_create(const kiln_model_params *p, const kiln_engine_layers *layers,
                                const void *mapping, size_t mapping_size, kiln_engine **out) {
    kiln_engine *e;
    kiln_status st;
    *out = NULL;
    if (p->n_threads < 0 || p->n_threads > 1024)
        return kiln__error(KILN_E_INVALID_ARG, "n_threads %d is not in 0..1024", p->n_threads);
    e = kiln__calloc(1, sizeof *e);
    if (!e) return kiln__nomem("the engine");
    pthread_mutex_init(&e->lock, NULL);
    e->n_threads = p->n_threads ? p->n_threads : kiln_default_threads();
    st = start_devices(e, p->devices);
    if (!st) st = resolve_layers(e, p, layers);
    if (!st) {
        kiln__backend_cpu_set_mapping(e->cpu, mapping, mapping_size);
        for (int32_t i = 0; i < e->n_backends; i++)
            kiln__backend_set_progress(e->backends[i], p->progress, p->progress_user);
        st = kiln__const_store_create(e->cpu, &e->consts);
    }
    if (!st) {
        kiln_sched_backend list[KILN_MAX_BACKENDS];
        for (int32_t i = 0; i < e->n_backends; i++)
            list[i] = (kiln_sched_backend){e->backends[i], e->min_batch[i]};
        st = kiln__sched_create(list, e->n_backends, &e->sched);
        if (!st) st = kiln__sched_set_first_layer(e->sched, e->first_layer);
    }
    if (st) {
        kiln__engine_destroy(e);
        return st;
    }
    for (int32_t i = 0, n = 0; i < e->n_backends && n >= 0 && (size_t)n < sizeof e->backends_text; i++)
        n += snprintf(e->backends_text + n, sizeof e->backends_text - (size_t)n, "%s%s", i ? "," : "",
                      kiln__backend_describe(e->backends[i]));
    *out = e;
    return KILN_OK;
}

void kiln__engine_destroy(kiln_engine *e) {
    if (!e) return;
    kiln__sched_destroy(e->sched);
    kiln__const_store_destroy(e->consts);
    for (int32_t i = 0; i < e->n_backends; i++)
        kiln__backend_destroy(e->backends[i]);
    pthread_mutex_destroy(&e->lock);
    kiln__dealloc(e);
}

void kiln__engine_memory(const kiln_engine *e, kiln_model_memory *out) {
    for (int32_t i = 0; i < e->n_backends; i++) {
        kiln_backend_memory m = {0};
        kiln__backend_memory(e->backends[i], &m);
        out->n_prepared += m.n_prepared;
        out->prepared_bytes += m.prepared_bytes;
        out->released_bytes += m.released_bytes;
        out->device.allocations += m.device.allocations;
        out->device.frees += m.device.frees;
        out->device.requests += m.device.requests;
        out->device.reuses += m.device.reuses;
        out->device.evictions += m.device.evictions;
        out->device.bytes += m.device.bytes;
        out->device.peak_bytes += m.device.peak_bytes;
        out->device.weight_bytes += m.device.weight_bytes;
    }
    out->const_bytes = kiln__const_store_bytes(e->consts);
}

kiln_status kiln__engine_profile(kiln_engine *e, bool on) {
    kiln_status first = KILN_OK, s;
    int32_t n = 0;
    for (int32_t i = 0; i < e->n_backends; i++) {
        const kiln_backend_iface *f = e->backends[i]->iface;
        if (!f->profile) continue;
        if ((s = f->profile(e->backends[i], on)) == KILN_OK) n++;
        else if (!first) first = s;
    }
    if (n > 0 || !on) return KILN_OK;
    return first ? first : kiln__error(KILN_E_UNSUPPORTED, "no backend of this model times its kernels (%s)",
                                       e->backends_text);
}

static int by_time(const void *a, const void *b) {
    uint64_t x = ((const kiln_kernel_time *)a)->ns, y = ((const kiln_kernel_time *)b)->ns;
    return x < y ? 1 : x > y ? -1 : strcmp(((const kiln_kernel_time *)a)->name, ((const kiln_kernel_time *)b)->name);
}

void kiln__engine_profile_read(const kiln_engine *e, kiln_device_profile *out) {
    memset(out, 0, sizeof *out);
    for (int32_t i = 0; i < e->n_backends; i++) {
        const kiln_backend_iface *f = e->backends[i]->iface;
        kiln_device_profile p;
        if (!f->profile_read) continue;
        memset(&p, 0, sizeof p);
        f->profile_read(e->backends[i], &p);
        out->computes += p.computes;
        out->recorded += p.recorded;
        out->record_ns += p.record_ns;
        out->submit_ns += p.submit_ns;
        out->unattributed += p.unattributed;
        for (int32_t k = 0; k < p.n_kernels && k < KILN_PROFILE_KERNELS; k++) {
            int32_t j = 0;
            while (j < out->n_kernels && strcmp(out->kernels[j].name, p.kernels[k].name))
                j++;
            if (j == out->n_kernels) {
                if (j == KILN_PROFILE_KERNELS) { /* more kernels than rows: counted as left out */
                    out->unattributed += p.kernels[k].calls;
                    continue;
                }
                out->kernels[out->n_kernels++] = (kiln_kernel_time){.calls = 0};
                memcpy(out->kernels[j].name, p.kernels[k].name, sizeof out->kernels[j].name);
            }
            out->kernels[j].calls += p.kernels[k].calls;
            out->kernels[j].ns += p.kernels[k].ns;
            out->kernel_ns += p.kernels[k].ns; /* the rows' sum, as kiln.h says */
        }
    }
    qsort(out->kernels, (size_t)out->n_kernels, sizeof out->kernels[0], by_time);
}
