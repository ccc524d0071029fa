/*
 * api_chat.c - chat messages -> prompt tokens, and text -> tokens for every endpoint that tokenizes.
 *
 * Messages are OpenAI's: {"role": "system"|"developer"|"user"|"assistant"|"tool", "content": ...} where
 * content is a string or an array of {"type": "text", "text": ...} parts (joined with nothing between
 * them, as OpenAI does), and an assistant's content may be null. "developer" is OpenAI's newer name for
 * the system role. An assistant message may carry "tool_calls" ({id, type "function", function {name,
 * arguments}}, arguments a string holding a JSON object): they are written after its content in the
 * model's call syntax (tools.h). A "tool" message is a function's result (tool_call_id, when given, must
 * be a string). With tools, their definitions go where the syntax puts them (the system message, or one
 * made for them; the first or the last user message). The messages are rendered with the model's chat
 * template (kiln_chat_render, with the generation prompt) and tokenized with special tokens parsed, BOS
 * added when the vocabulary asks for it. Any other role, a non-text part, or a malformed message is a
 * 400 that names the message's index.
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
    if (!strcmp(role, "tool")) return "tool";
    return NULL;
}

/* An assistant message's tool_calls written after its content (*content is replaced). */
static bool add_tool_calls(const json_t *tc, size_t i, const ks_api_model *model, char **content,
                           ks_api_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(tc)) return ks_api_bad(err, param, "%s must be an array", param);
    size_t n = json_array_size(tc);
    if (n > KS_TOOLS_MAX)
        return ks_api_bad(err, param, "%s has %zu calls; at most %d", param, n, KS_TOOLS_MAX);
    const ks_tool_syntax *sx = ks_tool_syntax_for(model->tmpl);
    char **calls = calloc(n ? n : 1, sizeof *calls);
    if (!calls) return oom(err);
    bool ok = true;
    for (size_t k = 0; ok && k < n; k++) {
        const json_t *c = json_array_get(tc, k), *type = json_object_get(c, "type"),
                     *id = json_object_get(c, "id"), *fn = json_object_get(c, "function");
        const json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        bool bad = false;
        if (!json_is_object(c) || (type && !json_is_string(type)) ||
            (json_is_string(type) && strcmp(json_string_value(type), "function")) ||
            (id && !json_is_string(id)))
            ok = ks_api_bad(err, param, "%s[%zu] must be an object with type 'function' and a string id",
                            param, k);
        else if (!json_is_string(name) || json_string_length(name) == 0 ||
                 json_string_length(name) > KS_TOOLS_MAX_NAME ||
                 strlen(json_string_value(name)) != json_string_length(name))
            ok = ks_api_bad(err, param, "%s[%zu].function.name must be a string of 1 to %d bytes", param, k,
                            KS_TOOLS_MAX_NAME);
        else if (!json_is_string(args))
            ok = ks_api_bad(err, param, "%s[%zu].function.arguments must be a string (JSON)", param, k);
        else if (!(calls[k] =
                       ks_tool_call_format(sx, json_string_value(name), json_string_value(args), &bad)))
            ok = bad ? ks_api_bad(err, param, "%s[%zu].function.arguments is not a JSON object", param, k)
                     : oom(err);
    }
    char *joined = ok ? ks_tool_calls_join(sx, *content, calls, n) : NULL;
    if (ok && !joined) ok = oom(err);
    for (size_t k = 0; k < n; k++)
        free(calls[k]);
    free(calls);
    if (ok) {
        free(*content);
        *content = joined;
    }
    return ok;
}

static bool read_message(const json_t *m, size_t i, const ks_api_model *model, kiln_chat_message *out,
                         ks_api_error *err) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m)) return ks_api_bad(err, param, "messages[%zu] must be an object", i);
    json_t *role = json_object_get(m, "role");
    if (!json_is_string(role)) return ks_api_bad(err, param, "messages[%zu] must have a string 'role'", i);
    out->role = kiln_role(json_string_value(role));
    if (!out->role)
        return ks_api_bad(err, param,
                          "messages[%zu] has role '%.40s'; this server supports system, developer, "
                          "user, assistant and tool",
                          i, json_string_value(role));
    json_t *tc = json_object_get(m, "tool_calls"), *id = json_object_get(m, "tool_call_id");
    bool assistant = !strcmp(out->role, "assistant");
    bool calls = tc && !json_is_null(tc) && !(json_is_array(tc) && json_array_size(tc) == 0);
    if (calls && !assistant)
        return ks_api_bad(err, param, "messages[%zu] has tool_calls but is not the assistant's", i);
    if (id && !json_is_null(id) && !json_is_string(id))
        return ks_api_bad(err, param, "messages[%zu].tool_call_id must be a string", i);
    char *content;
    if (!message_content(json_object_get(m, "content"), i, assistant, &content, err)) return false;
    if (calls && !add_tool_calls(tc, i, model, &content, err)) {
        free(content);
        return false;
    }
    out->content = content;
    return true;
}

