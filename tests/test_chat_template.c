/*
 * test_chat_template.c - chat templates and `kiln chat`.
 *
 * The references are renderings of a fixed conversation by Jinja2 from the templates the models publish
 * (tests/data/chat, made by render_references.py): Kiln must recognize each template text and render the
 * same conversation to the same bytes. `kiln chat` runs end to end on the bundled stories260K (which has no
 * template, so the "plain" one) with piped stdin.
 */
#include "harness.h"

#include <stdlib.h>

static const kiln_chat_message conversation[] = {
    {"system", "You are terse."},
    {"user", "Hi! Who are you?"},
    {"assistant", "A model.\nNothing more."},
    {"user", "Count: 1, 2, 3"},
};

static void check_template(const char *name) {
    char path[128];
    snprintf(path, sizeof path, "chat/%s.jinja", name);
    size_t jinja_len = 0;
    char *jinja = harness_read_file(harness_data_path(path), &jinja_len);
    snprintf(path, sizeof path, "chat/%s.txt", name);
    char *expected = harness_read_file(harness_data_path(path), NULL);
    CHECK(jinja && expected);
    const kiln_chat_template *t = NULL;
    if (jinja) CHECK_OK(kiln_chat_template_recognize(jinja, jinja_len, &t));
    CHECK(t != NULL && t == kiln_chat_template_by_name(name));
    if (t && expected) {
        bool no_system = strcmp(name, "mistral") == 0; /* Mistral's template refuses system messages */
        const kiln_chat_message *msgs = conversation + no_system;
        size_t n = 4 - no_system, len = 0;
        char out[1024];
        CHECK_OK(kiln_chat_render(t, msgs, n, true, out, sizeof out, &len));
        CHECK_STR(out, expected);
        CHECK_EQ_INT(len, strlen(expected));
    }
    free(jinja);
    free(expected);
}

static void recognizes_and_renders_chatml_like_jinja(void) {
    check_template("chatml");
}
static void recognizes_and_renders_llama3_like_jinja(void) {
    check_template("llama3");
}
static void recognizes_and_renders_phi3_like_jinja(void) {
    check_template("phi3");
}
static void recognizes_and_renders_mistral_like_jinja(void) {
    check_template("mistral");
}

static void names_the_end_of_turn_token_of_each_template(void) {
    CHECK_STR(kiln_chat_template_end_of_turn(kiln_chat_template_by_name("chatml")), "<|im_end|>");
    CHECK_STR(kiln_chat_template_end_of_turn(kiln_chat_template_by_name("llama3")), "<|eot_id|>");
    CHECK_STR(kiln_chat_template_end_of_turn(kiln_chat_template_by_name("phi3")), "<|end|>");
    CHECK(kiln_chat_template_end_of_turn(kiln_chat_template_by_name("mistral")) == NULL); /* EOS */
    CHECK(kiln_chat_template_by_name("vicuna") == NULL);
}

static void rendering_with_the_prompt_is_a_prefix_of_the_rendering_with_the_reply(void) {
    const char *names[] = {"chatml", "llama3", "phi3", "mistral", "plain"};
    for (size_t k = 0; k < 5; k++) {
        const kiln_chat_template *t = kiln_chat_template_by_name(names[k]);
        char a[1024], b[1024];
        size_t la = 0, lb = 0;
        CHECK_OK(kiln_chat_render(t, conversation, 2, true, a, sizeof a, &la));
        CHECK_OK(kiln_chat_render(t, conversation, 3, false, b, sizeof b, &lb));
        CHECK(la < lb && memcmp(a, b, la) == 0);
        CHECK(memcmp(b + la, conversation[2].content, strlen(conversation[2].content)) == 0);
    }
}

static void rejects_unknown_templates_and_bad_messages_by_name(void) {
    const kiln_chat_template *t = (const kiln_chat_template *)1;
    const char *jinja = "{% for m in messages %}### {{ m.content }}{% endfor %}";
    CHECK_STATUS(kiln_chat_template_recognize(jinja, strlen(jinja), &t), KILN_E_UNSUPPORTED);
    CHECK(t == NULL);
    CHECK_ERROR_MENTIONS("--chat-template");
    const kiln_chat_message bad[] = {{"user", "a"}, {"system", "late"}}, odd[] = {{"robot", "x"}};
    char out[64];
    size_t n = 0;
    t = kiln_chat_template_by_name("chatml");
    CHECK_STATUS(kiln_chat_render(t, bad, 2, false, out, sizeof out, &n), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("must come first");
    CHECK_STATUS(kiln_chat_render(t, odd, 1, false, out, sizeof out, &n), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("'robot'");
    CHECK_STATUS(kiln_chat_render(t, conversation, 4, true, out, 8, &n), KILN_E_RANGE);
    CHECK(n > 8);
    CHECK_EQ_INT(strlen(out), 7); /* the prefix that fits, terminated */
}

/* Tool results: ChatML's consecutive ones share a user turn of <tool_response> blocks (Qwen2.5's template;
 * the whole conversation is checked against Jinja2 in test_server_tools.c), Llama 3.1 gives each an
 * ipython turn (its template's "ipython" role). */
static void renders_tool_results_in_each_templates_tool_turn(void) {
    const kiln_chat_message msgs[] = {{"user", "Q"}, {"assistant", "C"}, {"tool", "r1"}, {"tool", "r2"}};
    char out[512];
    size_t n = 0;
    CHECK_OK(kiln_chat_render(kiln_chat_template_by_name("chatml"), msgs, 4, true, out, sizeof out, &n));
    CHECK_STR(out, "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nC<|im_end|>\n<|im_start|>user\n"
                   "<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n"
                   "<|im_start|>assistant\n");
    CHECK_OK(kiln_chat_render(kiln_chat_template_by_name("llama3"), msgs + 2, 1, true, out, sizeof out, &n));
    CHECK_STR(out, "<|start_header_id|>ipython<|end_header_id|>\n\nr1<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n");
    CHECK_OK(kiln_chat_render(kiln_chat_template_by_name("mistral"), msgs, 3, false, out, sizeof out, &n));
    CHECK_STR(out, "[INST] Q [/INST]C</s>[TOOL_RESULTS] r1[/TOOL_RESULTS]");
}

static void reports_a_model_without_a_template_as_not_found(void) {
    kiln_gguf *g = NULL;
    const kiln_chat_template *t = NULL;
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &g));
    if (g) CHECK_STATUS(kiln_chat_template_detect(g, &t), KILN_E_NOT_FOUND);
    kiln_gguf_close(g);
}

