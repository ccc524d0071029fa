/*
 * test_server_api.c - the JSON layer of `kiln serve` without a network: request bodies -> ks_api_request
 * (defaults, every field's type and range, the refusals that name their field), OpenAI's error envelope,
 * responses and SSE chunks built from engine events, the small endpoints and the Prometheus text. The
 * vocabulary is the bundled stories260K's, with the "plain" chat template it falls back to.
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
    model.tmpl = kiln_chat_template_by_name("plain");
    model.eot_token = -1;
    model.n_ctx = 256;
    model.n_ctx_train = 512;
    model.max_tokens_cap = 200;
    model.default_max_tokens = 200;
    model.created = 1700000000;
}

static bool parse(ks_api_kind kind, const char *body, ks_api_request *r, ks_api_error *err) {
    return ks_api_parse(kind, body, strlen(body), &model, r, err);
}

static void a_minimal_chat_request_takes_openai_defaults(void) {
    ks_api_request r;
    ks_api_error err;
    CHECK(parse(KS_API_CHAT, "{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &r,
                &err));
    CHECK_NEAR(r.req.temperature, 1.0, 0);
    CHECK_NEAR(r.req.top_p, 1.0, 0);
    CHECK_EQ_INT(r.req.n, 1);
    CHECK_EQ_INT(r.req.logprobs, -1);
    CHECK_EQ_INT(r.req.n_stop, 0);
    CHECK(!r.stream && !r.logprobs);
    CHECK(r.req.n_prompt > 1);
    CHECK_EQ_INT(r.req.prompt[0], kiln_vocab_bos(vocab)); /* the vocabulary asks for BOS */
    CHECK_EQ_INT(r.req.max_tokens, 200);                  /* the server's default, within the context */
    CHECK_EQ_INT(r.req.eot_token, -1);
    ks_api_request_free(&r);
    CHECK(parse(KS_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"n\":4}", &r, &err));
    CHECK(r.req.n_prompt + 4 * (r.req.max_tokens - 1) <= model.n_ctx); /* the default shrinks to fit */
    CHECK(r.req.n_prompt + 4 * r.req.max_tokens > model.n_ctx);
    ks_api_request_free(&r);
}

static void completions_default_to_16_tokens_and_take_token_ids(void) {
    ks_api_request r;
    ks_api_error err;
    CHECK(parse(KS_API_COMPLETION, "{\"prompt\":\"Once upon a time\"}", &r, &err));
    CHECK_EQ_INT(r.req.max_tokens, 16);
    ks_api_request_free(&r);
    CHECK(parse(KS_API_COMPLETION, "{\"prompt\":[1, 5, 7],\"max_tokens\":3,\"seed\":42}", &r, &err));
    CHECK_EQ_INT(r.req.n_prompt, 3);
    CHECK_EQ_INT(r.req.prompt[2], 7);
    CHECK_EQ_INT(r.req.seed, 42);
    ks_api_request_free(&r);
    CHECK(parse(KS_API_COMPLETION, "{\"prompt\":[\"one string in a list\"]}", &r, &err));
    ks_api_request_free(&r);
}

static void every_sampling_field_reaches_the_engine_request(void) {
    ks_api_request r;
    ks_api_error err;
    CHECK(parse(KS_API_CHAT,
                "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"temperature\":0,\"top_p\":0.5,"
                "\"presence_penalty\":-2,\"frequency_penalty\":1.5,\"n\":3,\"stop\":[\"a\",\"bc\"],"
                "\"max_completion_tokens\":7,\"max_tokens\":9,\"logprobs\":true,\"top_logprobs\":4,"
                "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"unknown_field\":{\"x\":[1]}}",
                &r, &err));
    CHECK_NEAR(r.req.temperature, 0, 0);
    CHECK_NEAR(r.req.top_p, 0.5, 1e-6);
    CHECK_NEAR(r.req.presence_penalty, -2, 0);
    CHECK_NEAR(r.req.frequency_penalty, 1.5, 0);
    CHECK_EQ_INT(r.req.n, 3);
    CHECK_EQ_INT(r.req.n_stop, 2);
    CHECK_STR(r.req.stop[1], "bc");
    CHECK_EQ_INT(r.req.max_tokens, 7); /* max_completion_tokens wins */
    CHECK_EQ_INT(r.req.logprobs, 4);
    CHECK(r.logprobs && r.stream && r.include_usage);
    ks_api_request_free(&r);
    CHECK(parse(KS_API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":0,\"stop\":\"end\"}", &r, &err));
    CHECK_EQ_INT(r.req.logprobs, 0);
    CHECK(r.logprobs);
    CHECK_EQ_INT(r.req.n_stop, 1);
    ks_api_request_free(&r);
}

