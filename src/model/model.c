/*
 * model.c - kiln_model_load: map a GGUF file, pick the architecture's loader from general.architecture,
 * read the hyperparameters, build the vocabulary, and find and check every weight.
 */
#include "model/model.h"

#include "core/core.h"
#include "gguf/gguf_internal.h"
#include "runtime/engine.h"
#include "backend/cpu/cpu_features.h"

#include <stdio.h>
#include <string.h>

typedef struct arch_entry {
    const char *name;
    kiln_status (*load_weights)(kiln_model *m);
} arch_entry;

static const arch_entry architectures[] = {
    {"llama", kiln__llama_load_weights}, {"qwen2", kiln__qwen_load_weights}, {"qwen3", kiln__qwen_load_weights},
    {"phi3", kiln__phi3_load_weights},   {"gpt2", kiln__gpt2_load_weights},   {"bert", kiln__bert_load_weights},
};

static kiln_status load(kiln_model *m, const char *path) {
    kiln_str arch;
    const arch_entry *entry = NULL;
    kiln_status s;
    if ((s = kiln_gguf_open(path, &m->gguf))) return s;
    s = kiln_gguf_get_str(m->gguf, "general.architecture", &arch);
    if (s == KILN_E_NOT_FOUND) return kiln__error(KILN_E_FORMAT, "required key 'general.architecture' is missing");
    if (s) return s;
    for (size_t i = 0; i < KILN__ARRAY_LEN(architectures); i++)
        if (strlen(architectures[i].name) == arch.len && memcmp(architectures[i].name, arch.data, arch.len) == 0)
            entry = &architectures[i];
    if (!entry)
        return kiln__error(KILN_E_UNSUPPORTED, "architecture '%.*s' is not supported (supported: llama, qwen2, qwen3, phi3, gpt2, bert)",
                           (int)KILN__MIN(arch.len, 64), arch.data);
    snprintf(m->arch, sizeof m->arch, "%s", entry->name);
    if ((s = kiln__hparams_read(m->gguf, m->arch, &m->hp))) return s;
    if ((s = kiln_vocab_create(m->gguf, &m->vocab))) return s;
    m->hp.n_vocab = kiln_vocab_n_tokens(m->vocab);
    return entry->load_weights(m);
}

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
    kiln_model *m;
    kiln_status s;
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_model_load: out is NULL");
    *out = NULL;
    if (!path) return kiln__error(KILN_E_INVALID_ARG, "kiln_model_load: path is NULL");
    m = kiln__calloc(1, sizeof *m);
    if (!m) return kiln__nomem("a model");
    s = load(m, path);
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

kiln_status kiln_model_load(const char *path, kiln_model **out) { return kiln_model_load_ex(path, NULL, out); }

void kiln_model_destroy(kiln_model *m) {
    if (!m) return;
    kiln__engine_destroy(m->engine);
    kiln_vocab_destroy(m->vocab);
    kiln_gguf_close(m->gguf);
    kiln__dealloc(m->layers);
    kiln__dealloc(m->rope_buf);
    kiln__dealloc(m);
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

const char *kiln_model_backends(const kiln_model *m) { return m ? m->engine->backends_text : ""; }

const char *kiln_model_device_note(const kiln_model *m) { return m && m->engine->note[0] ? m->engine->note : NULL; }

int32_t kiln_model_n_threads(const kiln_model *m) { return m ? m->engine->n_threads : 0; }

kiln_status kiln_set_cpu_level(const char *name) {
    kiln_cpu_level level = kiln__cpu_max_level();
    if (name && *name && strcmp(name, "auto") != 0 && !kiln__cpu_level_parse(name, &level))
        return kiln__error(KILN_E_INVALID_ARG, "CPU level '%s' is not one of auto, ref, avx2, avx512, amx, neon", name);
    kiln__cpu_force_level(level);
    return KILN_OK;
}

const char *kiln_get_cpu_level(void) { return kiln__cpu_level_name(kiln__cpu_level()); }

const kiln_gguf *kiln_model_gguf(const kiln_model *m) { return m->gguf; }
const kiln_vocab *kiln_model_vocab(const kiln_model *m) { return m->vocab; }
int32_t kiln_model_n_ctx_train(const kiln_model *m) { return m->hp.n_ctx_train; }
int32_t kiln_model_n_vocab(const kiln_model *m) { return m->hp.n_vocab; }
const char *kiln_model_arch(const kiln_model *m) { return m->arch; }
uint64_t kiln_model_weight_bytes(const kiln_model *m) { return m->weight_bytes; }
int32_t kiln_model_n_embd(const kiln_model *m) { return m ? m->hp.n_embd : 0; }
kiln_pooling kiln_model_pooling(const kiln_model *m) { return m ? (kiln_pooling)m->hp.pooling : KILN_POOLING_NONE; }
bool kiln_model_is_causal(const kiln_model *m) { return m ? m->hp.causal : true; }