/* Run `kiln chat ARGS` with stdin from a file holding `input`; returns stdout and the exit code. */
static char *run_chat(const char *args, const char *input, int *code) {
    char in_path[512], out_path[512], err_path[512], cmd[2048];
    snprintf(in_path, sizeof in_path, "%s/chat_in.txt", KILN_TEST_TMP);
    snprintf(out_path, sizeof out_path, "%s/chat_out.txt", KILN_TEST_TMP);
    snprintf(err_path, sizeof err_path, "%s/chat_err.txt", KILN_TEST_TMP);
    FILE *f = fopen(in_path, "w");
    if (!f) return NULL;
    fputs(input, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "\"%s\" chat -m \"%s\" -t 1 %s < \"%s\" > \"%s\" 2> \"%s\"", KILN_CLI_PATH,
             KILN_MODEL_PATH, args, in_path, out_path, err_path);
    int status = system(cmd);
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return harness_read_file(out_path, NULL);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

static void chats_with_the_bundled_model_through_piped_stdin(void) {
    int code = -1;
    char *out = run_chat("--temp 0 -n 12", "Hello there\n\nTell me about a cat\n/exit\nnot read\n", &code);
    CHECK_EQ_INT(code, 0);
    CHECK_EQ_INT(count_lines(out), 2); /* one reply per user line; the empty line and "/exit" end nothing */
    char *again = run_chat("--temp 0 -n 12", "Hello there\nTell me about a cat\n", &code);
    CHECK_EQ_INT(code, 0);
    CHECK(out && again && strcmp(out, again) == 0); /* greedy is deterministic; EOF ends like /exit */
    free(out);
    free(again);
}

static void keeps_the_kv_cache_across_turns(void) {
    int code = -1;
    char *out = run_chat("--temp 0 -n 8 -v", "Hello\nAgain\nAnd again\n", &code);
    free(out);
    CHECK_EQ_INT(code, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/chat_err.txt", KILN_TEST_TMP);
    char *err = harness_read_file(path, NULL);
    CHECK(err != NULL);
    int prev_ctx = 0, turns = 0;
    for (const char *p = err; p && (p = strstr(p, "kiln chat: turn ")) != NULL; p++) {
        int turn, fed, closed, ctx, n_ctx;
        long gen;
        if (sscanf(p, "kiln chat: turn %d: fed %d tokens, generated %ld, closed with %d; context %d/%d",
                   &turn, &fed, &gen, &closed, &ctx, &n_ctx) != 6)
            continue;
        CHECK_EQ_INT(ctx, prev_ctx + fed + gen + closed); /* only the new turn's tokens were added */
        CHECK(turns == 0 || fed < prev_ctx);              /* not the whole conversation again */
        prev_ctx = ctx;
        turns++;
    }
    CHECK_EQ_INT(turns, 3);
    free(err);
}

static void rejects_an_unknown_template_name_as_a_usage_error(void) {
    int code = -1;
    char *out = run_chat("--chat-template vicuna", "hi\n", &code);
    CHECK_EQ_INT(code, 2);
    free(out);
}

int main(void) {
    RUN(recognizes_and_renders_chatml_like_jinja);
    RUN(recognizes_and_renders_llama3_like_jinja);
    RUN(recognizes_and_renders_phi3_like_jinja);
    RUN(recognizes_and_renders_mistral_like_jinja);
    RUN(names_the_end_of_turn_token_of_each_template);
    RUN(rendering_with_the_prompt_is_a_prefix_of_the_rendering_with_the_reply);
    RUN(rejects_unknown_templates_and_bad_messages_by_name);
    RUN(renders_tool_results_in_each_templates_tool_turn);
    RUN(reports_a_model_without_a_template_as_not_found);
    RUN(chats_with_the_bundled_model_through_piped_stdin);
    RUN(keeps_the_kv_cache_across_turns);
    RUN(rejects_an_unknown_template_name_as_a_usage_error);
    return harness_finish();
}
