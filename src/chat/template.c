/*
 * template.c - chat templates: the known conversation formats, recognizing them from a model's
 * tokenizer.chat_template, and rendering a conversation to the text a model expects.
 *
 * Kiln does not run Jinja. A template is recognized by the markers its text must contain (as llama.cpp's
 * llm_chat_detect_template does), checked in this order:
 *   chatml   "<|im_start|>"                              (Qwen, many fine-tunes)
 *   llama3   "<|start_header_id|>" and "<|end_header_id|>"
 *   phi3     "<|assistant|>" and "<|end|>"
 *   mistral  "[INST]"
 * and rendered by a fixed description of the format. "plain" is Kiln's own fallback for models that carry
 * no template (such as the bundled stories260K): "User: ...\nAssistant:" lines.
 *
 * A "tool" message (a function's result, sent back after the assistant called it) is rendered as each
 * model's template renders it: ChatML (Qwen2.5) wraps it in <tool_response> tags inside a user turn, and
 * consecutive tool messages share that turn; Llama 3.1 gives it an "ipython" turn; Mistral wraps it in
 * [TOOL_RESULTS]; Phi-3 and plain, which have no tool role, render it as a user turn. The tool call
 * itself is the assistant's content, written in the model's call syntax by the caller (server/tools.c).
 *
 * Rendering never includes BOS (kiln_tokenize adds it when the vocabulary asks) and never trims content.
 * It is prefix-stable: the rendering of a conversation ending in a user message with the generation prompt
 * is a prefix of the rendering with the assistant's reply appended, so a chat loop can feed only the text
 * that is new, keeping its KV cache.
 */
#include "core/core.h"

#include <string.h>

struct kiln_chat_template {
    const char *name;
    const char *markers[2];  /* every non-NULL marker must occur in the template text */
    const char *system_open; /* system message: open + content + close */
    const char *system_close;
    const char *user_open; /* user message */
    const char *user_close;
    const char *assistant_open; /* the generation prompt; an assistant message is open + content + close */
    const char *assistant_close;
    const char *end_of_turn;   /* the token that ends a reply, or NULL (EOS) */
    bool system_in_first_user; /* Mistral: the system text leads the first user message, then "\n\n" */
    const char *tool_open;     /* a tool message: tool_open + item_open + content + item_close + tool_close */
    const char *tool_item_open;
    const char *tool_item_close;
    const char *tool_close;
    bool tool_merge; /* consecutive tool messages share one tool_open .. tool_close */
};

static const kiln_chat_template templates[] = {
    {"chatml",
     {"<|im_start|>", NULL},
     "<|im_start|>system\n",
     "<|im_end|>\n",
     "<|im_start|>user\n",
     "<|im_end|>\n",
     "<|im_start|>assistant\n",
     "<|im_end|>\n",
     "<|im_end|>",
     false,
     "<|im_start|>user",
     "\n<tool_response>\n",
     "\n</tool_response>",
     "<|im_end|>\n",
     true},
    {"llama3",
     {"<|start_header_id|>", "<|end_header_id|>"},
     "<|start_header_id|>system<|end_header_id|>\n\n",
     "<|eot_id|>",
     "<|start_header_id|>user<|end_header_id|>\n\n",
     "<|eot_id|>",
     "<|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|eot_id|>",
     "<|eot_id|>",
     false,
     "<|start_header_id|>ipython<|end_header_id|>\n\n",
     "",
     "",
     "<|eot_id|>",
     false},
    {"phi3",
     {"<|assistant|>", "<|end|>"},
     "<|system|>\n",
     "<|end|>\n",
     "<|user|>\n",
     "<|end|>\n",
     "<|assistant|>\n",
     "<|end|>\n",
     "<|end|>",
     false,
     "<|user|>\n",
     "",
     "",
     "<|end|>\n",
     false},
    {"mistral",
     {"[INST]", NULL},
     "",
     "\n\n",
     "[INST] ",
     " [/INST]",
     "",
     "</s>",
     NULL,
     true,
     "[TOOL_RESULTS] ",
     "",
     "",
     "[/TOOL_RESULTS]",
     false},
    {"plain",
     {NULL, NULL},
     "",
     "\n\n",
     "User: ",
     "\n",
     "Assistant:",
     "\n",
     NULL,
     false,
     "Tool: ",
     "",
     "",
     "\n",
     false},
};

const kiln_chat_template *kiln_chat_template_by_name(const char *name) {
    for (size_t i = 0; name && i < KILN__ARRAY_LEN(templates); i++)
        if (strcmp(templates[i].name, name) == 0) return &templates[i];
    return NULL;
}

const char *kiln_chat_template_names(void) {
    return "chatml, llama3, phi3, mistral, plain";
}

const char *kiln_chat_template_name(const kiln_chat_template *t) {
    return t ? t->name : "";
}

const char *kiln_chat_template_end_of_turn(const kiln_chat_template *t) {
    return t ? t->end_of_turn : NULL;
}

