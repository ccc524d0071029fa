/*
 * api_chat.c - chat messages -> prompt tokens, and text -> tokens for every endpoint that tokenizes.
 *
 * Messages are OpenAI's: {"role": "system"|"developer"|"user"|"assistant", "content": ...} where content
 * is a string or an array of {"type": "text", "text": ...} parts (joined with nothing between them, as
 * OpenAI does), and an assistant's content may be null. "developer" is OpenAI's newer name for the system
 * role. They are rendered with the model's chat template (kiln_chat_render, with the generation prompt)
 * and tokenized with special tokens parsed, BOS added when the vocabulary asks for it. Any other role,
 * a non-text part, or a malformed message is a 400 that names the message's index.
 */
#include "api.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool oom(ks_api_error *err) {
    return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
}

/* A failed Kiln call on the request's text: the client's fault (400 naming param), unless the server ran
 * out of memory (500). */
static bool kiln_failed(ks_api_error *err, kiln_status st, const char *param, const char *what) {
    if (st == KILN_E_NOMEM) return ks_api_fail(err, 500, "server_error", NULL, NULL, "%s", kiln_last_error());
    return ks_api_bad(err, param, "%s%s", what, kiln_last_error());
}

bool ks_api_tokenize_text(const ks_api_model *model, const char *text, size_t len, bool add_special,
                          bool parse_special, int32_t **ids, int32_t *n_ids, ks_api_error *err) {
    *ids = NULL;
    *n_ids = 0;
    bool bos = add_special && kiln_vocab_add_bos(model->vocab);
    size_t n = 0;
    kiln_status st = kiln_tokenize_special(model->vocab, text, len, bos, parse_special, NULL, 0, &n);
    if (st != KILN_OK && st != KILN_E_RANGE)
        return kiln_failed(err, st, NULL, "the text could not be tokenized: ");
    if (n > INT32_MAX / 2) return ks_api_bad(err, NULL, "the text has too many tokens (%zu)", n);
    int32_t *buf = malloc((n ? n : 1) * sizeof *buf);
    if (!buf) return oom(err);
    st = kiln_tokenize_special(model->vocab, text, len, bos, parse_special, buf, n, &n);
    if (st != KILN_OK) {
        free(buf);
        return kiln_failed(err, st, NULL, "the text could not be tokenized: ");
    }
    *ids = buf;
    *n_ids = (int32_t)n;
    return true;
}

/* The text of one message's content, malloc'd: a string, or the text parts of an array joined. */
static bool message_content(const json_t *content, size_t index, bool assistant, char **out,
                            ks_api_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", index);
    *out = NULL;
    if (!content || json_is_null(content)) {
        if (!assistant) return ks_api_bad(err, param, "messages[%zu] has no 'content'", index);
        return (*out = strdup("")) != NULL || oom(err);
    }
    if (json_is_string(content)) return (*out = strdup(json_string_value(content))) != NULL || oom(err);
    if (!json_is_array(content))
        return ks_api_bad(err, param, "messages[%zu].content must be a string or an array of text parts",
                          index);
    size_t total = 0, n = json_array_size(content);
    for (size_t i = 0; i < n; i++) {
        json_t *part = json_array_get(content, i), *type = json_object_get(part, "type");
        json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type))
            return ks_api_bad(err, param, "messages[%zu].content[%zu] must be an object with a 'type'", index,
                              i);
        if (strcmp(json_string_value(type), "text") != 0)
            return ks_api_bad(err, param,
                              "messages[%zu].content[%zu] has type '%.32s'; only 'text' parts are "
                              "supported",
                              index, i, json_string_value(type));
        if (!json_is_string(text))
            return ks_api_bad(err, param, "messages[%zu].content[%zu].text must be a string", index, i);
        total += json_string_length(text);
    }
    char *s = malloc(total + 1), *p = s;
    if (!s) return oom(err);
    for (size_t i = 0; i < n; i++) {
        json_t *text = json_object_get(json_array_get(content, i), "text");
        memcpy(p, json_string_value(text), json_string_length(text));
        p += json_string_length(text);
    }
    *p = '\0';
    *out = s;
    return true;
}

/* The kiln role for an OpenAI role, or NULL when Kiln's templates have none. */
static const char *kiln_role(const char *role) {
    if (!strcmp(role, "system") || !strcmp(role, "developer")) return "system";
    if (!strcmp(role, "user")) return "user";
    if (!strcmp(role, "assistant")) return "assistant";
    return NULL;
}

static bool read_message(const json_t *m, size_t i, kiln_chat_message *out, ks_api_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m)) return ks_api_bad(err, param, "messages[%zu] must be an object", i);
    json_t *role = json_object_get(m, "role");
    if (!json_is_string(role)) return ks_api_bad(err, param, "messages[%zu] must have a string 'role'", i);
    out->role = kiln_role(json_string_value(role));
    if (!out->role)
        return ks_api_bad(err, param,
                          "messages[%zu] has role '%.40s'; this server supports system, developer, "
                          "user and assistant",
                          i, json_string_value(role));
    json_t *tc = json_object_get(m, "tool_calls");
    if (tc && !json_is_null(tc) && !(json_is_array(tc) && json_array_size(tc) == 0))
        return ks_api_bad(err, param, "messages[%zu] has tool_calls; function calling is not supported", i);
    char *content;
    if (!message_content(json_object_get(m, "content"), i, !strcmp(out->role, "assistant"), &content, err))
        return false;
    out->content = content;
    return true;
}

static bool render(const kiln_chat_message *msgs, size_t n, const ks_api_model *model, char **text,
                   size_t *len, ks_api_error *err) {
    size_t need = 0;
    kiln_status st = kiln_chat_render(model->tmpl, msgs, n, true, NULL, 0, &need);
    if (st != KILN_OK && st != KILN_E_RANGE) return kiln_failed(err, st, "messages", "");
    char *buf = malloc(need + 1);
    if (!buf) return oom(err);
    st = kiln_chat_render(model->tmpl, msgs, n, true, buf, need + 1, &need);
    if (st != KILN_OK) {
        free(buf);
        return kiln_failed(err, st, "messages", "");
    }
    *text = buf;
    *len = need;
    return true;
}

bool ks_api_chat_prompt(const json_t *messages, const ks_api_model *model, int32_t **ids, int32_t *n_ids,
                        ks_api_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!json_is_array(messages)) return ks_api_bad(err, "messages", "'messages' must be an array");
    size_t n = json_array_size(messages);
    if (n == 0) return ks_api_bad(err, "messages", "'messages' must hold at least one message");
    if (n > KS_API_MAX_MESSAGES)
        return ks_api_bad(err, "messages", "'messages' has %zu messages; at most %d are allowed", n,
                          KS_API_MAX_MESSAGES);
    kiln_chat_message *msgs = calloc(n, sizeof *msgs);
    if (!msgs) return oom(err);
    bool ok = true;
    size_t got = 0;
    for (; ok && got < n; got++)
        ok = read_message(json_array_get(messages, got), got, &msgs[got], err);
    if (!ok) got--; /* the failed message holds nothing */
    char *text = NULL;
    size_t len = 0;
    if (ok) ok = render(msgs, n, model, &text, &len, err);
    if (ok) ok = ks_api_tokenize_text(model, text, len, true, true, ids, n_ids, err);
    if (ok && *n_ids == 0) ok = ks_api_bad(err, "messages", "the messages render to an empty prompt");
    if (!ok) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
    }
    free(text);
    for (size_t i = 0; i < got; i++)
        free((char *)msgs[i].content);
    free(msgs);
    return ok;
}
