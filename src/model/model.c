/*
 * model.c - kiln_model_load: map a GGUF file, pick the architecture builder from general.architecture,
 * read the hyperparameters, find and check every weight, and build the vocabulary.
 */
#include "model/model.h"

#include "core/core.h"
#include "tensor/types.h"

#include <stdio.h>
#include <string.h>

typedef struct arch_entry {
    const char *name;
    kiln_status (*load_weights)(kiln_model *m);
} arch_entry;

static const arch_entry architectures[] = {
    {"llama", kiln__llama_load_weights},
};

kiln_status kiln__model_weight(kiln_model *m, const char *name, int32_t n_dims, const int64_t *ne, bool need_f32,
                               kiln_tensor_info *out) {
    int64_t i = kiln_gguf_find_tensor(m->gguf, name);
    kiln_status s;
    if (i < 0) return kiln__error(KILN_E_FORMAT, "tensor '%s' is missing", name);
    if ((s = kiln_gguf_tensor_info(m->gguf, i, out))) return s;
    for (int d = 0; d < 4; d++) {
        int64_t want = d < n_dims ? ne[d] : 1;
        if (out->ne[d] != want)
            return kiln__error(KILN_E_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected dim %d = %lld",
                               name, (long long)out->ne[0], (long long)out->ne[1], (long long)out->ne[2],
                               (long long)out->ne[3], d, (long long)want);
    }
    if (need_f32 && out->type != KILN_TYPE_F32)
        return kiln__error(KILN_E_UNSUPPORTED, "tensor '%s' has type %s; Kiln needs f32 here", name,
                           kiln__type_name(out->type));
    if (!kiln__type_traits(out->type)->supported)
        return kiln__error(KILN_E_UNSUPPORTED, "tensor '%s' has type %s, which Kiln cannot compute with yet", name,
                           kiln__type_name(out->type));
    m->weight_bytes += out->size;
    return KILN_OK;
}

kiln_tensor *kiln__weight_leaf(kiln_graph *g, const kiln_tensor_info *w) {
    return kiln__graph_leaf(g, w->name, w->type, w->n_dims, w->ne, (void *)w->data, KILN_TENSOR_WEIGHT);
}

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
        return kiln__error(KILN_E_UNSUPPORTED, "architecture '%.*s' is not supported (supported: llama)",
                           (int)KILN__MIN(arch.len, 64), arch.data);
    snprintf(m->arch, sizeof m->arch, "%s", entry->name);
    if ((s = kiln__hparams_read(m->gguf, m->arch, &m->hp))) return s;
    if ((s = kiln_vocab_create(m->gguf, &m->vocab))) return s;
    m->hp.n_vocab = kiln_vocab_n_tokens(m->vocab);
    return entry->load_weights(m);
}

kiln_status kiln_model_load(const char *path, kiln_model **out) {
    kiln_model *m;
    kiln_status s;
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_model_load: out is NULL");
    *out = NULL;
    if (!path) return kiln__error(KILN_E_INVALID_ARG, "kiln_model_load: path is NULL");
    m = kiln__calloc(1, sizeof *m);
    if (!m) return kiln__nomem("a model");
    s = load(m, path);
    if (s) {
        kiln__error_prefix(s, "loading model '%s': ", path);
        kiln_model_destroy(m);
        return s;
    }
    *out = m;
    return KILN_OK;
}

void kiln_model_destroy(kiln_model *m) {
    if (!m) return;
    kiln_vocab_destroy(m->vocab);
    kiln_gguf_close(m->gguf);
    kiln__dealloc(m->layers);
    kiln__dealloc(m);
}

const kiln_gguf *kiln_model_gguf(const kiln_model *m) { return m->gguf; }
const kiln_vocab *kiln_model_vocab(const kiln_model *m) { return m->vocab; }
int32_t kiln_model_n_ctx_train(const kiln_model *m) { return m->hp.n_ctx_train; }
int32_t kiln_model_n_vocab(const kiln_model *m) { return m->hp.n_vocab; }
const char *kiln_model_arch(const kiln_model *m) { return m->arch; }
uint64_t kiln_model_weight_bytes(const kiln_model *m) { return m->weight_bytes; }
