/*
 * api_request.c - a /v1/chat/completions or /v1/completions body -> ks_api_request (an /v1/embeddings
 * body continues in api_embed.c), with every field checked as OpenAI checks it: its JSON type, its
 * range, and the combinations OpenAI refuses. A field
 * that is absent or null takes OpenAI's default; fields Kiln does not know are ignored; fields whose
 * meaning Kiln cannot honour (echo, suffix, logit_bias, the legacy functions, best_of > n) are refused
 * with a 400 that names them rather than silently dropped. response_format, grammar and json_schema
 * constrain the output (api_grammar.c); tools and tool_choice are read by api_tools.c.
 *
 * The prompt is tokenized here (chat messages through api_chat.c), so the engine receives token ids and
 * the request's length is checked against the context (by the engine's rule) before it is queued. Every
 * request also stops at the chat template's end-of-turn token (ks_api_model.eot_token), as llama-server
 * stops at every end-of-generation token, unless it sets ignore_eos.
 */
#include "api.h"

#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool ks_api_parse_json(const char *body, size_t len, json_t **out, ks_api_error *err) {
    json_error_t jerr;
    *out = NULL;
    if (len == 0) return ks_api_bad(err, NULL, "the request body is empty; expected a JSON object");
    /* jansson rejects invalid UTF-8, "\u0000" in strings, integers beyond 64 bits, reals that overflow,
     * and nesting deeper than JSON_PARSER_MAX_DEPTH. */
    json_t *root = json_loadb(body, len, 0, &jerr);
    /* Out of memory: jansson says so, or (when its lexer's first buffer fails) leaves the error empty. */
    if (!root && (json_error_code(&jerr) == json_error_out_of_memory || !jerr.text[0]))
        return ks_api_fail(err, 500, "server_error", NULL, NULL,
                           "out of memory while parsing the request body");
    if (!root)
        return ks_api_bad(err, NULL, "the request body is not valid JSON: %s (line %d, column %d)", jerr.text,
                          jerr.line, jerr.column);
    if (!json_is_object(root)) {
        json_decref(root);
        return ks_api_bad(err, NULL, "the request body must be a JSON object");
    }
    *out = root;
    return true;
}

/* A field that is absent or JSON null is "not given". */
static json_t *field(const json_t *root, const char *name) {
    json_t *v = json_object_get(root, name);
    return json_is_null(v) ? NULL : v;
}

static bool get_int(const json_t *root, const char *name, long long lo, long long hi, long long *out,
                    bool *given, ks_api_error *err) {
    json_t *v = field(root, name);
    if (given) *given = v != NULL;
    if (!v) return true;
    long long x;
    if (json_is_integer(v))
        x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v);
    else
        return ks_api_bad(err, name, "'%s' must be an integer", name);
    if (x < lo || x > hi)
        return ks_api_bad(err, name, "'%s' is %lld; it must be between %lld and %lld", name, x, lo, hi);
    *out = x;
    return true;
}

static bool get_float(const json_t *root, const char *name, double lo, double hi, float *out,
                      ks_api_error *err) {
    json_t *v = field(root, name);
    if (!v) return true;
    if (!json_is_number(v)) return ks_api_bad(err, name, "'%s' must be a number", name);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return ks_api_bad(err, name, "'%s' is %g; it must be between %g and %g", name, x, lo, hi);
    *out = (float)x;
    return true;
}

static bool get_bool(const json_t *root, const char *name, bool *out, ks_api_error *err) {
    json_t *v = field(root, name);
    if (!v) return true;
    if (!json_is_boolean(v)) return ks_api_bad(err, name, "'%s' must be a boolean", name);
    *out = json_is_true(v);
    return true;
}

static bool add_stop(ks_api_request *r, const json_t *v, ks_api_error *err) {
    if (!json_is_string(v)) return ks_api_bad(err, "stop", "'stop' must be a string or an array of strings");
    size_t len = json_string_length(v);
    if (len == 0 || len > KS_API_MAX_STOP_LEN)
        return ks_api_bad(err, "stop", "each stop string must be 1 to %d bytes long; one is %zu",
                          KS_API_MAX_STOP_LEN, len);
    if (!ks_api_utf8_valid(json_string_value(v), len))
        return ks_api_bad(err, "stop", "a stop string is not valid UTF-8");
    char *s = strdup(json_string_value(v));
    if (!s) return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    r->stop[r->req.n_stop] = s;
    r->stop_ptrs[r->req.n_stop] = s;
    r->req.n_stop++;
    return true;
}

