/*
 * api_response.c - engine events -> OpenAI responses. A ks_api_result keeps, per choice, the text so
 * far, its finish reason and its logprobs, and the usage from KS_EVENT_DONE; for an embedding request,
 * each input's vector (the response is built by api_embed.c). Streaming requests also get
 * the server-sent events each event makes, in OpenAI's order: per choice a first chunk with
 * {"role": "assistant", "content": ""} (chat), chunks with the new text, a chunk with the finish reason;
 * then, with stream_options.include_usage, a chunk with empty choices and the usage (every other chunk
 * carrying "usage": null); then "data: [DONE]". An engine error mid-stream becomes one
 * `data: {"error": {...}}` event and the stream ends there.
 *
 * Tool calls (a request whose tool_syntax is set, tools.h): the reply is parsed when its choice ends; when
 * it holds calls, the message carries "tool_calls" ({id "call_...", type "function", function {name,
 * arguments as a JSON string}}), "content" is the text outside the calls or null, and finish_reason is
 * "tool_calls". Streamed, text is sent as content while it cannot be the start of a call
 * (ks_tool_calls_releasable); the rest waits for the end of the choice, and then goes out as content, or
 * as one delta per call ({"tool_calls": [{"index", "id", "type", "function": {"name", "arguments"}}]})
 * followed by the finish chunk.
 *
 * Logprobs: chat responses carry {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]};
 * completions carry {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}, with
 * offsets counted in the generated text (echo is unsupported, so the prompt is never part of it).
 */
#include "api.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYSTEM_FINGERPRINT "kiln-" KILN_VERSION_STRING

typedef struct choice_acc {
    char *text; /* (len) the choice's text so far, not NUL-terminated */
    size_t len, cap;
    ks_finish finish;
    bool started; /* the role chunk has been streamed */
    size_t released; /* bytes of text streamed as content (tool calls: the rest may hold a call) */
    json_t *lp;   /* non-streaming logprobs: chat {"content": [...]}, completions the four arrays */
} choice_acc;

struct ks_api_result {
    ks_api_kind kind;
    bool stream, include_usage, logprobs;
    int32_t n_alt; /* alternatives per token when logprobs */
    const ks_api_model *model;
    char id[48];
    int64_t created;
    int32_t n;
    choice_acc *choices; /* (n) */
    bool finished;
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    char *error; /* the engine's message after KS_EVENT_ERROR */
    float *vectors; /* embeddings: [n][n_embd] */
    int32_t n_embd;
    bool base64;
    const ks_tool_syntax *tools; /* parse replies for calls, or NULL */
    uint64_t id_seq;
};

static json_t *new_logprobs(ks_api_kind kind) {
    if (kind == KS_API_CHAT) return json_pack("{s:[]}", "content");
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

ks_api_result *ks_api_result_create(const ks_api_request *r, const ks_api_model *model, uint64_t id_seq,
                                    int64_t created) {
    ks_api_result *res = calloc(1, sizeof *res);
    if (!res) return NULL;
    res->kind = r->kind;
    res->stream = r->stream;
    res->include_usage = r->include_usage;
    res->logprobs = r->logprobs;
    res->n_alt = r->req.logprobs > 0 ? r->req.logprobs : 0;
    res->model = model;
    res->created = created;
    res->n = r->req.n;
    res->tools = r->kind == KS_API_CHAT ? r->tool_syntax : NULL;
    res->id_seq = id_seq;
    snprintf(res->id, sizeof res->id, "%s-kiln%llu", r->kind == KS_API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)id_seq);
    if (r->kind == KS_API_EMBEDDING) {
        res->n = r->req.n_inputs;
        res->n_embd = model->n_embd;
        res->base64 = r->base64;
        res->vectors = calloc((size_t)res->n * (size_t)res->n_embd, sizeof *res->vectors);
        if (!res->vectors) goto fail;
        return res;
    }
    res->choices = calloc((size_t)res->n, sizeof *res->choices);
    if (!res->choices) goto fail;
    for (int32_t i = 0; i < res->n && res->logprobs && !res->stream; i++)
        if (!(res->choices[i].lp = new_logprobs(res->kind))) goto fail;
    return res;
fail:
    ks_api_result_destroy(res);
    return NULL;
}

