/*
 * tools.c - the tool-call syntaxes of the chat-template families, and the parser that reads calls back
 * out of a model's reply (tools.h).
 *
 * The definitions and calls are written as the models' own templates write them (Qwen2.5's for Hermes,
 * checked byte for byte against Jinja2 in tests/test_server_tools.c; Llama 3.1's JSON form with the tools
 * in the first user message; Mistral v0.3's [AVAILABLE_TOOLS] before the last user message, here inside
 * its [INST]), with JSON serialized as Python's json.dumps does (jansson's default separators ", " and
 * ": ", keys in order).
 *
 * The parser is lenient in what it finds and strict in what it returns: Hermes calls may lack their
 * closing tag at the end of the reply, Llama 3.1's may follow <|python_tag|>, Mistral's may come without
 * [TOOL_CALLS] (a control token, which prints nothing), and arguments may be given
 * as a string holding a JSON object (some fine-tunes do), but every call returned has a name and an
 * object of arguments, and a reply with any malformed call is returned as content, whole.
 */
#include "tools.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const ks_tool_syntax syntaxes[] = {
    {"hermes", "chatml", KS_TOOLS_HERMES, "arguments", "<tool_call>", KS_TOOLS_IN_SYSTEM,
     "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
     "function signatures within <tools></tools> XML tags:\n<tools>\n",
     "\n",
     "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
     "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
     "<args-json-object>}\n</tool_call>",
     0},
    {"llama3-json", "llama3", KS_TOOLS_LLAMA3, "parameters", NULL, KS_TOOLS_IN_FIRST_USER,
     "Given the following functions, please respond with a JSON for a function call with its proper "
     "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
     "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n",
     "\n\n", "\n\n", 4},
    {"mistral", "mistral", KS_TOOLS_MISTRAL, "arguments", "[TOOL_CALLS]", KS_TOOLS_IN_LAST_USER,
     "[AVAILABLE_TOOLS] [", ", ", "][/AVAILABLE_TOOLS]", 0},
};

const ks_tool_syntax *ks_tool_syntax_for(const kiln_chat_template *tmpl) {
    const char *name = kiln_chat_template_name(tmpl);
    for (size_t i = 0; i < sizeof syntaxes / sizeof syntaxes[0]; i++)
        if (strcmp(syntaxes[i].template_name, name) == 0) return &syntaxes[i];
    return &syntaxes[0];
}

void ks_tool_calls_free(ks_tool_calls *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->calls[i].name);
        free(c->calls[i].arguments);
    }
    free(c->calls);
    free(c->content);
    memset(c, 0, sizeof *c);
}

static bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* The first occurrence of needle in text[0..len), or NULL (text may hold NUL bytes). */
static const char *find(const char *text, size_t len, const char *needle) {
    size_t n = strlen(needle);
    return n <= len ? memmem(text, len, needle, n) : NULL;
}

/* The arguments of a call object: an object under key or "arguments", or a string holding one. New
 * reference, or NULL. */
static json_t *call_arguments(json_t *call, const char *key) {
    json_t *a = json_object_get(call, key);
    if (!a) a = json_object_get(call, "arguments");
    if (json_is_object(a)) return json_incref(a);
    if (!json_is_string(a)) return NULL;
    json_t *parsed = json_loadb(json_string_value(a), json_string_length(a), 0, NULL);
    if (json_is_object(parsed)) return parsed;
    json_decref(parsed);
    return NULL;
}