static bool parse_stop(const json_t *root, ks_api_request *r, ks_api_error *err) {
    json_t *v = field(root, "stop");
    if (!v) return true;
    if (!json_is_array(v)) return add_stop(r, v, err);
    if (json_array_size(v) > KS_API_MAX_STOP)
        return ks_api_bad(err, "stop", "'stop' has %zu strings; at most %d are allowed", json_array_size(v),
                          KS_API_MAX_STOP);
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!add_stop(r, json_array_get(v, i), err)) return false;
    return true;
}

/* Fields Kiln refuses rather than ignores, because ignoring them would change the answer. */
static bool refuse_unsupported(const json_t *root, ks_api_kind kind, ks_api_error *err) {
    json_t *v;
    if (kind == KS_API_COMPLETION) {
        if ((v = field(root, "echo")) && !json_is_false(v))
            return ks_api_bad(err, "echo", "'echo' is not supported by this server");
        if ((v = field(root, "suffix")) && !(json_is_string(v) && json_string_length(v) == 0))
            return ks_api_bad(err, "suffix", "'suffix' (insertion) is not supported by this server");
    }
    if ((v = field(root, "logit_bias")) && !(json_is_object(v) && json_object_size(v) == 0))
        return ks_api_bad(err, "logit_bias", "'logit_bias' is not supported by this server");
    if (kind == KS_API_COMPLETION && (v = field(root, "tools")) &&
        !(json_is_array(v) && json_array_size(v) == 0))
        return ks_api_bad(err, "tools", "'tools' belongs to /v1/chat/completions");
    if ((v = field(root, "functions")) && !(json_is_array(v) && json_array_size(v) == 0))
        return ks_api_bad(err, "functions",
                          "the legacy 'functions' field is not supported by this server; use 'tools'");
    if ((v = field(root, "function_call")))
        return ks_api_bad(err, "function_call",
                          "the legacy 'function_call' field is not supported by this server; use "
                          "'tool_choice'");
    if ((v = field(root, "model")) && !json_is_string(v))
        return ks_api_bad(err, "model", "'model' must be a string");
    return true;
}

