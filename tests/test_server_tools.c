/*
 * test_server_tools.c - function calling in `kiln serve` without a network (server/tools.h, api_tools.c):
 * the prompt a tool conversation renders to, the parser of each call syntax (well-formed replies, and
 * malformed ones that must come back as plain content), what may be streamed before a call, the grammar
 * that forces a call, the request fields' refusals by name, and the responses and stream chunks.
 *
 * The prompt reference is Qwen2.5-Instruct's own template rendered by Jinja2
 * (tests/data/tools/render_references.py); the grammar is checked by feeding it texts a validator would
 * accept or refuse under the tools' schemas.
 */
#include "api.h"
#include "harness.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static kiln_gguf *gguf;
static kiln_vocab *vocab;
static ks_api_model model;

static void setup(void) {
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &gguf));
    CHECK_OK(kiln_vocab_create(gguf, &vocab));
    model.id = "stories260K.gguf";
    model.vocab = vocab;
    model.tmpl = kiln_chat_template_by_name("chatml");
    model.eot_token = -1;
    model.n_ctx = 2048;
    model.n_ctx_train = 2048;
    model.max_tokens_cap = 200;
    model.default_max_tokens = 200;
    model.created = 1700000000;
}

static bool parse(const char *body, ks_api_request *r, ks_api_error *err) {
    return ks_api_parse(KS_API_CHAT, body, strlen(body), &model, r, err);
}

static void renders_a_tool_conversation_as_qwen25s_template_does(void) {
    char *body = harness_read_file(harness_data_path("tools/conversation.json"), NULL);
    char *expected = harness_read_file(harness_data_path("tools/qwen2.5.txt"), NULL);
    json_t *root = body ? json_loads(body, 0, NULL) : NULL;
    CHECK(root && expected);
    if (!root || !expected) goto done;
    ks_api_request r = {0};
    ks_api_tools tools;
    ks_api_error err;
    CHECK(ks_api_parse_tools(root, &model, &tools, &r, &err));
    CHECK(tools.choice == KS_TOOL_CHOICE_AUTO && r.tool_syntax && r.grammar == NULL);
    char *text = NULL;
    size_t len = 0;
    CHECK(ks_api_chat_text(json_object_get(root, "messages"), &tools, &model, &text, &len, &err));
    if (text) CHECK_STR(text, expected);
    free(text);
    /* tool_choice none leaves the definitions out, and the reply unparsed */
    json_object_set_new(root, "tool_choice", json_string("none"));
    CHECK(ks_api_parse_tools(root, &model, &tools, &r, &err));
    CHECK(tools.choice == KS_TOOL_CHOICE_NONE);
    CHECK(ks_api_chat_text(json_object_get(root, "messages"), &tools, &model, &text, &len, &err));
    CHECK(text && !strstr(text, "<tools>") && strstr(text, "<tool_response>\n14:05\n</tool_response>"));
    free(text);
done:
    json_decref(root);
    free(body);
    free(expected);
}

/* Parse text with the syntax of template tmpl; returns the result code. */
static int parse_reply(const char *tmpl, const char *text, ks_tool_calls *out) {
    return ks_tool_calls_parse(ks_tool_syntax_for(kiln_chat_template_by_name(tmpl)), text, strlen(text), out);
}

static void parses_hermes_calls_and_keeps_the_text_around_them(void) {
    ks_tool_calls c;
    CHECK_EQ_INT(
        parse_reply("chatml",
                    "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                    "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_time\",\"arguments\":"
                    "\"{\\\"zone\\\": \\\"UTC\\\"}\"}\n</tool_call>",
                    &c),
        1);
    CHECK_EQ_INT(c.n, 2);
    if (c.n == 2) {
        CHECK_STR(c.calls[0].name, "get_weather");
        CHECK_STR(c.calls[0].arguments, "{\"city\":\"Paris\"}");
        CHECK_STR(c.calls[1].name, "get_time");
        CHECK_STR(c.calls[1].arguments, "{\"zone\":\"UTC\"}"); /* arguments given as a string */
    }
    CHECK(c.content && strcmp(c.content, "Let me look.") == 0);
    ks_tool_calls_free(&c);
    /* the last call may end with the reply; a reply of calls only has no content */
    CHECK_EQ_INT(parse_reply("chatml", "<tool_call>{\"name\":\"f\",\"arguments\":{}}", &c), 1);
    CHECK(c.n == 1 && c.content == NULL);
    ks_tool_calls_free(&c);
}