/* Append one call object to out: 1 done, 0 malformed, -1 out of memory. */
static int add_call(const ks_tool_syntax *sx, json_t *call, ks_tool_calls *out) {
    json_t *name = json_object_get(call, "name");
    if (!json_is_object(call) || !json_is_string(name) || json_string_length(name) == 0 ||
        json_string_length(name) > KS_TOOLS_MAX_NAME ||
        strlen(json_string_value(name)) != json_string_length(name))
        return 0;
    json_t *args = call_arguments(call, sx->args_key);
    if (!args) return 0;
    ks_tool_call *grown = realloc(out->calls, (out->n + 1) * sizeof *grown);
    char *text = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    if (grown) out->calls = grown;
    char *n = strdup(json_string_value(name));
    if (!grown || !text || !n) {
        free(text);
        free(n);
        return -1;
    }
    out->calls[out->n++] = (ks_tool_call){n, text};
    return 1;
}

/* Parse text[0..len) (trimmed) as JSON: a call object (array false) or an array of them. */
static int add_json(const ks_tool_syntax *sx, const char *text, size_t len, bool array, ks_tool_calls *out) {
    while (len && is_space(*text))
        text++, len--;
    while (len && is_space(text[len - 1]))
        len--;
    json_error_t jerr;
    json_t *j = json_loadb(text, len, 0, &jerr);
    if (!j) return json_error_code(&jerr) == json_error_out_of_memory ? -1 : 0;
    int r = 1;
    if (!array) {
        r = add_call(sx, j, out);
    } else if (!json_is_array(j) || json_array_size(j) == 0) {
        r = 0;
    } else {
        for (size_t i = 0; r == 1 && i < json_array_size(j); i++)
            r = add_call(sx, json_array_get(j, i), out);
    }
    json_decref(j);
    return r;
}

/* Append text[0..len) to the content buffer *buf (*n bytes). */
static bool put(char **buf, size_t *n, const char *text, size_t len) {
    char *b = realloc(*buf, *n + len + 1);
    if (!b) return false;
    memcpy(b + *n, text, len);
    *n += len;
    b[*n] = '\0';
    *buf = b;
    return true;
}

/* Hermes: every <tool_call> .. </tool_call> is a call (the last may be closed by the end of the reply);
 * Mistral: the text after [TOOL_CALLS] is an array of calls. What lies outside goes to *content. */
static int parse_marked(const ks_tool_syntax *sx, const char *text, size_t len, ks_tool_calls *out,
                        char **content, size_t *n_content) {
    static const char close[] = "</tool_call>";
    size_t pos = 0;
    const char *p;
    while ((p = find(text + pos, len - pos, sx->marker)) != NULL) {
        if (!put(content, n_content, text + pos, (size_t)(p - text) - pos)) return -1;
        size_t start = (size_t)(p - text) + strlen(sx->marker), end = len;
        if (sx->form == KS_TOOLS_HERMES) {
            const char *q = find(text + start, len - start, close);
            if (q) end = (size_t)(q - text);
        }
        int r = add_json(sx, text + start, end - start, sx->form == KS_TOOLS_MISTRAL, out);
        if (r != 1) return r;
        pos = end < len ? end + sizeof close - 1 : len;
    }
    return put(content, n_content, text + pos, len - pos) ? 1 : -1;
}

/* A reply that is a call without a marker: Llama 3.1's whole reply is one call object, after an
 * optional <|python_tag|>; Mistral's [TOOL_CALLS] is a control token that prints nothing, so its calls
 * may arrive as a bare array. */
static int parse_bare(const ks_tool_syntax *sx, const char *text, size_t len, ks_tool_calls *out) {
    static const char tag[] = "<|python_tag|>";
    bool array = sx->form == KS_TOOLS_MISTRAL;
    while (len && is_space(*text))
        text++, len--;
    if (!array && len >= sizeof tag - 1 && memcmp(text, tag, sizeof tag - 1) == 0)
        text += sizeof tag - 1, len -= sizeof tag - 1;
    while (len && is_space(*text))
        text++, len--;
    if (len == 0 || *text != (array ? '[' : '{')) return 0;
    return add_json(sx, text, len, array, out);
}