static bool parse_stream(const json_t *root, ks_api_request *r, ks_api_error *err) {
    if (!get_bool(root, "stream", &r->stream, err)) return false;
    json_t *so = field(root, "stream_options");
    if (!so) return true;
    if (!json_is_object(so)) return ks_api_bad(err, "stream_options", "'stream_options' must be an object");
    if (!r->stream)
        return ks_api_bad(err, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    return get_bool(so, "include_usage", &r->include_usage, err);
}

/* logprobs: completions take an integer 0..5; chat takes a boolean plus top_logprobs 0..20. */
static bool parse_logprobs(const json_t *root, ks_api_request *r, ks_api_error *err) {
    long long n = 0;
    bool given = false;
    if (r->kind == KS_API_COMPLETION) {
        if (!get_int(root, "logprobs", 0, KS_API_MAX_LOGPROBS_COMPLETION, &n, &given, err)) return false;
        r->logprobs = given;
        r->req.logprobs = given ? (int32_t)n : -1;
        return true;
    }
    if (!get_bool(root, "logprobs", &r->logprobs, err)) return false;
    if (!get_int(root, "top_logprobs", 0, KS_API_MAX_TOP_LOGPROBS_CHAT, &n, &given, err)) return false;
    if (given && !r->logprobs)
        return ks_api_bad(err, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    r->req.logprobs = r->logprobs ? (int32_t)n : -1;
    return true;
}

static uint64_t fresh_seed(void) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
                 (atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    return x * 0xBF58476D1CE4E5B9ull;
}

static bool parse_sampling(const json_t *root, ks_api_request *r, ks_api_error *err) {
    ks_request *q = &r->req;
    long long n = 1, top_k = 0, seed = 0;
    bool seed_given = false;
    if (!get_float(root, "temperature", 0, 2, &q->temperature, err)) return false;
    if (!get_float(root, "top_p", 0, 1, &q->top_p, err)) return false;
    if (!get_float(root, "min_p", 0, 1, &q->min_p, err)) return false;
    if (!get_int(root, "top_k", 0, 1 << 20, &top_k, NULL, err)) return false;
    if (!get_float(root, "presence_penalty", -2, 2, &q->presence_penalty, err)) return false;
    if (!get_float(root, "frequency_penalty", -2, 2, &q->frequency_penalty, err)) return false;
    if (!get_int(root, "n", 1, KS_API_MAX_N, &n, NULL, err)) return false;
    if (!get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, &seed_given, err)) return false;
    if (!get_bool(root, "ignore_eos", &q->ignore_eos, err)) return false;
    if (r->kind == KS_API_COMPLETION) {
        long long best_of = n;
        if (!get_int(root, "best_of", 1, KS_API_MAX_N, &best_of, NULL, err)) return false;
        if (best_of != n)
            return ks_api_bad(err, "best_of", "'best_of' different from 'n' is not supported by this server");
    }
    q->top_k = (int32_t)top_k;
    q->n = (int32_t)n;
    q->seed = seed_given ? (uint64_t)seed : fresh_seed();
    return true;
}

/* The engine's cell rule: a request needs n_prompt + n * (max_tokens - 1) cells (the prompt is shared by
 * the choices, and a choice's last token is never decoded), at most the context. */
static int64_t cells_needed(const ks_request *q, int64_t max_tokens) {
    return (int64_t)q->n_prompt + (int64_t)q->n * (max_tokens - 1);
}

/* max_tokens (or chat's max_completion_tokens, which wins when both are given). Without either, chat
 * takes the server's default and completions OpenAI's 16, each cut to what fits beside the prompt. */
static bool parse_max_tokens(const json_t *root, ks_api_request *r, const ks_api_model *m,
                             ks_api_error *err) {
    long long mt = 0, mct = 0;
    bool given = false, given_c = false;
    if (!get_int(root, "max_tokens", 1, m->max_tokens_cap, &mt, &given, err)) return false;
    if (r->kind == KS_API_CHAT &&
        !get_int(root, "max_completion_tokens", 1, m->max_tokens_cap, &mct, &given_c, err))
        return false;
    const char *param = given_c ? "max_completion_tokens" : "max_tokens";
    if (given_c) mt = mct;
    if (r->req.n_prompt >= m->n_ctx)
        return ks_api_fail(err, 400, "invalid_request_error", "context_length_exceeded",
                           r->kind == KS_API_CHAT ? "messages" : "prompt",
                           "This model's maximum context length is %d tokens. However, your prompt has %d "
                           "tokens, which leaves no room for a completion.",
                           m->n_ctx, r->req.n_prompt);
    int64_t fits = (m->n_ctx - r->req.n_prompt) / r->req.n + 1; /* the largest max_tokens that fits */
    if (!given && !given_c) {
        mt = r->kind == KS_API_CHAT ? m->default_max_tokens : 16;
        if (mt > fits) mt = fits;
        if (mt > m->max_tokens_cap) mt = m->max_tokens_cap;
        if (mt < 1) mt = 1;
    } else if (cells_needed(&r->req, mt) > m->n_ctx) {
        return ks_api_fail(err, 400, "invalid_request_error", "context_length_exceeded", param,
                           "This model's maximum context length is %d tokens. However, you requested %lld "
                           "tokens (%d in the prompt, %lld in the completion%s). Please reduce the length "
                           "of the prompt or the completion.",
                           m->n_ctx, (long long)cells_needed(&r->req, mt), r->req.n_prompt, mt,
                           r->req.n > 1 ? ", for each choice" : "");
    }
    r->req.max_tokens = (int32_t)mt;
    return true;
}

/* /v1/completions "prompt": a string, a list holding one string, or a list of token ids. */
static bool completion_prompt(const json_t *root, const ks_api_model *m, ks_api_request *r,
                              ks_api_error *err) {
    json_t *p = field(root, "prompt");
    if (!p) return ks_api_bad(err, "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p))
        return ks_api_tokenize_text(m, json_string_value(p), json_string_length(p), true, true, &r->prompt,
                                    &r->req.n_prompt, err);
    if (!json_is_array(p))
        return ks_api_bad(err, "prompt", "'prompt' must be a string or an array of token ids");
    size_t n = json_array_size(p);
    if (n == 0) return ks_api_bad(err, "prompt", "'prompt' is empty");
    if (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))
        return ks_api_bad(err, "prompt",
                          "a list of several prompts is not supported; send one prompt per "
                          "request");
    if (n > (size_t)m->n_ctx)
        return ks_api_bad(err, "prompt", "'prompt' has %zu tokens; the context holds %d", n, m->n_ctx);
    r->prompt = malloc(n * sizeof *r->prompt);
    if (!r->prompt) return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    int32_t n_vocab = kiln_vocab_n_tokens(m->vocab);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(p, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab)
            return ks_api_bad(err, "prompt", "prompt[%zu] is not a token id (an integer 0 .. %d)", i,
                              n_vocab - 1);
        r->prompt[i] = (int32_t)json_integer_value(t);
    }
    r->req.n_prompt = (int32_t)n;
    return true;
}

