/*
 * engine.h - what every program run on it shares (program.h): the backends in priority order (the CPU
 * last), the weights they prepared (each backend keeps its own, found by tensor identity), the store of
 * folded constants, and the lock that lets one program at a time use them.
 *
 * An engine belongs to no model: a loaded GGUF model gets one (runtime/model_load.c, from
 * kiln_model_params, destroyed with the model) that its contexts borrow, each holding only its KV cache and
 * its program; an imported graph can be given its own.
 */
#ifndef KILN_RUNTIME_ENGINE_H
#define KILN_RUNTIME_ENGINE_H

#include "backend/backend.h"
#include "plan/const_store.h"
#include "runtime/sched.h"

#include <pthread.h>

#define KILN_MAX_BACKENDS 4

typedef struct kiln_engine {
    kiln_backend *backends[KILN_MAX_BACKENDS]; /* priority order; the last is the CPU backend */
    int32_t min_batch[KILN_MAX_BACKENDS];      /* the cost rule: a backend takes nodes of batches >= this */
    int32_t first_layer; /* partial offload: the backends before the CPU take layers >= this (0: all, and
                          * the nodes of no layer; INT32_MAX: none) */
    int32_t n_backends;
    kiln_backend *cpu; /* == backends[n_backends - 1] */
    int32_t n_threads;
    kiln_sched *sched;        /* assigns each plan's nodes to the backends */
    kiln_const_store *consts; /* folded constants, shared by every plan of every context */
    pthread_mutex_t lock;     /* held while a context compiles or computes */
    char backends_text[512];  /* kiln_model_backends */
    char note[512];           /* kiln_model_device_note: why a listed device was dropped, or "" */
} kiln_engine;

/* What partial offload needs to know of the model: its layer count and, for gpu_layers = auto, the bytes
 * one layer puts on a device (its weights and its KV cache at the training context in F32, the largest
 * layer's), and those of the output head and of the embeddings. */
typedef struct kiln_engine_layers {
    int32_t n_layer;
    uint64_t layer_bytes, head_bytes, embd_bytes;
} kiln_engine_layers;

/* gpu_layers = auto: how many of the last layers fit in mem bytes of device memory (0: unknown, then all):
 * everything when it all fits in mem less a tenth (the driver, other programs) and 256 MiB (the
 * activation arena, staging); else the layers that fit beside the output head; 0 when not one does. */
int32_t kiln__engine_fit_layers(uint64_t mem, const kiln_engine_layers *l);

/* Start the backends named by params->devices (see kiln_model_params in kiln.h) and resolve
 * params->gpu_layers against layers (NULL for a client that is not a layered model: gpu_layers must then
 * be 0). mapping/mapping_size: the model file's read-only mapping (NULL when
 * the model is not file-backed): the CPU backend hands those pages back once it has prepared a weight
 * from them. */
kiln_status kiln__engine_create(const kiln_model_params *params, const kiln_engine_layers *layers,
                                const void *mapping, size_t mapping_size, kiln_engine **out);
void kiln__engine_destroy(kiln_engine *e);
void kiln__engine_memory(const kiln_engine *e, kiln_model_memory *out);
/* Start (counters cleared) or stop timing the kernels of every backend that can (kiln_model_profile);
 * KILN_E_UNSUPPORTED when none can. Caller holds e->lock. */
kiln_status kiln__engine_profile(kiln_engine *e, bool on);
/* The backends' counters summed, kernels of the same name merged, the most time first. */
void kiln__engine_profile_read(const kiln_engine *e, kiln_device_profile *out);

#endif