/* Where the definitions go: the index of the message whose text they join (the system message, or the
 * first or last user message), or n when a system message must be made for them. */
static size_t defs_target(const kiln_chat_message *msgs, size_t n, ks_tool_place place) {
    size_t t = n;
    for (size_t i = 0; i < n; i++) {
        if (place == KS_TOOLS_IN_SYSTEM && !strcmp(msgs[i].role, "system")) return i;
        if (place != KS_TOOLS_IN_SYSTEM && !strcmp(msgs[i].role, "user")) {
            t = i;
            if (place == KS_TOOLS_IN_FIRST_USER) return i;
        }
    }
    return t;
}

/* The tool definitions put into msgs (which has room for one more message at the front). */
static bool add_defs(const ks_api_tools *tools, kiln_chat_message *msgs, size_t *n, ks_api_error *err) {
    char *defs = ks_api_tools_defs(tools);
    if (!defs) return oom(err);
    size_t t = defs_target(msgs, *n, tools->syntax->place);
    if (t == *n) {
        if (tools->syntax->place != KS_TOOLS_IN_SYSTEM) {
            free(defs);
            return ks_api_bad(err, "messages", "the tool definitions need a user message to go with");
        }
        memmove(msgs + 1, msgs, *n * sizeof *msgs);
        msgs[0] = (kiln_chat_message){"system", defs};
        ++*n;
        return true;
    }
    bool system = tools->syntax->place == KS_TOOLS_IN_SYSTEM;
    const char *first = system ? msgs[t].content : defs, *second = system ? defs : msgs[t].content;
    char *joined = malloc(strlen(first) + strlen(second) + 3);
    if (joined) sprintf(joined, "%s%s%s", first, system ? "\n\n" : "", second);
    free(defs);
    if (!joined) return oom(err);
    free((char *)msgs[t].content);
    msgs[t].content = joined;
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

bool ks_api_chat_text(const json_t *messages, const ks_api_tools *tools, const ks_api_model *model,
                      char **text, size_t *len, ks_api_error *err) {
    *text = NULL;
    *len = 0;
    if (!json_is_array(messages)) return ks_api_bad(err, "messages", "'messages' must be an array");
    size_t n = json_array_size(messages);
    if (n == 0) return ks_api_bad(err, "messages", "'messages' must hold at least one message");
    if (n > KS_API_MAX_MESSAGES)
        return ks_api_bad(err, "messages", "'messages' has %zu messages; at most %d are allowed", n,
                          KS_API_MAX_MESSAGES);
    kiln_chat_message *msgs = calloc(n + 1, sizeof *msgs); /* room for a system message for the tools */
    if (!msgs) return oom(err);
    bool ok = true;
    size_t got = 0;
    for (; ok && got < n; got++)
        ok = read_message(json_array_get(messages, got), got, model, &msgs[got], err);
    if (!ok) got--; /* the failed message holds nothing */
    if (ok && tools && tools->list && tools->choice != KS_TOOL_CHOICE_NONE)
        ok = add_defs(tools, msgs, &got, err);
    if (ok) ok = render(msgs, got, model, text, len, err);
    for (size_t i = 0; i < got; i++)
        free((char *)msgs[i].content);
    free(msgs);
    return ok;
}

bool ks_api_chat_prompt(const json_t *messages, const ks_api_tools *tools, const ks_api_model *model,
                        int32_t **ids, int32_t *n_ids, ks_api_error *err) {
    *ids = NULL;
    *n_ids = 0;
    char *text = NULL;
    size_t len = 0;
    bool ok = ks_api_chat_text(messages, tools, model, &text, &len, err) &&
              ks_api_tokenize_text(model, text, len, true, true, ids, n_ids, err);
    if (ok && *n_ids == 0) ok = ks_api_bad(err, "messages", "the messages render to an empty prompt");
    if (!ok) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
    }
    free(text);
    return ok;
}
