/*
 * api.h - the OpenAI-compatible JSON layer of `kiln serve`, apart from HTTP: request bodies parsed and
 * validated into engine requests (api_request.c, api_chat.c), error envelopes (api_errors.c), responses
 * and stream chunks built from engine events (api_response.c), the small endpoints (api_misc.c) and the
 * Prometheus text (metrics_text.c). Nothing here touches a socket, so tests/test_server_api.c runs it all
 * without a network.
 *
 * Every function that can fail on client input fills a ks_api_error (HTTP status, OpenAI error type,
 * the offending parameter, a message naming the problem) and returns false; none aborts on any input.
 * Strings returned as char * are malloc'd and owned by the caller (free).
 */
#ifndef KILN_SERVER_API_H
#define KILN_SERVER_API_H

#include "engine.h"
#include "tools.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits on what a request may ask for. */
#define KS_API_MAX_N 8           /* choices per request */
#define KS_API_MAX_STOP 4        /* stop strings, as OpenAI */
#define KS_API_MAX_STOP_LEN 256  /* bytes per stop string */
#define KS_API_MAX_MESSAGES 4096 /* chat messages per request */
#define KS_API_MAX_TOP_LOGPROBS_CHAT 20
#define KS_API_MAX_LOGPROBS_COMPLETION 5

typedef struct ks_api_error {
    int status;       /* HTTP status: 400, 401, 404, 405, 413, 429, 500, 503 */
    const char *type; /* "invalid_request_error", "authentication_error", "server_error", ... */
    const char *code; /* OpenAI's code string, or NULL for JSON null */
    char param[64];   /* the offending field, or "" for JSON null */
    char message[512];
} ks_api_error;

