/*
 * tools.h - OpenAI function tools in `kiln serve` (docs/server.md, "Tool calls"): the call syntax of each
 * chat-template family, writing tool definitions and calls into the prompt in that syntax, and parsing
 * the calls back out of a model's reply.
 *
 * A syntax belongs to a chat template (kiln_chat_template_name): "chatml" models (Qwen2.5, Hermes) use
 * the Hermes form, <tool_call>{"name": ..., "arguments": {...}}</tool_call>; "llama3" models Llama 3.1's
 * JSON form, a reply that is one {"name": ..., "parameters": {...}} object; "mistral" models
 * [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]. Templates without a tool format of their own
 * (phi3, plain) get the Hermes form. How a tool's result is rendered is the template's (role "tool" in
 * kiln_chat_render).
 *
 * tools.c holds the syntaxes and the parser; it trusts nothing in the text it parses (a model's reply):
 * malformed calls leave the reply as plain content and never fail the request (fuzz/fuzz_tool_calls.c).
 * api_tools.c reads the request's tools and tool_choice and builds the grammar that forces a call.
 */
#ifndef KILN_SERVER_TOOLS_H
#define KILN_SERVER_TOOLS_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>

#define KS_TOOLS_MAX 128        /* tools per request */
#define KS_TOOLS_MAX_PARALLEL 4 /* calls a grammar allows in one reply when parallel_tool_calls is on */
#define KS_TOOLS_MAX_NAME 64    /* bytes of a function name, as OpenAI ([A-Za-z0-9_-]{1,64}) */

typedef enum ks_tool_form {
    KS_TOOLS_HERMES = 0,  /* <tool_call>\n{"name": N, "arguments": A}\n</tool_call>, one per call */
    KS_TOOLS_LLAMA3 = 1,  /* the whole reply is {"name": N, "parameters": A} (after <|python_tag|>) */
    KS_TOOLS_MISTRAL = 2, /* [TOOL_CALLS] [{"name": N, "arguments": A}, ...], or the array alone */
} ks_tool_form;

/* Where the tool definitions go in the prompt. */
typedef enum ks_tool_place {
    KS_TOOLS_IN_SYSTEM = 0,     /* appended to the system message ("\n\n" between), or a system message */
    KS_TOOLS_IN_FIRST_USER = 1, /* before the first user message's text */
    KS_TOOLS_IN_LAST_USER = 2,  /* before the last user message's text */
} ks_tool_place;

typedef struct ks_tool_syntax {
    const char *name;          /* "hermes", "llama3-json", "mistral" */
    const char *template_name; /* the chat template family that uses it */
    ks_tool_form form;
    const char *args_key;  /* the key of a call's arguments: "arguments" or "parameters" */
    const char *marker;    /* the text that starts the calls in a reply, or NULL (LLAMA3: a '{') */
    ks_tool_place place;   /* where the definitions go */
    const char *defs_open; /* definitions: defs_open + def (defs_sep def)* + defs_close */
    const char *defs_sep;
    const char *defs_close;
    size_t defs_indent; /* each definition as JSON indented by this many spaces, 0: on one line */
} ks_tool_syntax;

/* The syntax a chat template's models use (Hermes for templates without their own). Never NULL. */
const ks_tool_syntax *ks_tool_syntax_for(const kiln_chat_template *tmpl);

/* One call in a reply: name and arguments (a JSON object's compact text), both malloc'd. */
typedef struct ks_tool_call {
    char *name;
    char *arguments;
} ks_tool_call;

typedef struct ks_tool_calls {
    ks_tool_call *calls; /* (n) */
    size_t n;
    char *content; /* (content_len) the reply's text outside the calls, trimmed (it may hold NUL bytes, and
                    * is NUL-terminated); NULL when nothing is left */
    size_t content_len;
} ks_tool_calls;

/* Parse the calls in text[0..len) (any bytes). Returns 1 with *out filled when the reply holds at least
 * one call and every call in it is well formed (an object with a string "name" and an object of
 * arguments under args_key or "arguments"; the arguments may also be a string holding such an object);
 * 0 when it holds none or a malformed one (the reply is then plain content; *out is empty); -1 when out
 * of memory. */
int ks_tool_calls_parse(const ks_tool_syntax *sx, const char *text, size_t len, ks_tool_calls *out);
void ks_tool_calls_free(ks_tool_calls *c);

/* How many leading bytes of a reply so far may be streamed as content: the text before anything that
 * starts, or may be starting, a call. The rest waits for the end of the reply. */
size_t ks_tool_calls_releasable(const ks_tool_syntax *sx, const char *text, size_t len);

/* One call as its syntax writes it, {"name": "N", "<args_key>": ARGS} with ARGS = args_json (a JSON
 * object's text) re-serialized as Python's json.dumps does (what the templates' tojson writes), malloc'd.
 * NULL with *bad set when args_json is not a JSON object, NULL alone when out of memory. */
char *ks_tool_call_format(const ks_tool_syntax *sx, const char *name, const char *args_json, bool *bad);
/* An assistant message's text: its content (may be empty) and its calls (made by ks_tool_call_format)
 * wrapped and joined as the syntax does it. NULL when out of memory. */
char *ks_tool_calls_join(const ks_tool_syntax *sx, const char *content, char *const *calls, size_t n);

#endif