static void malformed_calls_leave_the_reply_as_content(void) {
    const char *bad[] = {
        "no call here",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>", /* unbalanced JSON */
        "<tool_call>{\"arguments\": {}}</tool_call>",                             /* no name */
        "<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call>",                /* name not a string */
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", /* arguments not an object */
        "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>",
        "<tool_call>{\"name\": \"f\"}</tool_call>",                      /* no arguments */
        "<tool_call>[{\"name\": \"f\", \"arguments\": {}}]</tool_call>", /* an array */
        "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call><tool_call>oops</tool_call>", /* one bad */
        "<tool_call>",
        "<tool_call></tool_call>",
        "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\\u0000g\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {}} trailing</tool_call>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ks_tool_calls c;
        if (parse_reply("chatml", bad[i], &c) != 0)
            harness_fail(__FILE__, __LINE__, "case %zu parsed: %s", i, bad[i]);
        CHECK(c.n == 0 && c.calls == NULL && c.content == NULL);
    }
    ks_tool_calls c;
    CHECK_EQ_INT(ks_tool_calls_parse(ks_tool_syntax_for(NULL), "<tool_call>\0{}", 14, &c), 0); /* NUL bytes */
    CHECK_EQ_INT(ks_tool_calls_parse(ks_tool_syntax_for(NULL), NULL, 0, &c), 0);
}

static void parses_llama31_json_and_mistral_calls(void) {
    ks_tool_calls c;
    CHECK_EQ_INT(
        parse_reply("llama3", " <|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": [1, 2]}}", &c), 1);
    CHECK(c.n == 1 && c.content == NULL);
    if (c.n == 1) CHECK_STR(c.calls[0].arguments, "{\"x\":[1,2]}");
    ks_tool_calls_free(&c);
    CHECK_EQ_INT(parse_reply("llama3", "The answer is {\"name\": \"f\", \"parameters\": {}}", &c), 0);
    CHECK_EQ_INT(parse_reply("llama3", "{\"name\": \"f\", \"parameters\": {}} and more", &c), 0);
    CHECK_EQ_INT(parse_reply("mistral",
                             "Sure.[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", "
                             "\"arguments\": {\"k\": true}}]",
                             &c),
                 1);
    CHECK(c.n == 2 && c.content && strcmp(c.content, "Sure.") == 0);
    if (c.n == 2) CHECK_STR(c.calls[1].arguments, "{\"k\":true}");
    ks_tool_calls_free(&c);
    CHECK_EQ_INT(parse_reply("mistral", " [{\"name\": \"a\", \"arguments\": {}}]", &c), 1); /* no marker */
    CHECK(c.n == 1 && c.content == NULL);
    ks_tool_calls_free(&c);
    CHECK_EQ_INT(parse_reply("mistral", "[1, 2]", &c), 0);
    CHECK_EQ_INT(parse_reply("mistral", "Sure: [{\"name\": \"a\", \"arguments\": {}}]", &c), 0);
    CHECK_EQ_INT(parse_reply("mistral", "[TOOL_CALLS] []", &c), 0);
    CHECK_EQ_INT(parse_reply("mistral", "[TOOL_CALLS] {\"name\": \"a\", \"arguments\": {}}", &c), 0);
}

static void streams_only_what_cannot_start_a_call(void) {
    const ks_tool_syntax *h = ks_tool_syntax_for(kiln_chat_template_by_name("chatml"));
    const ks_tool_syntax *l = ks_tool_syntax_for(kiln_chat_template_by_name("llama3"));
    CHECK_EQ_INT(ks_tool_calls_releasable(h, "Hello", 5), 5);
    CHECK_EQ_INT(ks_tool_calls_releasable(h, "Hello <tool", 11), 6);
    CHECK_EQ_INT(ks_tool_calls_releasable(h, "Hello <b>", 9), 9);
    CHECK_EQ_INT(ks_tool_calls_releasable(h, "a<tool_call>{", 13), 1);
    CHECK_EQ_INT(ks_tool_calls_releasable(l, "  {\"na", 6), 0);
    CHECK_EQ_INT(ks_tool_calls_releasable(l, "  ", 2), 0);
    CHECK_EQ_INT(ks_tool_calls_releasable(l, "Hi {", 4), 4);
    const ks_tool_syntax *m = ks_tool_syntax_for(kiln_chat_template_by_name("mistral"));
    CHECK_EQ_INT(ks_tool_calls_releasable(m, " [{\"na", 6), 0);
    CHECK_EQ_INT(ks_tool_calls_releasable(m, "Ok [TOOL_C", 10), 3);
}

