/*
 * model.c - a model's data: map a GGUF file, pick the architecture's loader from general.architecture,
 * read the hyperparameters, build the vocabulary, and find and check every weight. The runtime gives it
 * an engine (runtime/model_load.c); nothing here runs anything.
 */
#include "model/model.h"

#include "core/core.h"
#include "gguf/gguf_internal.h"

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

kiln_status kiln__model_open(const char *path, kiln_model **out) {
    kiln_model *m;
    kiln_status s;
    *out = NULL;
    m = kiln__calloc(1, sizeof *m);
    if (!m) return kiln__nomem("a model");
    if ((s = load(m, path))) {
        kiln__model_close(m);
        return s;
    }
    *out = m;
    return KILN_OK;
}

void kiln__model_close(kiln_model *m) {
    if (!m) return;
    kiln_vocab_destroy(m->vocab);
    kiln_gguf_close(m->gguf);
    kiln__dealloc(m->layers);
    kiln__dealloc(m->rope_buf);
    kiln__dealloc(m);
}

const kiln_gguf *kiln_model_gguf(const kiln_model *m) { return m->gguf; }
const kiln_vocab *kiln_model_vocab(const kiln_model *m) { return m->vocab; }
int32_t kiln_model_n_ctx_train(const kiln_model *m) { return m->hp.n_ctx_train; }
int32_t kiln_model_n_vocab(const kiln_model *m) { return m->hp.n_vocab; }
const char *kiln_model_arch(const kiln_model *m) { return m->arch; }
uint64_t kiln_model_weight_bytes(const kiln_model *m) { return m->weight_bytes; }
int32_t kiln_model_n_embd(const kiln_model *m) { return m ? m->hp.n_embd : 0; }
kiln_pooling kiln_model_pooling(const kiln_model *m) { return m ? (kiln_pooling)m->hp.pooling : KILN_POOLING_NONE; }
bool kiln_model_is_causal(const kiln_model *m) { return m ? m->hp.causal : true; }