void ks_api_result_destroy(ks_api_result *res) {
    if (!res) return;
    for (int32_t i = 0; res->choices && i < res->n; i++) {
        free(res->choices[i].text);
        json_decref(res->choices[i].lp);
    }
    free(res->choices);
    free(res->vectors);
    free(res->error);
    free(res);
}

static bool append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return false;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

static json_t *finite_lp(float x) {
    return json_real(isfinite(x) ? x : -9999.0);
}

static json_t *byte_list(const char *s, size_t len) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < len; i++)
        if (json_array_append_new(a, json_integer((unsigned char)s[i]))) return json_decref(a), NULL;
    return a;
}

/* The text of the token the choice took, detokenized alone (a byte-fallback token shows as U+FFFD in
 * "token"; when it is among the alternatives, their exact bytes are used instead). */
static size_t token_text(const ks_api_result *res, const ks_event *ev, int32_t t, char *buf, size_t cap,
                         const char **out) {
    for (int32_t k = 0; ev->top && ev->top[t] && k < res->n_alt; k++)
        if (ev->top[t][k].token == ev->tokens[t] && ev->top[t][k].text) {
            *out = ev->top[t][k].text;
            return ev->top[t][k].len;
        }
    size_t n = 0;
    *out = buf;
    if (kiln_detokenize(res->model->vocab, &ev->tokens[t], 1, false, buf, cap, &n) != KILN_OK) return 0;
    return n;
}

static int32_t alternatives(const ks_api_result *res, const ks_event *ev, int32_t t) {
    return ev->top && ev->top[t] ? res->n_alt : 0;
}

/* One token's chat logprobs entry: {"token", "logprob", "bytes", "top_logprobs": [...]}. */
static json_t *chat_lp_entry(const ks_api_result *res, const ks_event *ev, int32_t t) {
    char buf[256];
    const char *text;
    size_t len = token_text(res, ev, t, buf, sizeof buf, &text);
    json_t *top = json_array();
    for (int32_t k = 0; top && k < alternatives(res, ev, t); k++) {
        const ks_top_logprob *c = &ev->top[t][k];
        json_t *e = json_pack("{s:o, s:o, s:o}", "token", ks_api_json_lossy(c->text, c->len), "logprob",
                              finite_lp(c->logprob), "bytes", byte_list(c->text, c->len));
        if (!e || json_array_append_new(top, e)) return json_decref(top), NULL;
    }
    if (!top) return NULL;
    return json_pack("{s:o, s:o, s:o, s:o}", "token", ks_api_json_lossy(text, len), "logprob",
                     finite_lp(ev->token_logprobs[t]), "bytes", byte_list(text, len), "top_logprobs", top);
}

/* One token of a completions logprobs object, appended to its four arrays. */
static bool completion_lp_add(const ks_api_result *res, const ks_event *ev, int32_t t, json_t *lp,
                              size_t *offset) {
    char buf[256];
    const char *text;
    size_t len = token_text(res, ev, t, buf, sizeof buf, &text);
    json_t *top = json_object();
    for (int32_t k = 0; top && k < alternatives(res, ev, t); k++) {
        const ks_top_logprob *c = &ev->top[t][k];
        json_t *key = ks_api_json_lossy(c->text, c->len);
        if (!key || json_object_set_new(top, json_string_value(key), finite_lp(c->logprob)))
            top = (json_decref(top), NULL);
        json_decref(key);
    }
    bool ok =
        top && !json_array_append_new(json_object_get(lp, "tokens"), ks_api_json_lossy(text, len)) &&
        !json_array_append_new(json_object_get(lp, "token_logprobs"), finite_lp(ev->token_logprobs[t])) &&
        !json_array_append_new(json_object_get(lp, "top_logprobs"), top) &&
        !json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)*offset));
    if (!top) return false;
    *offset += len;
    return ok;
}

/* The event's tokens appended to lp, a logprobs object of the request's kind; offset is where the event's
 * text starts in the choice's text. */
static bool add_logprobs(const ks_api_result *res, const ks_event *ev, json_t *lp, size_t offset) {
    if (!ev->tokens || !ev->token_logprobs) return true;
    for (int32_t t = 0; t < ev->n_tokens; t++) {
        if (res->kind == KS_API_CHAT) {
            json_t *e = chat_lp_entry(res, ev, t);
            if (!e || json_array_append_new(json_object_get(lp, "content"), e)) return false;
        } else if (!completion_lp_add(res, ev, t, lp, &offset)) {
            return false;
        }
    }
    return true;
}

