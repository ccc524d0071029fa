/*
 * api_embed.c - /v1/embeddings for encoder models: the request's fields into an embedding ks_request, and
 * OpenAI's response from the vectors.
 *
 * "input" is a string, an array of strings, an array of token ids, or an array of arrays of token ids
 * (1 .. KS_API_MAX_INPUTS inputs). A text becomes [CLS] text [SEP] (the vocabulary's BOS and EOS, as
 * `kiln embed` and sentence-transformers feed it), with special-token texts left as text; token arrays
 * are taken exactly as given. An input longer than the context (the model's positions) is refused with
 * context_length_exceeded, as OpenAI refuses it, never cut silently. "encoding_format" is "float" (the
 * default) or "base64" (the float32 values' little-endian bytes, as OpenAI sends them); "dimensions" must
 * equal the model's width, since Kiln does not shorten embeddings. "model" and "user" are not checked.
 */
#include "api.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static bool oom(ks_api_error *err) {
    return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
}

/* The inputs' tokens one after another, growing as inputs are added. */
typedef struct token_list {
    int32_t *ids;
    size_t n, cap;
} token_list;

static bool reserve(token_list *t, size_t more, ks_api_error *err) {
    if (more > SIZE_MAX / sizeof *t->ids - t->n) return oom(err);
    if (t->n + more <= t->cap) return true;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->n + more)
        cap = cap > SIZE_MAX / (2 * sizeof *t->ids) ? t->n + more : cap * 2;
    int32_t *ids = realloc(t->ids, cap * sizeof *ids);
    if (!ids) return oom(err);
    t->ids = ids;
    t->cap = cap;
    return true;
}

static bool add_text(const ks_api_model *m, const json_t *s, token_list *t, ks_api_error *err) {
    int32_t *ids = NULL, n = 0;
    if (!ks_api_tokenize_text(m, json_string_value(s), json_string_length(s), true, false, &ids, &n, err))
        return false;
    int32_t eos = kiln_vocab_eos(m->vocab);
    bool add_eos = kiln_vocab_add_eos(m->vocab) && eos >= 0;
    bool ok = reserve(t, (size_t)n + 1, err);
    if (ok) {
        memcpy(t->ids + t->n, ids, (size_t)n * sizeof *ids);
        t->n += (size_t)n;
        if (add_eos) t->ids[t->n++] = eos;
    }
    free(ids);
    return ok;
}

static bool add_ids(const ks_api_model *m, const json_t *a, size_t index, token_list *t, ks_api_error *err) {
    size_t n = json_array_size(a);
    int32_t n_vocab = kiln_vocab_n_tokens(m->vocab);
    if (!reserve(t, n, err)) return false;
    for (size_t k = 0; k < n; k++) {
        json_t *v = json_array_get(a, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab)
            return ks_api_bad(err, "input", "input[%zu][%zu] is not a token id (an integer 0 .. %d)", index,
                              k, n_vocab - 1);
        t->ids[t->n++] = (int32_t)json_integer_value(v);
    }
    return true;
}

static bool too_long(const ks_api_model *m, size_t index, size_t n, ks_api_error *err) {
    return ks_api_fail(err, 400, "invalid_request_error", "context_length_exceeded", "input",
                       "This model's maximum context length is %d tokens, however input[%zu] has %zu "
                       "tokens. Please reduce the length of the input.",
                       m->n_ctx, index, n);
}

/* One input (a string or an array of token ids) appended to t; its length into *len. */
static bool parse_input(const ks_api_model *m, const json_t *v, size_t index, token_list *t, int32_t *len,
                        ks_api_error *err) {
    size_t before = t->n;
    if (json_is_string(v)) {
        if (!add_text(m, v, t, err)) return false;
    } else if (json_is_array(v)) {
        if (json_array_size(v) > (size_t)m->n_ctx) return too_long(m, index, json_array_size(v), err);
        if (!add_ids(m, v, index, t, err)) return false;
    } else {
        return ks_api_bad(err, "input",
                          "input[%zu] must be a string or an array of token ids (every input of one kind)",
                          index);
    }
    size_t n = t->n - before;
    if (n == 0) return ks_api_bad(err, "input", "input[%zu] has no tokens", index);
    if (n > (size_t)m->n_ctx) return too_long(m, index, n, err);
    *len = (int32_t)n;
    return true;
}

