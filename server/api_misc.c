/*
 * api_misc.c - the small JSON endpoints: GET /v1/models (the one loaded model, with its context length as
 * "context_length" and vLLM's "max_model_len"), POST /tokenize ({"content", "add_special"?} ->
 * {"tokens"}) and POST /detokenize ({"tokens"} -> {"content"}), as llama-server names them. Special
 * tokens' texts in /tokenize content become those tokens, as they do in prompts.
 */
#include "api.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static char *dump(json_t *j, ks_api_error *err) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s && err) ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    return s;
}

char *ks_api_models_json(const ks_api_model *m) {
    json_t *j =
        json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:i, s:i, s:i}]}", "object", "list", "data", "id", m->id,
                  "object", "model", "created", (json_int_t)m->created, "owned_by", "kiln", "context_length",
                  m->n_ctx, "max_model_len", m->n_ctx, "n_ctx_train", m->n_ctx_train);
    return dump(j, NULL);
}

char *ks_api_tokenize_json(const char *body, size_t len, const ks_api_model *model, ks_api_error *err) {
    json_t *root;
    if (!ks_api_parse_json(body, len, &root, err)) return NULL;
    json_t *content = json_object_get(root, "content"), *add = json_object_get(root, "add_special");
    char *out = NULL;
    if (!json_is_string(content)) {
        ks_api_bad(err, "content", "'content' is required and must be a string");
    } else if (add && !json_is_null(add) && !json_is_boolean(add)) {
        ks_api_bad(err, "add_special", "'add_special' must be a boolean");
    } else {
        int32_t *ids, n;
        if (ks_api_tokenize_text(model, json_string_value(content), json_string_length(content),
                                 json_is_true(add), true, &ids, &n, err)) {
            json_t *a = json_array();
            for (int32_t i = 0; a && i < n; i++)
                if (json_array_append_new(a, json_integer(ids[i]))) a = (json_decref(a), NULL);
            free(ids);
            out = dump(a ? json_pack("{s:o}", "tokens", a) : NULL, err);
        }
    }
    json_decref(root);
    return out;
}

static char *detokenize(const json_t *tokens, const ks_api_model *model, ks_api_error *err) {
    size_t n = json_array_size(tokens);
    int32_t n_vocab = kiln_vocab_n_tokens(model->vocab);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tokens, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab) {
            free(ids);
            ks_api_bad(err, "tokens", "tokens[%zu] is not a token id (an integer 0 .. %d)", i, n_vocab - 1);
            return NULL;
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    size_t need = 0;
    kiln_detokenize(model->vocab, ids, n, true, NULL, 0, &need);
    char *text = malloc(need + 1);
    kiln_status st = text ? kiln_detokenize(model->vocab, ids, n, true, text, need + 1, &need) : KILN_E_NOMEM;
    free(ids);
    char *out = NULL;
    if (st == KILN_OK)
        out = dump(json_pack("{s:o}", "content", ks_api_json_lossy(text, need)), err);
    else
        ks_api_fail(err, 500, "server_error", NULL, NULL, "detokenizing failed: %s", kiln_last_error());
    free(text);
    return out;
}

char *ks_api_detokenize_json(const char *body, size_t len, const ks_api_model *model, ks_api_error *err) {
    json_t *root;
    if (!ks_api_parse_json(body, len, &root, err)) return NULL;
    json_t *tokens = json_object_get(root, "tokens");
    char *out = NULL;
    if (!json_is_array(tokens))
        ks_api_bad(err, "tokens", "'tokens' is required and must be an array of token ids");
    else
        out = detokenize(tokens, model, err);
    json_decref(root);
    return out;
}
