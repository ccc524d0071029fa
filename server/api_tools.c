/*
 * api_tools.c - the request fields of function calling: OpenAI's "tools" (type "function", with name,
 * description, parameters as a JSON schema, strict), "tool_choice" ("none", "auto", "required" or
 * {"type": "function", "function": {"name": ...}}) and "parallel_tool_calls", checked as OpenAI checks
 * them, each problem a 400 naming the field.
 *
 * What tool_choice does (docs/server.md):
 *   none      the definitions are left out of the prompt and the reply is not parsed for calls;
 *   auto      the definitions are rendered, generation is free, and the reply is parsed leniently: a
 *             well-formed call becomes tool_calls, anything else stays content;
 *   required  generation is constrained by a grammar whose sentences are calls, in the model's syntax
 *             (tools.h), of any of the tools with arguments valid under its parameters schema (one call,
 *             or up to KS_TOOLS_MAX_PARALLEL with parallel_tool_calls);
 *   named     the same grammar with only that function.
 * The grammar is the JSON schema of a call object, {"name": {"const": N}, <args_key>: parameters},
 * compiled by the library's converter (kiln_json_schema_to_gbnf), its root renamed "call" and wrapped in
 * the syntax's markers. A forced call cannot be combined with grammar, json_schema or a JSON
 * response_format (400). The legacy "functions" and "function_call" fields stay refused by name.
 */
#include "api.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool oom(ks_api_error *err) {
    return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
}

static bool valid_name(const char *s, size_t len) {
    if (len == 0 || len > KS_TOOLS_MAX_NAME || strlen(s) != len) return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

static const char *tool_name(const json_t *tool) {
    return json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
}

static bool check_tool(const json_t *tools, size_t i, ks_api_error *err) {
    const json_t *t = json_array_get(tools, i), *type = json_object_get(t, "type"),
                 *fn = json_object_get(t, "function");
    if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
        return ks_api_bad(err, "tools", "tools[%zu] must be an object with type 'function'", i);
    if (!json_is_object(fn)) return ks_api_bad(err, "tools", "tools[%zu].function must be an object", i);
    const json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description"),
                 *params = json_object_get(fn, "parameters"), *strict = json_object_get(fn, "strict");
    if (!json_is_string(name) || !valid_name(json_string_value(name), json_string_length(name)))
        return ks_api_bad(err, "tools",
                          "tools[%zu].function.name must be 1 to %d letters, digits, '_' or '-'", i,
                          KS_TOOLS_MAX_NAME);
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return ks_api_bad(err, "tools", "tools[%zu].function.description must be a string", i);
    if (params && !json_is_null(params) && !json_is_object(params))
        return ks_api_bad(err, "tools", "tools[%zu].function.parameters must be a JSON schema object", i);
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return ks_api_bad(err, "tools", "tools[%zu].function.strict must be a boolean", i);
    for (size_t k = 0; k < i; k++)
        if (strcmp(tool_name(json_array_get(tools, k)), json_string_value(name)) == 0)
            return ks_api_bad(err, "tools", "tools[%zu] and tools[%zu] are both named '%s'", k, i,
                              json_string_value(name));
    return true;
}

static bool parse_choice(const json_t *root, ks_api_tools *t, ks_api_error *err) {
    const json_t *c = json_object_get(root, "tool_choice");
    t->choice = t->list ? KS_TOOL_CHOICE_AUTO : KS_TOOL_CHOICE_NONE;
    if (!c || json_is_null(c)) return true;
    if (json_is_string(c)) {
        const char *s = json_string_value(c);
        if (!strcmp(s, "none"))
            t->choice = KS_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "auto"))
            t->choice = t->list ? KS_TOOL_CHOICE_AUTO : KS_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "required"))
            t->choice = KS_TOOL_CHOICE_REQUIRED;
        else
            return ks_api_bad(err, "tool_choice",
                              "'tool_choice' is '%.40s'; use 'none', 'auto', 'required' or "
                              "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                              s);
    } else {
        const json_t *type = json_object_get(c, "type"), *fn = json_object_get(c, "function");
        const json_t *name = json_object_get(fn, "name");
        if (!json_is_object(c) || !json_is_string(type) || strcmp(json_string_value(type), "function") ||
            !json_is_string(name))
            return ks_api_bad(err, "tool_choice",
                              "'tool_choice' must be a string or {\"type\": \"function\", \"function\": "
                              "{\"name\": ...}}");
        t->choice = KS_TOOL_CHOICE_NAMED;
        t->forced = json_string_value(name);
    }
    if (t->choice >= KS_TOOL_CHOICE_REQUIRED && !t->list)
        return ks_api_bad(err, "tool_choice", "'tool_choice' asks for a tool call but 'tools' is empty");
    for (size_t i = 0; t->forced && i < json_array_size(t->list); i++)
        if (!strcmp(tool_name(json_array_get(t->list, i)), t->forced)) return true;
    if (t->forced)
        return ks_api_bad(err, "tool_choice",
                          "'tool_choice' names the function '%.64s', which is not in 'tools'", t->forced);
    return true;
}

