/*
 * test_detok.c - the streaming detokenizer and kiln_detokenize: byte tokens joining into UTF-8 across
 * token boundaries, U+FFFD for bytes that can never be valid, the leading-space rule, how each token type
 * prints, buffer sizing, and the stories260K goldens (tests/data/golden) reproduced byte for byte.
 */
#include "harness.h"

#include <stdlib.h>

#define FFFD "\xEF\xBF\xBD"
#define BYTE(b) (3 + (b)) /* llama-spm: <0x00> is id 3 */

static kiln_vocab *spm_vocab;

static kiln_vocab *load_vocab(const char *path) {
    kiln_gguf *g = NULL;
    kiln_vocab *v = NULL;
    CHECK_OK(kiln_gguf_open(path, &g));
    if (g) CHECK_OK(kiln_vocab_create(g, &v));
    kiln_gguf_close(g);
    return v;
}

/* Push ids one at a time, appending each push's output (then the flush) to text, separated by '|' so
 * the test can see where each piece came out. */
static void stream(const int32_t *ids, size_t n, bool strip, char *text, size_t cap) {
    kiln_detok *d = NULL;
    size_t len = 0;
    text[0] = '\0';
    CHECK_OK(kiln_detok_create(spm_vocab, strip, &d));
    if (!d) return;
    for (size_t i = 0; i <= n; i++) {
        kiln_str piece = {NULL, 0};
        if (i < n)
            CHECK_OK(kiln_detok_push(d, ids[i], &piece));
        else
            CHECK_OK(kiln_detok_flush(d, &piece));
        if (len + piece.len + 2 < cap) {
            memcpy(text + len, piece.data, piece.len);
            len += piece.len;
            text[len++] = '|';
            text[len] = '\0';
        }
    }
    kiln_detok_destroy(d);
}

static void joins_a_four_byte_character_split_over_byte_tokens(void) {
    const int32_t ids[] = {BYTE(0xF0), BYTE(0x9F), BYTE(0xA6), BYTE(0x99), 29889}; /* 🦙 . */
    char text[128];
    stream(ids, 5, true, text, sizeof text);
    CHECK_STR(text, "|||\xF0\x9F\xA6\x99|.||");
}

static void joins_a_three_byte_character_split_over_byte_tokens(void) {
    const int32_t ids[] = {BYTE(0xE2), BYTE(0x82), BYTE(0xAC)}; /* € */
    char text[128];
    stream(ids, 3, true, text, sizeof text);
    CHECK_STR(text, "||\xE2\x82\xAC||");
}

static void replaces_bytes_that_can_never_be_valid(void) {
    char text[128];
    const int32_t lone_continuation[] = {BYTE(0x80), BYTE(0x41)};
    stream(lone_continuation, 2, false, text, sizeof text);
    CHECK_STR(text, FFFD "|A||");
    const int32_t overlong[] = {BYTE(0xC0), BYTE(0xAF)};
    stream(overlong, 2, false, text, sizeof text);
    CHECK_STR(text, FFFD "|" FFFD "||");
    const int32_t surrogate[] = {BYTE(0xED), BYTE(0xA0), BYTE(0x80)};
    stream(surrogate, 3, false, text, sizeof text);
    CHECK_STR(text, "|" FFFD FFFD "|" FFFD "||");
    const int32_t too_big[] = {BYTE(0xF4), BYTE(0x90), BYTE(0xF5)};
    stream(too_big, 3, false, text, sizeof text);
    CHECK_STR(text, "|" FFFD FFFD "|" FFFD "||");
    const int32_t interrupted[] = {BYTE(0xE2), BYTE(0x82), 29874}; /* then the normal token "a" */
    stream(interrupted, 3, false, text, sizeof text);
    CHECK_STR(text, "||" FFFD "a||");
    const int32_t held_at_end[] = {BYTE(0xF0), BYTE(0x9F)};
    stream(held_at_end, 2, false, text, sizeof text);
    CHECK_STR(text, "||" FFFD "|");
}

static void strips_one_leading_space_of_the_first_text(void) {
    const int32_t ids[] = {1, 15043, 3186}; /* <s> ▁Hello ▁world */
    char text[128];
    stream(ids, 3, true, text, sizeof text);
    CHECK_STR(text, "|Hello| world||");
    stream(ids, 3, false, text, sizeof text);
    CHECK_STR(text, "| Hello| world||");
    const int32_t spaces[] = {259, 29871, 15043}; /* ▁▁ ▁ ▁Hello */
    stream(spaces, 3, true, text, sizeof text);
    CHECK_STR(text, " | | Hello||");
}

static void prints_each_token_type_as_documented(void) {
    /* llama-spm: 0 <unk> UNKNOWN, 1 <s> and 2 </s> CONTROL. */
    const int32_t ids[] = {15043, 0, 2, 3186};
    char text[128];
    stream(ids, 4, true, text, sizeof text);
    CHECK_STR(text, "Hello| \xE2\x81\x87 || world||");
}