/* "input": the list of inputs it holds (a lone string or token array is one input). */
static bool parse_inputs(const json_t *root, const ks_api_model *m, ks_api_request *r, ks_api_error *err) {
    json_t *in = json_object_get(root, "input");
    if (!in || json_is_null(in)) return ks_api_bad(err, "input", "'input' is required");
    if (!json_is_string(in) && !json_is_array(in))
        return ks_api_bad(err, "input",
                          "'input' must be a string, an array of strings, an array of token ids, or an "
                          "array of arrays of token ids");
    bool single = json_is_string(in) || (json_array_size(in) > 0 && json_is_integer(json_array_get(in, 0)));
    size_t n = single ? 1 : json_array_size(in);
    if (n == 0) return ks_api_bad(err, "input", "'input' is an empty array");
    if (n > KS_API_MAX_INPUTS)
        return ks_api_bad(err, "input", "'input' has %zu inputs; at most %d are allowed", n,
                          KS_API_MAX_INPUTS);
    bool texts = json_is_string(in) || json_is_string(json_array_get(in, 0));
    token_list t = {0};
    r->input_lens = malloc(n * sizeof *r->input_lens);
    bool ok = r->input_lens != NULL || oom(err);
    for (size_t i = 0; ok && i < n; i++) {
        const json_t *v = single ? in : json_array_get(in, i);
        if (!single && json_is_string(v) != texts)
            ok = ks_api_bad(err, "input", "input[%zu] is not of the same kind as input[0]", i);
        else
            ok = parse_input(m, v, i, &t, &r->input_lens[i], err);
    }
    if (ok && t.n > INT32_MAX) ok = ks_api_bad(err, "input", "'input' has too many tokens (%zu)", t.n);
    r->prompt = t.ids;
    r->req.n_prompt = (int32_t)t.n;
    r->req.n_inputs = (int32_t)n;
    return ok;
}

bool ks_api_embedding_parse(const json_t *root, const ks_api_model *m, ks_api_request *r, ks_api_error *err) {
    if (!parse_inputs(root, m, r, err)) return false;
    json_t *fmt = json_object_get(root, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";
        if (strcmp(f, "float") != 0 && strcmp(f, "base64") != 0)
            return ks_api_bad(err, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        r->base64 = !strcmp(f, "base64");
    }
    json_t *dim = json_object_get(root, "dimensions");
    if (dim && !json_is_null(dim) && (!json_is_integer(dim) || json_integer_value(dim) != m->n_embd))
        return ks_api_bad(err, "dimensions",
                          "'dimensions' must be %d, the width of this model's embeddings: Kiln does not "
                          "shorten embeddings",
                          m->n_embd);
    return true;
}

/* The n float32 values' little-endian bytes in base64. */
static json_t *base64_floats(const float *v, int32_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t bytes = (size_t)n * 4, len = (bytes + 2) / 3 * 4;
    unsigned char *raw = malloc(bytes ? bytes : 1);
    char *s = malloc(len + 1);
    json_t *j = NULL;
    if (raw && s) {
        for (int32_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++)
                raw[4 * (size_t)i + (size_t)k] = (unsigned char)(u >> (8 * k));
        }
        size_t o = 0;
        for (size_t i = 0; i < bytes; i += 3) {
            uint32_t w = (uint32_t)raw[i] << 16;
            if (i + 1 < bytes) w |= (uint32_t)raw[i + 1] << 8;
            if (i + 2 < bytes) w |= raw[i + 2];
            s[o++] = digits[(w >> 18) & 63];
            s[o++] = digits[(w >> 12) & 63];
            s[o++] = i + 1 < bytes ? digits[(w >> 6) & 63] : '=';
            s[o++] = i + 2 < bytes ? digits[w & 63] : '=';
        }
        s[o] = '\0';
        j = json_stringn(s, o);
    }
    free(raw);
    free(s);
    return j;
}

static json_t *float_array(const float *v, int32_t n) {
    json_t *a = json_array();
    for (int32_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_real((double)v[i]))) a = (json_decref(a), NULL);
    return a;
}

char *ks_api_embedding_json(const float *vectors, int32_t n, int32_t n_embd, bool base64,
                            const char *model_id, int32_t prompt_tokens) {
    json_t *data = json_array();
    for (int32_t i = 0; data && i < n; i++) {
        const float *v = vectors + (size_t)i * (size_t)n_embd;
        json_t *e = base64 ? base64_floats(v, n_embd) : float_array(v, n_embd);
        json_t *item =
            e ? json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", i, "embedding", e) : NULL;
        if (!item || json_array_append_new(data, item)) data = (json_decref(data), NULL);
    }
    json_t *j =
        data ? json_pack("{s:s, s:o, s:s, s:{s:i, s:i}}", "object", "list", "data", data, "model", model_id,
                         "usage", "prompt_tokens", prompt_tokens, "total_tokens", prompt_tokens)
             : NULL;
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    return s;
}