/* The schema of one call object of tool `tool`, as a new JSON value (NULL when out of memory). */
static json_t *call_schema(const ks_tool_syntax *sx, const json_t *tool) {
    const json_t *params = json_object_get(json_object_get(tool, "function"), "parameters");
    json_t *p = json_is_object(params) ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
    if (p) json_object_del(p, "$defs"), json_object_del(p, "definitions"); /* hoisted to the root */
    return json_pack("{s:s, s:{s:{s:s}, s:o}, s:[s, s], s:b}", "type", "object", "properties", "name",
                     "const", tool_name(tool), sx->args_key, p, "required", "name", sx->args_key,
                     "additionalProperties", 0);
}

/* The definitions of a tool's parameters ($defs or definitions) moved to the call schema's root, where
 * its "#/$defs/..." references resolve; false (with err) when two tools define one name differently. */
static bool hoist_defs(json_t *root, const json_t *params, ks_api_error *err) {
    static const char *const keys[2] = {"$defs", "definitions"};
    for (int k = 0; k < 2; k++) {
        const json_t *defs = json_object_get(params, keys[k]);
        if (!json_is_object(defs)) continue;
        json_t *into = json_object_get(root, keys[k]);
        if (!into && json_object_set_new(root, keys[k], into = json_object())) return oom(err);
        const char *name;
        json_t *def;
        json_object_foreach((json_t *)defs, name, def) {
            json_t *had = json_object_get(into, name);
            if (had && !json_equal(had, def))
                return ks_api_bad(err, "tools", "two tools define '%s/%.64s' differently", keys[k], name);
            if (json_object_set(into, name, def)) return oom(err);
        }
    }
    return true;
}

/* Whether a schema holds {"$ref": "#"} anywhere (in the call schema it would mean the call itself). */
static bool refers_to_root(const json_t *params) {
    char *text = json_dumps(params, JSON_COMPACT | JSON_ENCODE_ANY);
    bool yes = text && strstr(text, "\"$ref\":\"#\"");
    free(text);
    return yes;
}

/* The JSON schema of the calls a forced choice allows: one tool's call object, or anyOf of them, with
 * the tools' definitions at its root. NULL with err filled on failure. */
static json_t *calls_schema(const ks_api_tools *t, ks_api_error *err) {
    json_t *any = json_array(), *root = json_object();
    bool ok = any && root;
    for (size_t i = 0; ok && i < json_array_size(t->list); i++) {
        const json_t *tool = json_array_get(t->list, i);
        if (t->forced && strcmp(tool_name(tool), t->forced)) continue;
        const json_t *params = json_object_get(json_object_get(tool, "function"), "parameters");
        if (refers_to_root(params)) {
            json_decref(any), json_decref(root);
            ks_api_bad(err, "tools",
                       "tools[%zu].function.parameters refers to itself ($ref '#'), which a forced call "
                       "cannot enforce",
                       i);
            return NULL;
        }
        if (!hoist_defs(root, params, err)) {
            json_decref(any), json_decref(root);
            return NULL;
        }
        ok = !json_array_append_new(any, call_schema(t->syntax, tool));
    }
    if (ok && json_array_size(any) == 1)
        ok = !json_object_update(root, json_array_get(any, 0));
    else if (ok)
        ok = !json_object_set(root, "anyOf", any);
    json_decref(any);
    if (!ok) {
        json_decref(root);
        oom(err);
        return NULL;
    }
    return root;
}

/* The GBNF root that wraps the call rule in the syntax's markers. */
static const char *wrapper(const ks_api_tools *t) {
    bool many = t->parallel && !t->forced;
    switch (t->syntax->form) {
    case KS_TOOLS_LLAMA3: return "root ::= call\n";
    case KS_TOOLS_MISTRAL: /* [TOOL_CALLS] is a control token, which no grammar can produce */
        return many ? "root ::= \"[\" call (\", \" call){0,3} \"]\"\n" : "root ::= \"[\" call \"]\"\n";
    case KS_TOOLS_HERMES: break;
    }
    return many ? "root ::= tool-call (\"\\n\" tool-call){0,3}\n"
                  "tool-call ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n"
                : "root ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n";
}