static json_t *usage_json(const ks_api_result *res) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", res->prompt_tokens, "completion_tokens",
                     res->completion_tokens, "total_tokens", res->prompt_tokens + res->completion_tokens,
                     "prompt_tokens_details", "cached_tokens", res->cached_tokens);
}

static json_t *finish_json(ks_finish f) {
    if (f == KS_FINISH_LENGTH) return json_string("length");
    return json_string("stop");
}

/* "call_" and 24 hex digits, unique per server run (the response's sequence number, choice and call). */
static void call_id(const ks_api_result *res, int32_t choice, size_t k, char out[32]) {
    uint64_t x = res->id_seq * 0x9E3779B97F4A7C15ull ^ ((uint64_t)choice << 40) ^ (uint64_t)k;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    snprintf(out, 32, "call_%08llx%016llx", (unsigned long long)(res->id_seq & 0xffffffffu),
             (unsigned long long)x);
}

/* The calls as OpenAI's tool_calls array; streamed (delta) entries also carry their index. */
static json_t *tool_calls_json(const ks_api_result *res, int32_t choice, const ks_tool_calls *tc,
                               bool delta) {
    json_t *a = json_array();
    for (size_t k = 0; a && k < tc->n; k++) {
        char id[32];
        call_id(res, choice, k, id);
        json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name",
                              tc->calls[k].name, "arguments", tc->calls[k].arguments);
        if (c && delta && json_object_set_new(c, "index", json_integer((json_int_t)k)))
            c = (json_decref(c), NULL);
        if (!c || json_array_append_new(a, c)) a = (json_decref(a), NULL);
    }
    return a;
}

/* The fields every response and chunk starts with. */
static json_t *envelope(const ks_api_result *res, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", res->id, "object", object, "created",
                     (json_int_t)res->created, "model", res->model->id, "system_fingerprint",
                     SYSTEM_FINGERPRINT);
}

/* Append n bytes to the stream buffer *out (*len bytes, kept NUL-terminated). */
static bool out_append(char **out, size_t *len, const char *s, size_t n) {
    char *b = realloc(*out, *len + n + 1);
    if (!b) return false;
    memcpy(b + *len, s, n);
    *len += n;
    b[*len] = '\0';
    *out = b;
    return true;
}

/* Append `data: <s>\n\n`. */
static bool out_event(char **out, size_t *len, const char *s) {
    return out_append(out, len, "data: ", 6) && out_append(out, len, s, strlen(s)) &&
           out_append(out, len, "\n\n", 2);
}

/* Append `data: <json>\n\n` and take the reference to j. */
static bool emit(json_t *j, char **out, size_t *len) {
    if (!j) return false;
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    bool ok = s && out_event(out, len, s);
    free(s);
    return ok;
}

/* One streaming chunk for choice i: a chat delta or a completions text, with optional logprobs and
 * finish reason (NULL: null). */
static json_t *chunk(const ks_api_result *res, int32_t i, json_t *delta_or_text, json_t *lp, json_t *finish) {
    json_t *c;
    if (res->kind == KS_API_CHAT)
        c = json_pack("{s:i, s:o, s:o, s:o}", "index", i, "delta", delta_or_text, "logprobs",
                      lp ? lp : json_null(), "finish_reason", finish ? finish : json_null());
    else
        c = json_pack("{s:o, s:i, s:o, s:o}", "text", delta_or_text, "index", i, "logprobs",
                      lp ? lp : json_null(), "finish_reason", finish ? finish : json_null());
    json_t *j = envelope(res, res->kind == KS_API_CHAT ? "chat.completion.chunk" : "text_completion");
    if (!c || !j || json_object_set_new(j, "choices", json_pack("[o]", c)) ||
        (res->include_usage && json_object_set_new(j, "usage", json_null())))
        return json_decref(j), NULL;
    return j;
}