static void sizes_the_one_shot_buffer(void) {
    const int32_t ids[] = {1, 15043, 3186};
    char buf[32];
    size_t n = 0;
    CHECK_STATUS(kiln_detokenize(spm_vocab, ids, 3, true, buf, 5, &n), KILN_E_RANGE);
    CHECK_EQ_INT(n, 11);
    CHECK_STR(buf, "Hell"); /* the longest prefix of whole characters that fits, terminated */
    CHECK_STATUS(kiln_detokenize(spm_vocab, ids, 3, true, NULL, 0, &n), KILN_E_RANGE);
    CHECK_EQ_INT(n, 11);
    CHECK_STATUS(kiln_detokenize(spm_vocab, ids, 3, true, buf, 11, &n), KILN_E_RANGE);
    CHECK_STR(buf, "Hello worl");
    const int32_t llama[] = {BYTE(0xF0), BYTE(0x9F), BYTE(0xA6), BYTE(0x99)};
    CHECK_STATUS(kiln_detokenize(spm_vocab, llama, 4, true, buf, 4, &n), KILN_E_RANGE);
    CHECK_EQ_INT(n, 4);
    CHECK_STR(buf, ""); /* never half a character */
    CHECK_OK(kiln_detokenize(spm_vocab, ids, 3, true, buf, 12, &n));
    CHECK_EQ_INT(n, 11);
    CHECK_STR(buf, "Hello world");
    CHECK_OK(kiln_detokenize(spm_vocab, NULL, 0, true, buf, 1, &n));
    CHECK_EQ_INT(n, 0);
    CHECK_STR(buf, "");
}

static void rejects_out_of_range_ids_and_null_arguments(void) {
    kiln_detok *d = NULL;
    kiln_str piece;
    char buf[16];
    size_t n = 0;
    CHECK_OK(kiln_detok_create(spm_vocab, true, &d));
    if (!d) return;
    CHECK_STATUS(kiln_detok_push(d, 32000, &piece), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("32000");
    CHECK_STATUS(kiln_detok_push(d, -1, &piece), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_detok_push(d, 1, NULL), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_detok_push(NULL, 1, &piece), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_detok_flush(NULL, &piece), KILN_E_INVALID_ARG);
    kiln_detok_destroy(d);
    kiln_detok_destroy(NULL);
    const int32_t bad[] = {15043, 40000};
    CHECK_STATUS(kiln_detokenize(spm_vocab, bad, 2, true, buf, sizeof buf, &n), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("ids[1]");
    CHECK_STATUS(kiln_detokenize(NULL, bad, 1, true, buf, sizeof buf, &n), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_detokenize(spm_vocab, NULL, 1, true, buf, sizeof buf, &n), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_detok_create(NULL, true, &d), KILN_E_INVALID_ARG);
}

/* Decode the JSON string after "text" in the section (escapes: \n \" \\ \t \/ only, as in the golden). */
static size_t json_text(const char *json, const char *section, char *out, size_t cap) {
    const char *p = strstr(json, section);
    p = p ? strstr(p, "\"text\"") : NULL;
    p = p ? strchr(p + 6, '"') : NULL;
    size_t n = 0;
    for (p = p ? p + 1 : NULL; p && *p && *p != '"' && n + 1 < cap; p++) {
        char c = *p;
        if (c == '\\') {
            c = *++p;
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
        }
        out[n++] = c;
    }
    out[n] = '\0';
    return n;
}

static void check_golden(kiln_vocab *v, const char *json, const char *section, const char *txt_file) {
    int32_t ids[512];
    char want[8192], got[8192];
    size_t n_ids = harness_json_ids(json, section, "\"token_ids\"", ids, 512), n_want = json_text(json, section, want, sizeof want),
           n = 0;
    CHECK(n_ids > 60 && n_want > 100);
    CHECK_EQ_INT(ids[0], 1);
    CHECK_OK(kiln_detokenize(v, ids + 1, n_ids - 1, true, got, sizeof got, &n));
    CHECK_EQ_INT(n, n_want);
    CHECK_STR(got, want);
    char *txt = harness_read_file(harness_data_path(txt_file), NULL);
    CHECK(txt != NULL);
    if (txt) CHECK_STR(got, txt);
    free(txt);
}

static void reproduces_the_stories_goldens(void) {
    kiln_vocab *v = load_vocab(KILN_MODEL_PATH);
    char *json = harness_read_file(harness_data_path("golden/stories260K_greedy.json"), NULL);
    CHECK(v && json);
    if (v && json) {
        check_golden(v, json, "\"bos_only_200\"", "golden/stories260K_bos_only_200.txt");
        check_golden(v, json, "\"once_upon_a_time_64\"", "golden/stories260K_once_upon_a_time_64.txt");
    }
    free(json);
    kiln_vocab_destroy(v);
}

int main(void) {
    spm_vocab = load_vocab(harness_data_path("vocab/ggml-vocab-llama-spm.gguf"));
    if (!spm_vocab) return harness_finish() + 1;
    RUN(joins_a_four_byte_character_split_over_byte_tokens);
    RUN(joins_a_three_byte_character_split_over_byte_tokens);
    RUN(replaces_bytes_that_can_never_be_valid);
    RUN(strips_one_leading_space_of_the_first_text);
    RUN(prints_each_token_type_as_documented);
    RUN(sizes_the_one_shot_buffer);
    RUN(rejects_out_of_range_ids_and_null_arguments);
    RUN(reproduces_the_stories_goldens);
    kiln_vocab_destroy(spm_vocab);
    return harness_finish();
}