/* content[0..n) trimmed into out->content (NULL when nothing is left). */
static bool set_content(ks_tool_calls *out, char *content, size_t n) {
    size_t a = 0;
    while (a < n && is_space(content[a]))
        a++;
    while (n > a && is_space(content[n - 1]))
        n--;
    if (n == a) return true;
    out->content = malloc(n - a + 1);
    if (!out->content) return false;
    memcpy(out->content, content + a, n - a);
    out->content[n - a] = '\0';
    out->content_len = n - a;
    return true;
}

int ks_tool_calls_parse(const ks_tool_syntax *sx, const char *text, size_t len, ks_tool_calls *out) {
    memset(out, 0, sizeof *out);
    if (!text) return 0;
    char *content = NULL;
    size_t n_content = 0;
    bool bare = sx->form == KS_TOOLS_LLAMA3 || (sx->form == KS_TOOLS_MISTRAL && !find(text, len, sx->marker));
    int r = bare ? parse_bare(sx, text, len, out) : parse_marked(sx, text, len, out, &content, &n_content);
    if (r == 1 && out->n == 0) r = 0;
    if (r == 1 && content && !set_content(out, content, n_content)) r = -1;
    free(content);
    if (r != 1) ks_tool_calls_free(out);
    return r;
}

size_t ks_tool_calls_releasable(const ks_tool_syntax *sx, const char *text, size_t len) {
    size_t i = 0; /* a bare call is the whole reply: hold it while it may be one */
    while (sx->form != KS_TOOLS_HERMES && i < len && is_space(text[i]))
        i++;
    if (sx->form == KS_TOOLS_LLAMA3) return i == len || text[i] == '{' || text[i] == '<' ? 0 : len;
    if (sx->form == KS_TOOLS_MISTRAL && (i == len || text[i] == '[')) return 0;
    const char *p = find(text, len, sx->marker);
    if (p) return (size_t)(p - text);
    size_t m = strlen(sx->marker); /* hold a tail that may be the marker's beginning */
    for (size_t k = m - 1 < len ? m - 1 : len; k > 0; k--)
        if (memcmp(text + len - k, sx->marker, k) == 0) return len - k;
    return len;
}

char *ks_tool_call_format(const ks_tool_syntax *sx, const char *name, const char *args_json, bool *bad) {
    json_t *args = json_loads(args_json, 0, NULL);
    if (!json_is_object(args)) {
        json_decref(args);
        *bad = true;
        return NULL;
    }
    json_t *call = json_object();
    char *text = NULL;
    if (call && !json_object_set_new(call, "name", json_string(name)) &&
        !json_object_set(call, sx->args_key, args))
        text = json_dumps(call, 0);
    json_decref(call);
    json_decref(args);
    return text;
}

char *ks_tool_calls_join(const ks_tool_syntax *sx, const char *content, char *const *calls, size_t n) {
    char *buf = NULL;
    size_t len = 0;
    bool ok = put(&buf, &len, content, strlen(content));
    if (ok && n && sx->form == KS_TOOLS_MISTRAL) ok = put(&buf, &len, "[TOOL_CALLS] [", 14);
    for (size_t i = 0; ok && i < n; i++) {
        bool first = i == 0 && !*content;
        if (sx->form == KS_TOOLS_HERMES)
            ok = put(&buf, &len, first ? "<tool_call>\n" : "\n<tool_call>\n", first ? 12 : 13);
        else if (sx->form == KS_TOOLS_MISTRAL)
            ok = put(&buf, &len, ", ", i ? 2 : 0);
        else if (!first)
            ok = put(&buf, &len, "\n", 1);
        ok = ok && put(&buf, &len, calls[i], strlen(calls[i]));
        if (ok && sx->form == KS_TOOLS_HERMES) ok = put(&buf, &len, "\n</tool_call>", 13);
    }
    if (ok && n && sx->form == KS_TOOLS_MISTRAL) ok = put(&buf, &len, "]", 1);
    if (!ok) free(buf);
    return ok ? buf : NULL;
}