static bool forced_grammar(const ks_api_tools *t, ks_api_request *r, ks_api_error *err) {
    _Static_assert(KS_TOOLS_MAX_PARALLEL == 4, "the wrappers allow 1 + {0,3} calls");
    json_t *schema = calls_schema(t, err);
    if (!schema) return false;
    char *text = json_dumps(schema, JSON_COMPACT);
    json_decref(schema);
    if (!text) return oom(err);
    char *gbnf = NULL;
    size_t len = 0;
    kiln_status st = kiln_json_schema_to_gbnf(text, strlen(text), &gbnf, &len);
    free(text);
    if (st == KILN_E_NOMEM) return oom(err);
    if (st != KILN_OK)
        return ks_api_bad(err, "tools",
                          "the parameters of the tools that tool_choice allows cannot be "
                          "enforced: %s",
                          kiln_last_error());
    /* The converter writes its root once, as the line "root ::= NAME"; "call" names no other rule. */
    char *root = !strncmp(gbnf, "root ::= ", 9) ? gbnf : strstr(gbnf, "\nroot ::= ");
    if (root && root != gbnf) root++;
    const char *wrap = wrapper(t);
    r->grammar = root ? malloc(len + strlen(wrap) + 1) : NULL;
    if (r->grammar) {
        memcpy(root, "call", 4);
        memcpy(r->grammar, gbnf, len);
        strcpy(r->grammar + len, wrap);
    }
    kiln_free(gbnf);
    if (!root) return ks_api_fail(err, 500, "server_error", NULL, NULL, "the schema compiler wrote no root");
    if (!r->grammar) return oom(err);
    kiln_grammar *g = NULL;
    st = kiln_grammar_parse(r->grammar, strlen(r->grammar), &g);
    kiln_grammar_destroy(g);
    if (st == KILN_E_NOMEM) return oom(err);
    if (st != KILN_OK)
        return ks_api_bad(err, "tools", "the tools' call grammar cannot be used: %s", kiln_last_error());
    return true;
}

bool ks_api_parse_tools(const json_t *root, const ks_api_model *model, ks_api_tools *t, ks_api_request *r,
                        ks_api_error *err) {
    memset(t, 0, sizeof *t);
    t->syntax = ks_tool_syntax_for(model->tmpl);
    t->parallel = true;
    const json_t *list = json_object_get(root, "tools"), *par = json_object_get(root, "parallel_tool_calls");
    if (list && !json_is_null(list)) {
        if (!json_is_array(list)) return ks_api_bad(err, "tools", "'tools' must be an array");
        if (json_array_size(list) > KS_TOOLS_MAX)
            return ks_api_bad(err, "tools", "'tools' has %zu tools; at most %d are allowed",
                              json_array_size(list), KS_TOOLS_MAX);
        for (size_t i = 0; i < json_array_size(list); i++)
            if (!check_tool(list, i, err)) return false;
        if (json_array_size(list)) t->list = list;
    }
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par))
            return ks_api_bad(err, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        t->parallel = json_is_true(par);
    }
    if (!parse_choice(root, t, err)) return false;
    if (t->choice == KS_TOOL_CHOICE_NONE) return true;
    r->tool_syntax = t->syntax;
    if (t->choice == KS_TOOL_CHOICE_AUTO) return true;
    if (r->grammar)
        return ks_api_bad(err, "tool_choice",
                          "a forced tool call cannot be combined with 'grammar', 'json_schema' or a JSON "
                          "'response_format'");
    return forced_grammar(t, r, err);
}

char *ks_api_tools_defs(const ks_api_tools *t) {
    const ks_tool_syntax *sx = t->syntax;
    size_t flags = sx->defs_indent ? JSON_INDENT(sx->defs_indent) : 0, len = 0;
    char *out = strdup(sx->defs_open);
    for (size_t i = 0; out && i < json_array_size(t->list); i++) {
        char *def = json_dumps(json_array_get(t->list, i), flags);
        const char *sep = i ? sx->defs_sep : "";
        len = strlen(out);
        char *grown = def ? realloc(out, len + strlen(sep) + strlen(def) + 1) : NULL;
        if (grown) sprintf(grown + len, "%s%s", sep, def);
        free(def);
        if (!grown) free(out);
        out = grown;
    }
    char *done = out ? realloc(out, strlen(out) + strlen(sx->defs_close) + 1) : NULL;
    if (done)
        strcat(done, sx->defs_close);
    else
        free(out);
    return done;
}