static bool parse_root(const json_t *root, ks_api_kind kind, const ks_api_model *m, ks_api_request *r,
                       ks_api_error *err) {
    if (!refuse_unsupported(root, kind, err) || !parse_stream(root, r, err) ||
        !parse_logprobs(root, r, err) || !parse_sampling(root, r, err) || !parse_stop(root, r, err) ||
        !ks_api_parse_grammar(root, r, err))
        return false;
    if (kind == KS_API_CHAT) {
        json_t *msgs = json_object_get(root, "messages");
        ks_api_tools tools;
        if (!ks_api_parse_tools(root, m, &tools, r, err)) return false;
        if (!msgs) return ks_api_bad(err, "messages", "'messages' is required");
        if (!ks_api_chat_prompt(msgs, &tools, m, &r->prompt, &r->req.n_prompt, err)) return false;
    } else if (!completion_prompt(root, m, r, err)) {
        return false;
    }
    return parse_max_tokens(root, r, m, err);
}

/* Whether the model does what the endpoint asks: generation from a decoder, embeddings from an encoder. */
static bool model_fits(ks_api_kind kind, const ks_api_model *m, ks_api_error *err) {
    if (kind == KS_API_EMBEDDING && !m->embeddings)
        return ks_api_fail(err, 400, "invalid_request_error", "model_not_embedding", "model",
                           "the model '%s' is a decoder and makes no embeddings; /v1/embeddings needs an "
                           "encoder model (BERT)",
                           m->id);
    if (kind != KS_API_EMBEDDING && m->embeddings)
        return ks_api_fail(err, 400, "invalid_request_error", "model_not_generative", "model",
                           "the model '%s' is an encoder: it makes embeddings (POST /v1/embeddings), not "
                           "%s",
                           m->id, kind == KS_API_CHAT ? "chat completions" : "completions");
    return true;
}

bool ks_api_parse(ks_api_kind kind, const char *body, size_t len, const ks_api_model *model,
                  ks_api_request *out, ks_api_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->req = ks_request_default();
    out->req.eot_token = model->eot_token;
    json_t *root;
    if (!model_fits(kind, model, err) || !ks_api_parse_json(body, len, &root, err)) return false;
    bool ok = kind == KS_API_EMBEDDING ? ks_api_embedding_parse(root, model, out, err)
                                       : parse_root(root, kind, model, out, err);
    json_decref(root);
    if (!ok) {
        ks_api_request_free(out);
        return false;
    }
    out->req.prompt = out->prompt;
    out->req.input_lens = out->input_lens;
    out->req.stop = out->req.n_stop ? out->stop_ptrs : NULL;
    out->req.grammar = out->grammar;
    return true;
}

void ks_api_request_free(ks_api_request *r) {
    if (!r) return;
    free(r->prompt);
    free(r->input_lens);
    for (int i = 0; i < KS_API_MAX_STOP; i++)
        free(r->stop[i]);
    free(r->grammar);
    memset(r, 0, sizeof *r);
    r->req = ks_request_default();
}