/* Fill err (returns false so that callers can `return ks_api_fail(...)`). param may be NULL. */
bool ks_api_fail(ks_api_error *err, int status, const char *type, const char *code, const char *param,
                 const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* 400 invalid_request_error naming param. */
bool ks_api_bad(ks_api_error *err, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* {"error": {"message", "type", "param", "code"}} as a malloc'd string (NULL when out of memory). */
char *ks_api_error_json(const ks_api_error *err);

/* What the API layer needs to know of the loaded model. All borrowed; valid while the server runs. */
typedef struct ks_api_model {
    const char *id; /* the model file's basename, as /v1/models lists it */
    const kiln_vocab *vocab;
    const kiln_chat_template *tmpl; /* the model's template, or "plain" */
    int32_t eot_token;              /* the template's end-of-turn token, or -1 (ks_request.eot_token) */
    int32_t n_ctx;                  /* the engine's KV cells */
    int32_t n_ctx_train;
    int32_t max_tokens_cap;     /* largest max_tokens a request may ask for */
    int32_t default_max_tokens; /* chat completions without max_tokens */
    int64_t created;            /* unix time the server started (/v1/models "created") */
    bool embeddings;            /* an encoder: /v1/embeddings only (kiln_model_is_causal false) */
    int32_t n_embd;             /* the width of its embeddings */
} ks_api_model;

typedef enum ks_api_kind { KS_API_CHAT = 0, KS_API_COMPLETION = 1, KS_API_EMBEDDING = 2 } ks_api_kind;

#define KS_API_MAX_INPUTS 2048 /* /v1/embeddings inputs per request, as OpenAI */

/* A parsed request: the engine request plus what shapes the response. The engine request's prompt and
 * stop pointers point into this struct's own allocations; release with ks_api_request_free. */
typedef struct ks_api_request {
    ks_api_kind kind;
    ks_request req;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool logprobs;      /* the response carries logprobs (req.logprobs alternatives each) */
    int32_t *prompt;    /* (req.n_prompt) owned */
    int32_t *input_lens; /* (req.n_inputs) owned: embedding requests */
    bool base64;         /* embeddings: encoding_format "base64" */
    char *stop[KS_API_MAX_STOP];
    const char *stop_ptrs[KS_API_MAX_STOP];
    char *grammar; /* GBNF for req.grammar (from "grammar" or a JSON response_format), or NULL; owned */
    const ks_tool_syntax *tool_syntax; /* parse the reply for tool calls in this syntax, or NULL (static) */
} ks_api_request;

/* A request's function tools (api_tools.c), valid while its parsed JSON body lives. */
typedef enum ks_tool_choice {
    KS_TOOL_CHOICE_NONE = 0,     /* no definitions in the prompt, no parsing */
    KS_TOOL_CHOICE_AUTO = 1,     /* definitions in the prompt, free generation, lenient parsing */
    KS_TOOL_CHOICE_REQUIRED = 2, /* a grammar forces a call of one of the tools */
    KS_TOOL_CHOICE_NAMED = 3,    /* a grammar forces a call of `forced` */
} ks_tool_choice;

typedef struct ks_api_tools {
    const struct json_t *list; /* the "tools" array (borrowed), NULL when there are none */
    ks_tool_choice choice;
    const char *forced; /* the function tool_choice names (borrowed), or NULL */
    bool parallel;      /* parallel_tool_calls (default true) */
    const ks_tool_syntax *syntax; /* the model's call syntax */
} ks_api_tools;

/* Parse and validate a /v1/chat/completions, /v1/completions or /v1/embeddings body (len bytes, not
 * NUL-terminated): every field's type and range, messages rendered with the model's template and
 * tokenized, embedding inputs tokenized as [CLS] text [SEP]. An encoder model refuses chat and
 * completions (400 model_not_generative), a decoder embeddings (400 model_not_embedding). On failure out
 * holds nothing to free. */
bool ks_api_parse(ks_api_kind kind, const char *body, size_t len, const ks_api_model *model,
                  ks_api_request *out, ks_api_error *err);
void ks_api_request_free(ks_api_request *r);

/* Internal steps of ks_api_parse, exposed for tests. `root` is a json_t object (jansson). */
struct json_t;
bool ks_api_parse_json(const char *body, size_t len, struct json_t **out, ks_api_error *err);
/* The chat prompt: messages (roles system, developer, user, assistant with optional tool_calls, tool)
 * and, when tools is non-NULL and its choice is not none, the tool definitions, rendered by the model's
 * template. ks_api_chat_text gives the text (malloc'd), ks_api_chat_prompt the tokens. */
bool ks_api_chat_text(const struct json_t *messages, const ks_api_tools *tools, const ks_api_model *model,
                      char **text, size_t *len, ks_api_error *err);
bool ks_api_chat_prompt(const struct json_t *messages, const ks_api_tools *tools, const ks_api_model *model,
                        int32_t **ids, int32_t *n_ids, ks_api_error *err);
/* api_tools.c: "tools", "tool_choice" and "parallel_tool_calls" into *tools; sets r->tool_syntax unless
 * the choice is none, and r->grammar for a forced call (after ks_api_parse_grammar: a forced call with
 * another constraint is a 400). */
bool ks_api_parse_tools(const struct json_t *root, const ks_api_model *model, ks_api_tools *tools,
                        ks_api_request *r, ks_api_error *err);
/* The definitions of tools->list in the syntax's words (malloc'd; NULL when out of memory). */
char *ks_api_tools_defs(const ks_api_tools *tools);
bool ks_api_tokenize_text(const ks_api_model *model, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t **ids, int32_t *n_ids, ks_api_error *err);
/* api_embed.c: the /v1/embeddings fields of root into r (input, encoding_format, dimensions); and the
 * response for n vectors of n_embd floats (malloc'd JSON, NULL when out of memory). */
bool ks_api_embedding_parse(const struct json_t *root, const ks_api_model *model, ks_api_request *r,
                            ks_api_error *err);
char *ks_api_embedding_json(const float *vectors, int32_t n, int32_t n_embd, bool base64,
                            const char *model_id, int32_t prompt_tokens);
/* api_grammar.c: the constraint fields of root into r->grammar (GBNF, compiled once here so that a bad
 * grammar or schema is a 400 naming the field and the reason): "grammar" (GBNF, as llama-server),
 * "json_schema" (a schema, as llama-server), and "response_format" {type: text | json_object |
 * json_schema, json_schema: {name, schema, strict}} as OpenAI. At most one of them may constrain. */
bool ks_api_parse_grammar(const struct json_t *root, ks_api_request *r, ks_api_error *err);
/* True when s[0..len) is valid UTF-8 without NUL bytes. */
bool ks_api_utf8_valid(const char *s, size_t len);
/* s[0..len) as a JSON string, each byte that is not part of a valid character (or NUL) replaced by
 * U+FFFD, so that a token's partial bytes still make a string. NULL when out of memory. */
struct json_t *ks_api_json_lossy(const char *s, size_t len);

/* Responses. A result collects a request's events (copying what is only valid during the callback) and
 * builds the OpenAI response or stream chunks from them. One result per request; not thread-safe (the
 * HTTP layer holds its connection's lock around every call). */
typedef struct ks_api_result ks_api_result;

/* id_seq makes the response id ("chatcmpl-<seq>" / "cmpl-<seq>") unique. NULL when out of memory. */
ks_api_result *ks_api_result_create(const ks_api_request *r, const ks_api_model *model, uint64_t id_seq,
                                    int64_t created);
void ks_api_result_destroy(ks_api_result *res);
/* Record one event. With stream_out non-NULL, the SSE bytes this event produces ("data: {...}\n\n",
 * the usage chunk and "data: [DONE]\n\n" on DONE, an error event on ERROR) are appended to *stream_out
 * (a growing malloc'd buffer of *stream_len bytes). Returns false when out of memory. */
bool ks_api_result_event(ks_api_result *res, const ks_event *ev, char **stream_out, size_t *stream_len);
/* After DONE: the whole non-streaming response body. NULL when out of memory. */
char *ks_api_result_json(const ks_api_result *res);
/* After ERROR: the engine's message (valid while res lives), or NULL when the request did not fail. */
const char *ks_api_result_error(const ks_api_result *res);
/* Whether DONE or ERROR has been recorded. */
bool ks_api_result_finished(const ks_api_result *res);

/* Small endpoints. Each returns the response body (malloc'd), or NULL with err filled. */
char *ks_api_models_json(const ks_api_model *model);
char *ks_api_tokenize_json(const char *body, size_t len, const ks_api_model *model, ks_api_error *err);
char *ks_api_detokenize_json(const char *body, size_t len, const ks_api_model *model, ks_api_error *err);

/* Prometheus text exposition (version 0.0.4) of the engine's metrics, plus the requests the HTTP layer
 * refused before they reached the engine (status="rejected"). NULL when out of memory. */
char *ks_metrics_text(const ks_metrics *m, uint64_t requests_rejected);

#endif