kiln_status kiln_chat_template_recognize(const char *text, size_t len, const kiln_chat_template **out) {
    if (!out || (!text && len > 0))
        return kiln__error(KILN_E_INVALID_ARG, "kiln_chat_template_recognize: NULL argument");
    *out = NULL;
    for (size_t i = 0; i < KILN__ARRAY_LEN(templates); i++) {
        const kiln_chat_template *t = &templates[i];
        bool all = t->markers[0] != NULL;
        for (size_t m = 0; m < 2 && all && t->markers[m]; m++)
            all = memmem(text, len, t->markers[m], strlen(t->markers[m])) != NULL;
        if (all) {
            *out = t;
            return KILN_OK;
        }
    }
    return kiln__error(
        KILN_E_UNSUPPORTED,
        "the chat template (%zu bytes, starting '%.*s') is not one Kiln recognizes; choose one "
        "with --chat-template (%s)",
        len, (int)KILN__MIN(len, 40), text ? text : "", kiln_chat_template_names());
}

kiln_status kiln_chat_template_detect(const kiln_gguf *gguf, const kiln_chat_template **out) {
    if (!gguf || !out) return kiln__error(KILN_E_INVALID_ARG, "kiln_chat_template_detect: NULL argument");
    *out = NULL;
    kiln_str s;
    kiln_status st = kiln_gguf_get_str(gguf, "tokenizer.chat_template", &s);
    if (st == KILN_E_NOT_FOUND)
        return kiln__error(st, "the model has no chat template (tokenizer.chat_template)");
    if (st != KILN_OK) return st;
    return kiln_chat_template_recognize(s.data, s.len, out);
}

/* Appends stay within cap and are always counted, as kiln_detokenize does. */
typedef struct text_out {
    char *buf;
    size_t cap, len;
} text_out;

static void put(text_out *o, const char *s) {
    size_t n = strlen(s);
    if (o->len < o->cap) memcpy(o->buf + o->len, s, KILN__MIN(n, o->cap - o->len));
    o->len += n;
}

static kiln_status render_message(const kiln_chat_template *t, const kiln_chat_message *msgs, size_t n,
                                  size_t i, const char **pending_system, text_out *o) {
    const kiln_chat_message *m = &msgs[i];
    if (!m->role || !m->content)
        return kiln__error(KILN_E_INVALID_ARG, "chat message %zu: NULL role or content", i);
    if (strcmp(m->role, "system") == 0) {
        if (i != 0)
            return kiln__error(KILN_E_INVALID_ARG, "chat message %zu: a system message must come first", i);
        if (t->system_in_first_user) {
            *pending_system = m->content;
            return KILN_OK;
        }
        put(o, t->system_open), put(o, m->content), put(o, t->system_close);
    } else if (strcmp(m->role, "user") == 0) {
        put(o, t->user_open);
        if (*pending_system) put(o, *pending_system), put(o, t->system_close);
        *pending_system = NULL;
        put(o, m->content), put(o, t->user_close);
    } else if (strcmp(m->role, "assistant") == 0) {
        put(o, t->assistant_open), put(o, m->content), put(o, t->assistant_close);
    } else if (strcmp(m->role, "tool") == 0) {
        bool after_tool = i > 0 && msgs[i - 1].role && strcmp(msgs[i - 1].role, "tool") == 0;
        bool before_tool = i + 1 < n && msgs[i + 1].role && strcmp(msgs[i + 1].role, "tool") == 0;
        if (!(t->tool_merge && after_tool)) put(o, t->tool_open);
        put(o, t->tool_item_open), put(o, m->content), put(o, t->tool_item_close);
        if (!(t->tool_merge && before_tool)) put(o, t->tool_close);
    } else {
        return kiln__error(KILN_E_INVALID_ARG,
                           "chat message %zu: unknown role '%.32s' (system, user, assistant, tool)", i,
                           m->role);
    }
    return KILN_OK;
}

kiln_status kiln_chat_render(const kiln_chat_template *t, const kiln_chat_message *msgs, size_t n,
                             bool add_generation_prompt, char *buf, size_t cap, size_t *n_out) {
    if (!t || !n_out || (!msgs && n > 0) || (!buf && cap > 0))
        return kiln__error(KILN_E_INVALID_ARG, "kiln_chat_render: NULL argument");
    *n_out = 0;
    text_out o = {buf, cap > 0 ? cap - 1 : 0, 0};
    const char *pending_system = NULL;
    for (size_t i = 0; i < n; i++) {
        kiln_status st = render_message(t, msgs, n, i, &pending_system, &o);
        if (st != KILN_OK) return st;
    }
    if (add_generation_prompt) put(&o, t->assistant_open);
    *n_out = o.len;
    if (cap > 0) buf[KILN__MIN(o.len, cap - 1)] = '\0';
    if (o.len >= cap)
        return kiln__error(KILN_E_RANGE,
                           "kiln_chat_render: the text needs %zu bytes plus a terminator but the "
                           "buffer holds %zu",
                           o.len, cap);
    return KILN_OK;
}