static bool stream_text(ks_api_result *res, const ks_event *ev, size_t offset, char **out, size_t *len) {
    choice_acc *c = &res->choices[ev->choice];
    if (!c->started && res->kind == KS_API_CHAT) {
        if (!emit(chunk(res, ev->choice, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL,
                        NULL),
                  out, len))
            return false;
    }
    c->started = true;
    json_t *lp = NULL;
    if (res->logprobs && ev->n_tokens > 0) {
        if (!(lp = new_logprobs(res->kind)) || !add_logprobs(res, ev, lp, offset))
            return json_decref(lp), false;
    }
    const char *from = ev->text ? ev->text : "";
    size_t n = ev->len;
    if (res->tools) { /* what cannot start a call goes out now; a possible call waits for the end */
        size_t r = ks_tool_calls_releasable(res->tools, c->text ? c->text : "", c->len);
        from = c->text + c->released;
        n = r > c->released ? r - c->released : 0;
        c->released += n;
    }
    if (n == 0 && !lp) return true;
    json_t *text = ks_api_json_lossy(from, n);
    json_t *body = res->kind == KS_API_CHAT ? json_pack("{s:o}", "content", text) : text;
    return emit(chunk(res, ev->choice, body, lp, NULL), out, len);
}

/* The text a tool-call request held back: its calls as one delta, and what lies outside them (or the
 * whole of it, when it holds no well-formed call) as content. *calls tells which it was. */
static bool stream_held(ks_api_result *res, int32_t i, char **out, size_t *len, bool *calls) {
    choice_acc *c = &res->choices[i];
    ks_tool_calls tc;
    const char *held = c->text ? c->text + c->released : "";
    size_t n = c->len - c->released;
    int r = ks_tool_calls_parse(res->tools, held, n, &tc);
    if (r < 0) return false;
    *calls = r == 1;
    const char *text = r == 1 ? tc.content : held;
    size_t tlen = r == 1 ? tc.content_len : n;
    json_t *content = tlen ? json_pack("{s:o}", "content", ks_api_json_lossy(text, tlen)) : NULL;
    bool ok = !tlen || emit(chunk(res, i, content, NULL, NULL), out, len);
    json_t *delta = r == 1 ? json_pack("{s:o}", "tool_calls", tool_calls_json(res, i, &tc, true)) : NULL;
    if (ok && r == 1) ok = emit(chunk(res, i, delta, NULL, NULL), out, len);
    else json_decref(delta);
    c->released = c->len;
    ks_tool_calls_free(&tc);
    return ok;
}

static bool stream_end(ks_api_result *res, const ks_event *ev, char **out, size_t *len) {
    choice_acc *c = &res->choices[ev->choice];
    if (!c->started && res->kind == KS_API_CHAT &&
        !emit(chunk(res, ev->choice, json_pack("{s:s, s:s}", "role", "assistant", "content", ""), NULL, NULL),
              out, len))
        return false;
    c->started = true;
    bool calls = false;
    if (res->tools && !stream_held(res, ev->choice, out, len, &calls)) return false;
    json_t *body = res->kind == KS_API_CHAT ? json_object() : json_string("");
    json_t *finish = calls ? json_string("tool_calls") : finish_json(ev->finish);
    return emit(chunk(res, ev->choice, body, NULL, finish), out, len);
}

static bool stream_done(ks_api_result *res, char **out, size_t *len) {
    if (res->include_usage) {
        json_t *j = envelope(res, res->kind == KS_API_CHAT ? "chat.completion.chunk" : "text_completion");
        if (!j || json_object_set_new(j, "choices", json_array()) ||
            json_object_set_new(j, "usage", usage_json(res)) || !emit(j, out, len))
            return false;
    }
    return out_event(out, len, "[DONE]");
}

static bool stream_error(ks_api_result *res, char **out, size_t *len) {
    ks_api_error err;
    ks_api_fail(&err, 500, "server_error", NULL, NULL, "%s", res->error);
    char *s = ks_api_error_json(&err);
    if (!s) return false;
    bool ok = out_event(out, len, s);
    free(s);
    return ok;
}

static bool record_text(ks_api_result *res, const ks_event *ev, char **out, size_t *len) {
    choice_acc *c = &res->choices[ev->choice];
    size_t offset = c->len;
    if (ev->len && !append(&c->text, &c->len, &c->cap, ev->text, ev->len)) return false;
    if (c->lp && !add_logprobs(res, ev, c->lp, offset)) return false;
    return out ? stream_text(res, ev, offset, out, len) : true;
}