static void content_parts_are_joined_and_developer_is_system(void) {
    int32_t *a, *b, na, nb;
    ks_api_error err;
    json_t *parts =
        json_loads("[{\"role\":\"developer\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
                   "[{\"type\":\"text\",\"text\":\"Hel\"},{\"type\":\"text\",\"text\":\"lo\"}]}]",
                   0, NULL);
    json_t *plain =
        json_loads("[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
                   "\"Hello\"}]",
                   0, NULL);
    CHECK(ks_api_chat_prompt(parts, NULL, &model, &a, &na, &err));
    CHECK(ks_api_chat_prompt(plain, NULL, &model, &b, &nb, &err));
    CHECK_EQ_INT(na, nb);
    CHECK(na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0);
    free(a);
    free(b);
    json_decref(parts);
    json_decref(plain);
}

typedef struct bad_case {
    ks_api_kind kind;
    const char *body;
    int status;
    const char *param;    /* "" for null */
    const char *fragment; /* in the message */
} bad_case;

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
static const bad_case bad_cases[] = {
    {KS_API_CHAT, "", 400, "", "empty"},
    {KS_API_CHAT, "{bad json", 400, "", "not valid JSON"},
    {KS_API_CHAT, "[1,2]", 400, "", "JSON object"},
    {KS_API_CHAT, "{\"messages\":\"\\ud800\"}", 400, "", "not valid JSON"}, /* a lone surrogate */
    {KS_API_CHAT, "{}", 400, "messages", "required"},
    {KS_API_CHAT, "{\"messages\":[]}", 400, "messages", "at least one"},
    {KS_API_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[0]", "'wizard'"},
    {KS_API_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content", "no 'content'"},
    {KS_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400,
     "messages[0].content", "image_url"},
    {KS_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content", "string"},
    {KS_API_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"system\",\"content\":\"y\"}]}", 400,
     "messages", "first"},
    {KS_API_CHAT, "{" MSG ",\"temperature\":2.5}", 400, "temperature", "between 0 and 2"},
    {KS_API_CHAT, "{" MSG ",\"temperature\":\"1\"}", 400, "temperature", "number"},
    {KS_API_CHAT, "{" MSG ",\"top_p\":-0.1}", 400, "top_p", "between"},
    {KS_API_CHAT, "{" MSG ",\"max_tokens\":0}", 400, "max_tokens", "between 1 and 200"},
    {KS_API_CHAT, "{" MSG ",\"max_tokens\":1e300}", 400, "max_tokens", "integer"},
    {KS_API_CHAT, "{" MSG ",\"max_tokens\":99999999999999999999999}", 400, "", "not valid JSON"},
    {KS_API_CHAT, "{" MSG ",\"max_tokens\":2.5}", 400, "max_tokens", "integer"},
    {KS_API_CHAT, "{" MSG ",\"n\":9}", 400, "n", "between 1 and 8"},
    {KS_API_CHAT, "{" MSG ",\"n\":-1}", 400, "n", "between"},
    {KS_API_CHAT, "{" MSG ",\"presence_penalty\":3}", 400, "presence_penalty", "between -2 and 2"},
    {KS_API_CHAT, "{" MSG ",\"frequency_penalty\":-2.01}", 400, "frequency_penalty", "between"},
    {KS_API_CHAT, "{" MSG ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop", "at most 4"},
    {KS_API_CHAT, "{" MSG ",\"stop\":\"\"}", 400, "stop", "1 to 256"},
    {KS_API_CHAT, "{" MSG ",\"stop\":[1]}", 400, "stop", "string"},
    {KS_API_CHAT, "{" MSG ",\"seed\":\"x\"}", 400, "seed", "integer"},
    {KS_API_CHAT, "{" MSG ",\"stream\":1}", 400, "stream", "boolean"},
    {KS_API_CHAT, "{" MSG ",\"stream_options\":{\"include_usage\":true}}", 400, "stream_options",
     "only allowed"},
    {KS_API_CHAT, "{" MSG ",\"logprobs\":1}", 400, "logprobs", "boolean"},
    {KS_API_CHAT, "{" MSG ",\"logprobs\":true,\"top_logprobs\":21}", 400, "top_logprobs", "between 0 and 20"},
    {KS_API_CHAT, "{" MSG ",\"top_logprobs\":2}", 400, "top_logprobs", "requires"},
    {KS_API_CHAT, "{" MSG ",\"tools\":[{\"type\":\"function\"}]}", 400, "tools", "tools[0].function"},
    {KS_API_CHAT, "{" MSG ",\"functions\":[{\"name\":\"f\"}]}", 400, "functions", "use 'tools'"},
    {KS_API_CHAT, "{" MSG ",\"response_format\":{\"type\":\"yaml\"}}", 400, "response_format",
     "'yaml' is not supported"},
    {KS_API_CHAT, "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"string\",\"pattern\":\"a\"}}}}",
     400, "response_format", "'pattern' cannot be enforced"},
    {KS_API_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= x\"}", 400, "grammar", "rule 'x' is used but never defined"},
    {KS_API_CHAT, "{" MSG ",\"logit_bias\":{\"5\":10}}", 400, "logit_bias", "not supported"},
    {KS_API_CHAT, "{" MSG ",\"model\":7}", 400, "model", "string"},
    {KS_API_CHAT, "{" MSG ",\"max_tokens\":200,\"x\":0}", 200, "", ""}, /* fits: 200 + a short prompt < 256 */
    {KS_API_COMPLETION, "{}", 400, "prompt", "required"},
    {KS_API_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", 400, "echo", "not supported"},
    {KS_API_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"y\"}", 400, "suffix", "not supported"},
    {KS_API_COMPLETION, "{\"prompt\":\"x\",\"best_of\":3}", 400, "best_of", "not supported"},
    {KS_API_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt", "several prompts"},
    {KS_API_COMPLETION, "{\"prompt\":[[1,2]]}", 400, "prompt", "several prompts"},
    {KS_API_COMPLETION, "{\"prompt\":[]}", 400, "prompt", "empty"},
    {KS_API_COMPLETION, "{\"prompt\":[1,-4]}", 400, "prompt", "prompt[1]"},
    {KS_API_COMPLETION, "{\"prompt\":[1,512]}", 400, "prompt", "prompt[1]"},
    {KS_API_COMPLETION, "{\"prompt\":{}}", 400, "prompt", "string or an array"},
    {KS_API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":6}", 400, "logprobs", "between 0 and 5"},
    {KS_API_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":true}", 400, "logprobs", "integer"},
    {KS_API_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":200,\"n\":1}", 200, "", ""},
    {KS_API_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":200,\"n\":2}", 400, "max_tokens",
     "for each choice"},
    {KS_API_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":120,\"n\":2}", 200, "", ""},
};

static void malformed_requests_are_refused_naming_the_field(void) {
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        ks_api_request r;
        ks_api_error err = {0};
        bool ok = parse(c->kind, c->body, &r, &err);
        if (c->status == 200) {
            if (!ok) harness_fail(__FILE__, __LINE__, "case %zu (%s) refused: %s", i, c->body, err.message);
            ks_api_request_free(&r);
            continue;
        }
        if (ok) {
            harness_fail(__FILE__, __LINE__, "case %zu (%s) was accepted", i, c->body);
            ks_api_request_free(&r);
            continue;
        }
        if (err.status != c->status || strcmp(err.param, c->param) != 0 ||
            !strstr(err.message, c->fragment) || strcmp(err.type, "invalid_request_error") != 0)
            harness_fail(__FILE__, __LINE__, "case %zu (%s): %d param '%s' message '%s'", i, c->body,
                         err.status, err.param, err.message);
    }
}

static void bytes_that_are_not_utf8_or_nest_too_deep_are_refused(void) {
    ks_api_request r;
    ks_api_error err;
    CHECK(!parse(KS_API_COMPLETION, "{\"prompt\":\"\xff\xfe\"}", &r, &err));
    CHECK(strstr(err.message, "not valid JSON") != NULL);
    CHECK(!parse(KS_API_COMPLETION, "{\"prompt\":\"\xc0\xaf\"}", &r, &err)); /* overlong '/' */
    size_t depth = 5000;
    char *deep = malloc(2 * depth + 32);
    strcpy(deep, "{\"prompt\":\"x\",\"a\":");
    size_t n = strlen(deep);
    for (size_t i = 0; i < depth; i++)
        deep[n++] = '[';
    for (size_t i = 0; i < depth; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = '\0';
    CHECK(!parse(KS_API_COMPLETION, deep, &r, &err));
    CHECK(strstr(err.message, "not valid JSON") != NULL);
    free(deep);
    CHECK(ks_api_utf8_valid("h\xc3\xa9llo \xf0\x9f\x94\xa5", 11));
    CHECK(!ks_api_utf8_valid("\xed\xa0\x80", 3));     /* a surrogate */
    CHECK(!ks_api_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    CHECK(!ks_api_utf8_valid("a\0b", 3));
    CHECK(!ks_api_utf8_valid("\xe2\x82", 2)); /* cut short */
}

static void a_prompt_over_the_context_is_context_length_exceeded(void) {
    ks_api_request r;
    ks_api_error err;
    CHECK(!parse(
        KS_API_CHAT,
        "{\"max_tokens\":199,\"n\":1,\"stop\":null,\"messages\":[{\"role\":\"user\","
        "\"content\":\"Once upon a time there was a little girl named Lily. She liked to play outside in "
        "the park with her friends every day. One day she saw a big red ball.\"}]}",
        &r, &err));
    CHECK_EQ_INT(err.status, 400);
    CHECK_STR(err.code, "context_length_exceeded");
    CHECK(strstr(err.message, "maximum context length is 256") != NULL);
}

/* One past each request limit of api.h (the body limit is http.c's: tests/server/test_malformed_requests.py;
 * n and the stop count are among the malformed cases above). */
static void requests_one_past_each_limit_are_refused(void) {
    ks_api_request r;
    ks_api_error err;
    size_t cap = (KS_API_MAX_MESSAGES + 1) * 40 + 64, n;
    char *body = malloc(cap);
    n = (size_t)snprintf(body, cap, "{\"messages\":[");
    for (int i = 0; i <= KS_API_MAX_MESSAGES; i++)
        n += (size_t)snprintf(body + n, cap - n, "%s{\"role\":\"user\",\"content\":\"x\"}", i ? "," : "");
    snprintf(body + n, cap - n, "]}");
    CHECK(!parse(KS_API_CHAT, body, &r, &err));
    CHECK_EQ_INT(err.status, 400);
    CHECK_STR(err.param, "messages");
    CHECK(strstr(err.message, "'messages' has 4097 messages; at most 4096 are allowed") != NULL);
    n = (size_t)snprintf(body, cap, "{\"prompt\":\"x\",\"stop\":\"");
    memset(body + n, 'a', KS_API_MAX_STOP_LEN + 1);
    snprintf(body + n + KS_API_MAX_STOP_LEN + 1, cap - n - KS_API_MAX_STOP_LEN - 1, "\"}");
    CHECK(!parse(KS_API_COMPLETION, body, &r, &err));
    CHECK_STR(err.param, "stop");
    CHECK(strstr(err.message, "1 to 256 bytes long; one is 257") != NULL);
    free(body);
}

static void errors_use_openais_envelope(void) {
    ks_api_error err;
    CHECK(!ks_api_bad(&err, "temperature", "bad %s \xe2\x82", "value")); /* a cut character becomes '?' */
    char *s = ks_api_error_json(&err);
    json_t *j = json_loads(s, 0, NULL), *e = json_object_get(j, "error");
    CHECK(json_is_object(e));
    CHECK_STR(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    CHECK_STR(json_string_value(json_object_get(e, "param")), "temperature");
    CHECK(json_is_null(json_object_get(e, "code")));
    CHECK_STR(json_string_value(json_object_get(e, "message")), "bad value ??");
    json_decref(j);
    free(s);
}

static ks_api_result *result_for(const char *body, ks_api_kind kind, ks_api_request *r) {
    ks_api_error err;
    CHECK(parse(kind, body, r, &err));
    return ks_api_result_create(r, &model, 7, 1700000001);
}

static void text_event(ks_api_result *res, int32_t choice, const char *text, char **out, size_t *len) {
    int32_t tok = 5;
    float lp = -0.25f;
    ks_top_logprob tops[2] = {{5, -0.25f, "ab", 2}, {9, -1.5f, "\xe2\x82", 2}};
    const ks_top_logprob *top[1] = {tops};
    ks_event ev = {.kind = KS_EVENT_TEXT,
                   .choice = choice,
                   .text = text,
                   .len = strlen(text),
                   .n_tokens = 1,
                   .tokens = &tok,
                   .token_logprobs = &lp,
                   .top = top};
    CHECK(ks_api_result_event(res, &ev, out, len));
}

static void finish(ks_api_result *res, int32_t n, char **out, size_t *len) {
    for (int32_t i = 0; i < n; i++) {
        ks_event end = {
            .kind = KS_EVENT_CHOICE_END, .choice = i, .finish = i ? KS_FINISH_LENGTH : KS_FINISH_STOP};
        CHECK(ks_api_result_event(res, &end, out, len));
    }
    ks_event done = {.kind = KS_EVENT_DONE, .prompt_tokens = 4, .completion_tokens = 3, .cached_tokens = 2};
    CHECK(ks_api_result_event(res, &done, out, len));
}

static void a_chat_response_has_choices_usage_and_logprobs(void) {
    ks_api_request r;
    ks_api_result *res =
        result_for("{" MSG ",\"n\":2,\"logprobs\":true,\"top_logprobs\":2}", KS_API_CHAT, &r);
    text_event(res, 0, "Hel", NULL, NULL);
    text_event(res, 1, "Bye", NULL, NULL);
    text_event(res, 0, "lo", NULL, NULL);
    finish(res, 2, NULL, NULL);
    char *s = ks_api_result_json(res);
    json_t *j = json_loads(s, 0, NULL), *c0 = json_array_get(json_object_get(j, "choices"), 0);
    CHECK_STR(json_string_value(json_object_get(j, "object")), "chat.completion");
    CHECK_STR(json_string_value(json_object_get(j, "id")), "chatcmpl-kiln7");
    CHECK_STR(json_string_value(json_object_get(json_object_get(c0, "message"), "content")), "Hello");
    CHECK_STR(json_string_value(json_object_get(c0, "finish_reason")), "stop");
    json_t *c1 = json_array_get(json_object_get(j, "choices"), 1);
    CHECK_STR(json_string_value(json_object_get(c1, "finish_reason")), "length");
    json_t *usage = json_object_get(j, "usage");
    CHECK_EQ_INT(json_integer_value(json_object_get(usage, "total_tokens")), 7);
    CHECK_EQ_INT(
        json_integer_value(json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens")),
        2);
    json_t *lp = json_array_get(json_object_get(json_object_get(c0, "logprobs"), "content"), 0);
    CHECK_STR(json_string_value(json_object_get(lp, "token")), "ab");
    CHECK_EQ_INT(json_array_size(json_object_get(lp, "bytes")), 2);
    json_t *alt = json_array_get(json_object_get(lp, "top_logprobs"), 1);
    CHECK_STR(json_string_value(json_object_get(alt, "token")), "\xef\xbf\xbd\xef\xbf\xbd"); /* lossy text */
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(alt, "bytes"), 0)),
                 0xe2); /* exact bytes */
    json_decref(j);
    free(s);
    ks_api_result_destroy(res);
    ks_api_request_free(&r);
}

static void a_chat_stream_is_openais_sequence_of_chunks(void) {
    ks_api_request r;
    ks_api_result *res =
        result_for("{" MSG ",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", KS_API_CHAT, &r);
    char *out = NULL;
    size_t len = 0;
    text_event(res, 0, "Hi", &out, &len);
    text_event(res, 0, "", &out, &len); /* nothing to say: no chunk */
    finish(res, 1, &out, &len);
    CHECK_EQ_INT(strlen(out), len);
    const char *expect[] = {"\"delta\":{\"role\":\"assistant\",\"content\":\"\"}",
                            "\"delta\":{\"content\":\"Hi\"}", "\"finish_reason\":\"stop\"",
                            "\"choices\":[],\"usage\":{", "data: [DONE]\n\n"};
    const char *at = out;
    for (size_t i = 0; i < 5; i++) {
        const char *p = strstr(at, expect[i]);
        if (!p)
            harness_fail(__FILE__, __LINE__, "stream lacks %s after offset %td:\n%s", expect[i], at - out,
                         out);
        else
            at = p;
    }
    CHECK(strstr(out, "\"usage\":null") != NULL);
    CHECK_EQ_INT(strncmp(out, "data: {", 7), 0);
    free(out);
    ks_api_result_destroy(res);
    ks_api_request_free(&r);
}

static void an_engine_error_ends_a_stream_with_an_error_event(void) {
    ks_api_request r;
    ks_api_result *res = result_for("{\"prompt\":\"x\",\"stream\":true}", KS_API_COMPLETION, &r);
    char *out = NULL;
    size_t len = 0;
    text_event(res, 0, "a", &out, &len);
    ks_event ev = {.kind = KS_EVENT_ERROR, .message = "server shutting down"};
    CHECK(ks_api_result_event(res, &ev, &out, &len));
    CHECK(strstr(out, "\"text\":\"a\"") != NULL);
    const char *tail = "data: {\"error\":{\"message\":\"server shutting down\",\"type\":\"server_error\"";
    CHECK(strstr(out, tail) != NULL);
    CHECK(strstr(out, "[DONE]") == NULL);
    CHECK(ks_api_result_finished(res));
    CHECK_STR(ks_api_result_error(res), "server shutting down");
    free(out);
    ks_api_result_destroy(res);
    ks_api_request_free(&r);
}

static void completions_logprobs_have_four_arrays(void) {
    ks_api_request r;
    ks_api_result *res = result_for("{\"prompt\":\"x\",\"logprobs\":2}", KS_API_COMPLETION, &r);
    text_event(res, 0, "ab", NULL, NULL);
    text_event(res, 0, "ab", NULL, NULL);
    finish(res, 1, NULL, NULL);
    char *s = ks_api_result_json(res);
    json_t *j = json_loads(s, 0, NULL), *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *lp = json_object_get(c, "logprobs");
    CHECK_STR(json_string_value(json_object_get(j, "object")), "text_completion");
    CHECK_STR(json_string_value(json_object_get(c, "text")), "abab");
    CHECK_EQ_INT(json_array_size(json_object_get(lp, "tokens")), 2);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 1)), 2);
    CHECK_NEAR(json_real_value(json_object_get(json_array_get(json_object_get(lp, "top_logprobs"), 0), "ab")),
               -0.25, 1e-6);
    json_decref(j);
    free(s);
    ks_api_result_destroy(res);
    ks_api_request_free(&r);
}

static void tokenize_and_detokenize_round_trip(void) {
    ks_api_error err;
    const char *body = "{\"content\":\"Once upon a time\",\"add_special\":true}";
    char *s = ks_api_tokenize_json(body, strlen(body), &model, &err);
    json_t *j = json_loads(s, 0, NULL), *tokens = json_object_get(j, "tokens");
    CHECK_EQ_INT(json_integer_value(json_array_get(tokens, 0)), kiln_vocab_bos(vocab));
    json_t *req = json_pack("{s:O}", "tokens", tokens);
    char *again = json_dumps(req, 0);
    char *text = ks_api_detokenize_json(again, strlen(again), &model, &err);
    CHECK_STR(text, "{\"content\":\"Once upon a time\"}");
    free(text);
    free(again);
    json_decref(req);
    json_decref(j);
    free(s);
    CHECK(!ks_api_tokenize_json("{\"content\":3}", 13, &model, &err));
    CHECK_STR(err.param, "content");
    CHECK(!ks_api_detokenize_json("{\"tokens\":[1,\"a\"]}", 18, &model, &err));
    CHECK_STR(err.param, "tokens");
    char *models = ks_api_models_json(&model);
    CHECK(strstr(models, "\"context_length\":256") && strstr(models, "\"max_model_len\":256"));
    free(models);
}

static void metrics_are_prometheus_text(void) {
    ks_metrics m;
    memset(&m, 0, sizeof m);
    m.requests_ok = 3;
    m.ttft.count[KS_HIST_BUCKETS - 1] = 2;
    m.ttft.total = 2;
    m.ttft.sum = 0.5;
    char *s = ks_metrics_text(&m, 4);
    const char *names[] = {"kiln_requests_total{status=\"ok\"} 3",
                           "kiln_requests_total{status=\"rejected\"} 4",
                           "kiln_prompt_tokens_total 0",
                           "kiln_generated_tokens_total 0",
                           "kiln_queue_depth 0",
                           "kiln_running_sequences 0",
                           "kiln_kv_cells_used 0",
                           "kiln_kv_cells_total 0",
                           "kiln_draft_kv_cells_used 0",
                           "kiln_prefix_cache_cells 0",
                           "kiln_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2",
                           "kiln_time_to_first_token_seconds_sum 0.5",
                           "kiln_inter_token_latency_seconds_count 0",
                           "kiln_request_duration_seconds_bucket{le=\"0.005\"} 0",
                           "kiln_queue_time_seconds_sum 0",
                           "# TYPE kiln_queue_time_seconds histogram"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strstr(s, names[i])) harness_fail(__FILE__, __LINE__, "metrics lack '%s'", names[i]);
    free(s);
}

int main(void) {
    setup();
    RUN(a_minimal_chat_request_takes_openai_defaults);
    RUN(completions_default_to_16_tokens_and_take_token_ids);
    RUN(every_sampling_field_reaches_the_engine_request);
    RUN(content_parts_are_joined_and_developer_is_system);
    RUN(malformed_requests_are_refused_naming_the_field);
    RUN(bytes_that_are_not_utf8_or_nest_too_deep_are_refused);
    RUN(a_prompt_over_the_context_is_context_length_exceeded);
    RUN(requests_one_past_each_limit_are_refused);
    RUN(errors_use_openais_envelope);
    RUN(a_chat_response_has_choices_usage_and_logprobs);
    RUN(a_chat_stream_is_openais_sequence_of_chunks);
    RUN(an_engine_error_ends_a_stream_with_an_error_event);
    RUN(completions_logprobs_have_four_arrays);
    RUN(tokenize_and_detokenize_round_trip);
    RUN(metrics_are_prometheus_text);
    kiln_vocab_destroy(vocab);
    kiln_gguf_close(gguf);
    return harness_finish();
}
