/*
 * model_load.c - a loaded model as the public API knows it: the model's data (model/, read from its GGUF
 * file) and the engine that runs it (engine.h: the backends named by kiln_model_params, its prepared
 * weights, its constants), created together by kiln_model_load_ex and destroyed together. The model layer
 * below knows nothing of engines; this file is where the two meet.
 */
#include "model/model.h"

#include "core/core.h"
#include "gguf/gguf_internal.h"
#include "runtime/engine.h"

#include <stdio.h>
#include <string.h>

/* The sizes partial offload's auto estimate needs (engine.h): the largest layer's tensors ("blk.N.*") plus
 * its KV cache at the training context in F32, the output head (output.*, or the tied token_embd) and the
 * embeddings. */
static kiln_engine_layers layer_sizes(const kiln_model *m) {
    kiln_engine_layers l = {m->hp.n_layer, 0, 0, 0};
    uint64_t kv =
        (uint64_t)m->hp.n_ctx_train * 2u * (uint64_t)m->hp.n_head_kv * (uint64_t)m->hp.head_dim * 4u;
    bool tied = kiln_gguf_find_tensor(m->gguf, "output.weight") < 0;
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        char prefix[32];
        uint64_t bytes = kv;
        int n = snprintf(prefix, sizeof prefix, "blk.%d.", il);
        for (int64_t i = 0; i < kiln_gguf_tensor_count(m->gguf); i++) {
            kiln_tensor_info t;
            if (!kiln_gguf_tensor_info(m->gguf, i, &t) && !strncmp(t.name, prefix, (size_t)n))
                bytes += t.size;
        }
        l.layer_bytes = KILN__MAX(l.layer_bytes, bytes);
    }
    for (int64_t i = 0; i < kiln_gguf_tensor_count(m->gguf); i++) {
        kiln_tensor_info t;
        if (kiln_gguf_tensor_info(m->gguf, i, &t)) continue;
        if (!strncmp(t.name, "output", 6) || (tied && !strcmp(t.name, "token_embd.weight")))
            l.head_bytes += t.size;
        if (!strncmp(t.name, "token_embd", 10) || !strncmp(t.name, "position_embd", 13))
            l.embd_bytes += t.size;
    }
    kiln__error_clear();
    return l;
}

kiln_model_params kiln_model_params_default(void) {
    kiln_model_params p;
    memset(&p, 0, sizeof p);
    return p;
}

kiln_status kiln_model_load_ex(const char *path, const kiln_model_params *params, kiln_model **out) {
    kiln_model_params p = params ? *params : kiln_model_params_default();
    const void *map;
    size_t map_size;
    kiln_model *m = NULL;
    kiln_status s;
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_model_load: out is NULL");
    *out = NULL;
    if (!path) return kiln__error(KILN_E_INVALID_ARG, "kiln_model_load: path is NULL");
    s = kiln__model_open(path, &m);
    if (!s) {
        map = kiln__gguf_mapping(m->gguf, &map_size);
        kiln_engine_layers layers = layer_sizes(m);
        s = kiln__engine_create(&p, &layers, map, map_size, &m->engine);
    }
    if (s) {
        kiln__error_prefix(s, "loading model '%s': ", path);
        kiln_model_destroy(m);
        return s;
    }
    *out = m;
    return KILN_OK;
}

kiln_status kiln_model_load(const char *path, kiln_model **out) {
    return kiln_model_load_ex(path, NULL, out);
}

void kiln_model_destroy(kiln_model *m) {
    if (!m) return;
    kiln__engine_destroy(m->engine);
    kiln__model_close(m);
}

kiln_status kiln_model_memory_info(const kiln_model *m, kiln_model_memory *out) {
    size_t map_size = 0;
    if (!m || !out) return kiln__error(KILN_E_INVALID_ARG, "kiln_model_memory_info: NULL argument");
    memset(out, 0, sizeof *out);
    kiln__gguf_mapping(m->gguf, &map_size);
    out->file_bytes = map_size;
    pthread_mutex_lock(&m->engine->lock);
    kiln__engine_memory(m->engine, out);
    pthread_mutex_unlock(&m->engine->lock);
    return KILN_OK;
}

kiln_status kiln_model_profile(kiln_model *m, bool on) {
    kiln_status s;
    if (!m) return kiln__error(KILN_E_INVALID_ARG, "kiln_model_profile: NULL model");
    pthread_mutex_lock(&m->engine->lock);
    s = kiln__engine_profile(m->engine, on);
    pthread_mutex_unlock(&m->engine->lock);
    return s;
}

kiln_status kiln_model_profile_read(const kiln_model *m, kiln_device_profile *out) {
    if (!m || !out) return kiln__error(KILN_E_INVALID_ARG, "kiln_model_profile_read: NULL argument");
    pthread_mutex_lock(&m->engine->lock);
    kiln__engine_profile_read(m->engine, out);
    pthread_mutex_unlock(&m->engine->lock);
    return KILN_OK;
}

const char *kiln_model_backends(const kiln_model *m) {
    return m ? m->engine->backends_text : "";
}

const char *kiln_model_device_note(const kiln_model *m) {
    return m && m->engine->note[0] ? m->engine->note : NULL;
}

int32_t kiln_model_n_threads(const kiln_model *m) {
    return m ? m->engine->n_threads : 0;
}