bool ks_api_result_event(ks_api_result *res, const ks_event *ev, char **out, size_t *len) {
    if (res->finished) return true;
    bool choice_ok = ev->choice >= 0 && ev->choice < res->n;
    switch (ev->kind) {
    case KS_EVENT_TEXT: return !choice_ok || record_text(res, ev, out, len);
    case KS_EVENT_CHOICE_END:
        if (!choice_ok) return true;
        res->choices[ev->choice].finish = ev->finish;
        return out ? stream_end(res, ev, out, len) : true;
    case KS_EVENT_DONE:
        res->finished = true;
        res->prompt_tokens = ev->prompt_tokens;
        res->completion_tokens = ev->completion_tokens;
        res->cached_tokens = ev->cached_tokens;
        return out ? stream_done(res, out, len) : true;
    case KS_EVENT_EMBEDDING:
        if (choice_ok && res->vectors && ev->n_embd == res->n_embd)
            memcpy(res->vectors + (size_t)ev->choice * (size_t)res->n_embd, ev->embedding,
                   (size_t)res->n_embd * sizeof *res->vectors);
        return true;
    case KS_EVENT_ERROR:
        res->finished = true;
        res->error = strdup(ev->message ? ev->message : "the request failed");
        if (!res->error) return false;
        return out ? stream_error(res, out, len) : true;
    }
    return true;
}

const char *ks_api_result_error(const ks_api_result *res) {
    return res->error;
}
bool ks_api_result_finished(const ks_api_result *res) {
    return res->finished;
}

/* A chat choice whose reply holds tool calls (NULL when it holds none, or when out of memory: *oom). */
static json_t *tool_choice_json(const ks_api_result *res, int32_t i, bool *oom) {
    const choice_acc *c = &res->choices[i];
    ks_tool_calls tc;
    int r = ks_tool_calls_parse(res->tools, c->text ? c->text : "", c->len, &tc);
    *oom = r < 0;
    if (r != 1) return NULL;
    json_t *content = tc.content ? ks_api_json_lossy(tc.content, tc.content_len) : json_null();
    json_t *j = json_pack("{s:i, s:{s:s, s:o, s:n, s:o}, s:o, s:s}", "index", i, "message", "role",
                          "assistant", "content", content, "refusal", "tool_calls",
                          tool_calls_json(res, i, &tc, false), "logprobs",
                          c->lp ? json_incref(c->lp) : json_null(), "finish_reason", "tool_calls");
    ks_tool_calls_free(&tc);
    *oom = j == NULL;
    return j;
}

static json_t *choice_json(const ks_api_result *res, int32_t i) {
    const choice_acc *c = &res->choices[i];
    bool oom = false;
    json_t *calls = res->tools ? tool_choice_json(res, i, &oom) : NULL;
    if (calls || oom) return calls;
    json_t *text = ks_api_json_lossy(c->text ? c->text : "", c->len);
    json_t *lp = c->lp ? json_incref(c->lp) : json_null();
    if (res->kind == KS_API_CHAT)
        return json_pack("{s:i, s:{s:s, s:o, s:n}, s:o, s:o}", "index", i, "message", "role", "assistant",
                         "content", text, "refusal", "logprobs", lp, "finish_reason", finish_json(c->finish));
    return json_pack("{s:o, s:i, s:o, s:o}", "text", text, "index", i, "logprobs", lp, "finish_reason",
                     finish_json(c->finish));
}

char *ks_api_result_json(const ks_api_result *res) {
    if (res->kind == KS_API_EMBEDDING)
        return ks_api_embedding_json(res->vectors, res->n, res->n_embd, res->base64, res->model->id,
                                     res->prompt_tokens);
    json_t *j = envelope(res, res->kind == KS_API_CHAT ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (int32_t i = 0; choices && i < res->n; i++)
        if (json_array_append_new(choices, choice_json(res, i))) choices = (json_decref(choices), NULL);
    if (!j || !choices || json_object_set_new(j, "choices", choices) ||
        json_object_set_new(j, "usage", usage_json(res))) {
        json_decref(j);
        return NULL;
    }
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    return s;
}