#define WEATHER                                                                                              \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","     \
    "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},\"unit\":{\"enum\":[\"c\",\"f\"]}},"     \
    "\"required\":[\"city\"]}}}"
#define TIME "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}"
#define ASK "\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":[" WEATHER "," TIME "]"

static bool grammar_accepts(const char *gbnf, const char *text) {
    kiln_grammar *g = NULL;
    kiln_grammar_matcher *m = NULL;
    bool ok = kiln_grammar_parse(gbnf, strlen(gbnf), &g) == KILN_OK &&
              kiln_grammar_matcher_create(g, NULL, &m) == KILN_OK &&
              kiln_grammar_matcher_accept_text(m, text, strlen(text)) == KILN_OK &&
              kiln_grammar_matcher_can_end(m);
    kiln_grammar_matcher_destroy(m);
    kiln_grammar_destroy(g);
    return ok;
}

static void a_forced_call_is_a_grammar_of_the_tools_calls(void) {
    ks_api_request r;
    ks_api_error err;
    CHECK(parse("{" ASK ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}",
                &r, &err));
    CHECK(r.grammar && r.req.grammar == r.grammar && r.tool_syntax);
    if (r.grammar) {
        CHECK(grammar_accepts(r.grammar, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                         "\"Paris\", \"unit\": \"c\"}}\n</tool_call>"));
        CHECK(!grammar_accepts(r.grammar,
                               "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
        CHECK(!grammar_accepts(r.grammar,
                               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
        CHECK(!grammar_accepts(r.grammar,
                               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                               "\"Amsterdam!\"}}\n</tool_call>")); /* maxLength 8 */
        CHECK(!grammar_accepts(r.grammar, "Sure."));
    }
    ks_api_request_free(&r);
    CHECK(parse("{" ASK ",\"tool_choice\":\"required\"}", &r, &err));
    if (r.grammar) {
        const char *two =
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"any\": 1}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
        CHECK(grammar_accepts(r.grammar, two)); /* parallel_tool_calls defaults to true */
    }
    ks_api_request_free(&r);
    CHECK(parse("{" ASK ",\"tool_choice\":\"required\",\"parallel_tool_calls\":false}", &r, &err));
    if (r.grammar)
        CHECK(!grammar_accepts(r.grammar,
                               "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>\n"
                               "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));
    ks_api_request_free(&r);
    /* a tool's $defs move to the call schema's root, where its references resolve */
    CHECK(parse(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\",\"tools\":[{"
        "\"type\":\"function\",\"function\":{\"name\":\"move\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"to\":{\"$ref\":\"#/$defs/point\"}},\"required\":[\"to\"],\"$defs\":{\"point\":{"
        "\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}}}}}]}",
        &r, &err));
    if (r.grammar) {
        CHECK(grammar_accepts(r.grammar, "<tool_call>\n{\"name\": \"move\", \"arguments\": {\"to\": {\"x\": "
                                         "3}}}\n</tool_call>"));
        CHECK(!grammar_accepts(r.grammar, "<tool_call>\n{\"name\": \"move\", \"arguments\": {\"to\": {}}}\n"
                                          "</tool_call>"));
    }
    ks_api_request_free(&r);
    model.tmpl = kiln_chat_template_by_name("llama3");
    CHECK(parse("{" ASK ",\"tool_choice\":\"required\"}", &r, &err));
    if (r.grammar) CHECK(grammar_accepts(r.grammar, "{\"name\": \"get_time\", \"parameters\": {}}"));
    ks_api_request_free(&r);
    model.tmpl = kiln_chat_template_by_name("mistral");
    CHECK(parse("{" ASK ",\"tool_choice\":\"required\"}", &r, &err));
    if (r.grammar)
        CHECK(grammar_accepts(r.grammar, "[{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": "
                                         "\"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]"));
    ks_api_request_free(&r);
    model.tmpl = kiln_chat_template_by_name("chatml");
}

typedef struct bad_case {
    const char *body, *param, *fragment;
} bad_case;

static const bad_case bad_cases[] = {
    {"{" ASK ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}", "tool_choice",
     "'nope', which is not in 'tools'"},
    {"{" ASK ",\"tool_choice\":\"sometimes\"}", "tool_choice", "'sometimes'"},
    {"{" ASK ",\"tool_choice\":{\"type\":\"function\"}}", "tool_choice", "must be a string or"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "tool_choice",
     "'tools' is empty"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", "tools", "must be an array"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"code\"}]}", "tools",
     "type 'function'"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{"
     "\"name\":\"a b\"}}]}",
     "tools", "letters, digits"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[" TIME "," TIME "]}", "tools",
     "both named 'get_time'"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{"
     "\"name\":\"f\",\"parameters\":[]}}]}",
     "tools", "JSON schema object"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\",\"tools\":[{"
     "\"type\":"
     "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"string\",\"pattern\":\"a\"}}}]}",
     "tools", "cannot be enforced"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\",\"tools\":[{"
     "\"type\":"
     "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":{\"a\":{\"$ref\":\"#\"}}}}}]}",
     "tools", "refers to itself"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\",\"tools\":[{"
     "\"type\":"
     "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"$defs\":{\"p\":{\"type\":\"string\"}}}}},{"
     "\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"$defs\":{\"p\":{\"type\":"
     "\"integer\"}}}}}]}",
     "tools", "define '$defs/p' differently"},
    {"{" ASK ",\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}", "tool_choice",
     "cannot be combined"},
    {"{" ASK ",\"parallel_tool_calls\":1}", "parallel_tool_calls", "boolean"},
    {"{" ASK ",\"function_call\":\"auto\"}", "function_call", "use 'tool_choice'"},
    {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[{}]}]}", "messages[0]",
     "not the assistant's"},
    {"{\"messages\":[{\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":5}]}", "messages[0]", "string"},
    {"{\"messages\":[{\"role\":\"tool\"}]}", "messages[0].content", "no 'content'"},
    {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", "messages[0].tool_calls", "an array"},
    {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":"
     "\"f\",\"arguments\":\"[1]\"}}]}]}",
     "messages[0].tool_calls", "not a JSON object"},
    {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":"
     "\"f\",\"arguments\":{}}}]}]}",
     "messages[0].tool_calls", "must be a string"},
    {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":1,\"function\":{\"name\":\"f\"}}]}]}",
     "messages[0].tool_calls", "string id"},
    {"{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", "messages[0]", "role 'function'"},
};

static void hostile_tool_requests_are_refused_naming_the_field(void) {
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        ks_api_request r;
        ks_api_error err = {0};
        if (parse(c->body, &r, &err)) {
            harness_fail(__FILE__, __LINE__, "case %zu (%s) was accepted", i, c->body);
            ks_api_request_free(&r);
        } else if (err.status != 400 || strcmp(err.param, c->param) || !strstr(err.message, c->fragment)) {
            harness_fail(__FILE__, __LINE__, "case %zu (%s): %d param '%s' message '%s'", i, c->body,
                         err.status, err.param, err.message);
        }
    }
}

static void text_event(ks_api_result *res, const char *text, char **out, size_t *len) {
    ks_event ev = {.kind = KS_EVENT_TEXT, .choice = 0, .text = text, .len = strlen(text)};
    CHECK(ks_api_result_event(res, &ev, out, len));
}

static void finish(ks_api_result *res, char **out, size_t *len) {
    ks_event end = {.kind = KS_EVENT_CHOICE_END, .choice = 0, .finish = KS_FINISH_STOP};
    ks_event done = {.kind = KS_EVENT_DONE, .prompt_tokens = 4, .completion_tokens = 3};
    CHECK(ks_api_result_event(res, &end, out, len));
    CHECK(ks_api_result_event(res, &done, out, len));
}

static const char *const reply[] = {"Checking.", "\n<tool", "_call>\n{\"name\": \"get_weather\", ",
                                    "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"};

static void a_reply_with_calls_is_a_tool_calls_message(void) {
    ks_api_request r;
    ks_api_error err;
    CHECK(parse("{" ASK "}", &r, &err));
    ks_api_result *res = ks_api_result_create(&r, &model, 9, 1700000001);
    for (size_t i = 0; i < 4; i++)
        text_event(res, reply[i], NULL, NULL);
    finish(res, NULL, NULL);
    char *s = ks_api_result_json(res);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL, *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(c0, "message"),
           *call = json_array_get(json_object_get(msg, "tool_calls"), 0);
    CHECK_STR(json_string_value(json_object_get(c0, "finish_reason")), "tool_calls");
    CHECK_STR(json_string_value(json_object_get(msg, "content")), "Checking.");
    CHECK_STR(json_string_value(json_object_get(call, "type")), "function");
    CHECK(!strncmp(
        json_string_value(json_object_get(call, "id")) ? json_string_value(json_object_get(call, "id")) : "",
        "call_", 5));
    CHECK_STR(json_string_value(json_object_get(json_object_get(call, "function"), "name")), "get_weather");
    CHECK_STR(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
              "{\"city\":\"Oslo\"}");
    json_decref(j);
    free(s);
    ks_api_result_destroy(res);
    ks_api_request_free(&r);
}

static void a_streamed_call_is_held_back_and_sent_as_one_delta(void) {
    ks_api_request r;
    ks_api_error err;
    CHECK(parse("{" ASK ",\"stream\":true}", &r, &err));
    ks_api_result *res = ks_api_result_create(&r, &model, 9, 1700000001);
    char *out = NULL;
    size_t len = 0;
    for (size_t i = 0; i < 4; i++)
        text_event(res, reply[i], &out, &len);
    CHECK(out && strstr(out, "\"content\":\"Checking.\"") && strstr(out, "\"content\":\"\\n\"") &&
          !strstr(out, "<tool")); /* the newline could not start a call; "<tool" could */
    finish(res, &out, &len);
    const char *expect[] = {"\"tool_calls\":[{\"id\":\"call_", "\"index\":0",
                            "\"finish_reason\":\"tool_calls\"", "data: [DONE]"};
    const char *at = out ? out : "";
    for (size_t i = 0; i < 4; i++) {
        const char *p = strstr(at, expect[i]);
        if (!p) harness_fail(__FILE__, __LINE__, "stream lacks %s:\n%s", expect[i], out);
        at = p ? p : at;
    }
    CHECK(out && !strstr(out, "tool_call>"));
    free(out);
    ks_api_result_destroy(res);
    ks_api_request_free(&r);
    /* a reply that only looked like a call goes out as content at the end */
    CHECK(parse("{" ASK ",\"stream\":true}", &r, &err));
    res = ks_api_result_create(&r, &model, 10, 1700000001);
    out = NULL;
    len = 0;
    text_event(res, "<tool_call>not json", &out, &len);
    CHECK(out == NULL || !strstr(out, "not json"));
    finish(res, &out, &len);
    CHECK(out && strstr(out, "\"content\":\"<tool_call>not json\"") &&
          strstr(out, "\"finish_reason\":\"stop\""));
    free(out);
    ks_api_result_destroy(res);
    ks_api_request_free(&r);
}

int main(void) {
    setup();
    RUN(renders_a_tool_conversation_as_qwen25s_template_does);
    RUN(parses_hermes_calls_and_keeps_the_text_around_them);
    RUN(malformed_calls_leave_the_reply_as_content);
    RUN(parses_llama31_json_and_mistral_calls);
    RUN(streams_only_what_cannot_start_a_call);
    RUN(a_forced_call_is_a_grammar_of_the_tools_calls);
    RUN(hostile_tool_requests_are_refused_naming_the_field);
    RUN(a_reply_with_calls_is_a_tool_calls_message);
    RUN(a_streamed_call_is_held_back_and_sent_as_one_delta);
    kiln_vocab_destroy(vocab);
    kiln_gguf_close(gguf);
    return harness_finish();
}
