/*
 * test_vocab.c - building a vocabulary from GGUF metadata: the real vocab files, the documented defaults,
 * and a corpus of malformed tokenizer keys, each of which must fail with a status and a message that
 * names the problem. Synthetic files are written in memory with the GGUF writer.
 */
#include "harness.h"

#include <stdlib.h>

/* A small synthetic vocab file under construction. */
typedef struct spec {
    const char *model; /* NULL: no tokenizer.ggml.model key */
    const char **tokens;
    int n_tokens; /* -1: no tokens key */
    const float *scores;
    int n_scores;
    const int32_t *types;
    int n_types;
    bool tokens_as_ints; /* write tokens as an INT32 array instead */
    int64_t bos;         /* -1: absent */
    bool add_bos_as_u32; /* write add_bos_token with the wrong type */
} spec;

static const char *small_tokens[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "ab", "<0x41>"};
static const int32_t small_types[] = {2, 3, 3, 1, 1, 1, 1, 6};
static const float small_scores[] = {0, 0, 0, -1, -2, -3, -0.5f, 0};

static spec small_spec(void) {
    spec s = {"llama", small_tokens, 8, small_scores, 8, small_types, 8, false, 1, false};
    return s;
}

/* Write the spec as a GGUF image allocated with the Kiln allocator (free with kiln_free). */
static kiln_status build_image(const spec *s, void **mem, size_t *size) {
    kiln_gguf_writer *w = NULL;
    kiln_str strs[16];
    int32_t ints[16];
    kiln_status st = kiln_gguf_writer_create(&w);
    if (st != KILN_OK) return st;
    if (s->model) kiln_gguf_writer_add_str(w, "tokenizer.ggml.model", s->model, strlen(s->model));
    if (s->n_tokens >= 0) {
        for (int i = 0; i < s->n_tokens; i++) {
            strs[i] = (kiln_str){s->tokens[i], strlen(s->tokens[i])};
            ints[i] = i;
        }
        if (s->tokens_as_ints)
            kiln_gguf_writer_add_array(w, "tokenizer.ggml.tokens", KILN_GGUF_INT32, ints,
                                       (uint64_t)s->n_tokens);
        else
            kiln_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", strs, (uint64_t)s->n_tokens);
    }
    if (s->scores)
        kiln_gguf_writer_add_array(w, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, s->scores,
                                   (uint64_t)s->n_scores);
    if (s->types)
        kiln_gguf_writer_add_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, s->types,
                                   (uint64_t)s->n_types);
    if (s->bos >= 0) {
        uint32_t bos = (uint32_t)s->bos;
        kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.bos_token_id", KILN_GGUF_UINT32, &bos);
    }
    if (s->add_bos_as_u32) {
        uint32_t one = 1;
        kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.add_bos_token", KILN_GGUF_UINT32, &one);
    }
    st = kiln_gguf_writer_write_memory(w, mem, size);
    kiln_gguf_writer_destroy(w);
    return st;
}

/* Open the image and build a vocab; the file is closed before returning, which also checks that the
 * vocab keeps its own copies. */
static kiln_status vocab_from_image(const void *mem, size_t size, kiln_vocab **out) {
    kiln_gguf *g = NULL;
    kiln_status st = kiln_gguf_open_memory(mem, size, &g);
    if (st == KILN_OK) st = kiln_vocab_create(g, out);
    kiln_gguf_close(g);
    return st;
}

static kiln_status build(const spec *s, kiln_vocab **out) {
    void *mem = NULL;
    size_t size = 0;
    kiln_status st = build_image(s, &mem, &size);
    if (st == KILN_OK) st = vocab_from_image(mem, size, out);
    kiln_free(mem);
    return st;
}

static kiln_vocab *load_file(const char *path) {
    kiln_gguf *g = NULL;
    kiln_vocab *v = NULL;
    CHECK_OK(kiln_gguf_open(path, &g));
    if (g) CHECK_OK(kiln_vocab_create(g, &v));
    kiln_gguf_close(g);
    return v;
}

static void reads_the_llama_spm_vocab(void) {
    kiln_vocab *v = load_file(harness_data_path("vocab/ggml-vocab-llama-spm.gguf"));
    if (!v) return;
    CHECK_EQ_INT(kiln_vocab_n_tokens(v), 32000);
    CHECK_EQ_INT(kiln_vocab_bos(v), 1);
    CHECK_EQ_INT(kiln_vocab_eos(v), 2);
    CHECK(kiln_vocab_add_bos(v));
    CHECK_STR(kiln_vocab_token_text(v, 1).data, "<s>");
    CHECK_STR(kiln_vocab_token_text(v, 29871).data, "\xE2\x96\x81");
    CHECK_STR(kiln_vocab_token_text(v, 3).data, "<0x00>");
    CHECK_EQ_INT(kiln_vocab_token_text(v, 32000).len, 0);
    CHECK_EQ_INT(kiln_vocab_token_text(v, -1).len, 0);
    kiln_vocab_destroy(v);
}

static void reads_the_phi3_and_stories_vocabs(void) {
    kiln_vocab *v = load_file(harness_data_path("vocab/ggml-vocab-phi-3.gguf"));
    if (v) {
        CHECK_EQ_INT(kiln_vocab_n_tokens(v), 32064);
        CHECK_EQ_INT(kiln_vocab_eos(v), 32000);
    }
    kiln_vocab_destroy(v);
    v = load_file(KILN_MODEL_PATH);
    if (v) {
        CHECK_EQ_INT(kiln_vocab_n_tokens(v), 512);
        CHECK_EQ_INT(kiln_vocab_bos(v), 1);
        CHECK(kiln_vocab_add_bos(v));
    }
    kiln_vocab_destroy(v);
}

static void applies_documented_defaults_for_absent_keys(void) {
    spec s = small_spec();
    s.scores = NULL;
    s.types = NULL;
    s.bos = -1;
    kiln_vocab *v = NULL;
    CHECK_OK(build(&s, &v));
    if (!v) return;
    CHECK_EQ_INT(kiln_vocab_bos(v), -1);
    CHECK_EQ_INT(kiln_vocab_eos(v), -1);
    CHECK(kiln_vocab_add_bos(v)); /* llama default */
    CHECK_EQ_INT(kiln_vocab_n_tokens(v), 8);
    kiln_vocab_destroy(v);
}

static void keeps_copies_after_the_file_closes(void) {
    spec s = small_spec();
    kiln_vocab *v = NULL;
    CHECK_OK(build(&s, &v));
    if (!v) return;
    CHECK_STR(kiln_vocab_token_text(v, 6).data, "ab");
    int32_t ids[8];
    size_t n = 0;
    CHECK_OK(kiln_tokenize(v, "ab", 2, true, ids, 8, &n));
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[0], 1);
    CHECK_EQ_INT(ids[1], 3);
    CHECK_EQ_INT(ids[2], 6);
    kiln_vocab_destroy(v);
}

static void finds_the_last_id_of_a_repeated_text(void) {
    const char *tokens[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "a", "<0x41>"};
    spec s = small_spec();
    s.tokens = tokens;
    kiln_vocab *v = NULL;
    CHECK_OK(build(&s, &v));
    if (!v) return;
    int32_t ids[4];
    size_t n = 0;
    CHECK_OK(kiln_tokenize(v, "a", 1, false, ids, 4, &n));
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[1], 6); /* as llama.cpp's text-to-id map does */
    kiln_vocab_destroy(v);
}

static void rejects_missing_or_mistyped_tokens(void) {
    kiln_vocab *v = NULL;
    spec s = small_spec();
    s.n_tokens = -1;
    s.scores = NULL;
    s.types = NULL;
    CHECK_STATUS(build(&s, &v), KILN_E_NOT_FOUND);
    CHECK_ERROR_MENTIONS("tokenizer.ggml.tokens");
    s = small_spec();
    s.tokens_as_ints = true;
    CHECK_STATUS(build(&s, &v), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("tokenizer.ggml.tokens");
    s = small_spec();
    s.n_tokens = 0;
    s.scores = NULL;
    s.types = NULL;
    s.bos = -1;
    CHECK_STATUS(build(&s, &v), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("empty");
    s = small_spec();
    s.model = NULL;
    CHECK_STATUS(build(&s, &v), KILN_E_NOT_FOUND);
    CHECK_ERROR_MENTIONS("tokenizer.ggml.model");
    CHECK(v == NULL);
}

static void rejects_arrays_whose_lengths_disagree(void) {
    kiln_vocab *v = NULL;
    spec s = small_spec();
    s.n_scores = 7;
    CHECK_STATUS(build(&s, &v), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("tokenizer.ggml.scores' has 7 entries but tokenizer.ggml.tokens has 8");
    s = small_spec();
    s.n_types = 5;
    CHECK_STATUS(build(&s, &v), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("has 5 entries but tokenizer.ggml.tokens has 8");
}

static void rejects_bad_token_types_and_byte_texts(void) {
    kiln_vocab *v = NULL;
    int32_t types[8];
    memcpy(types, small_types, sizeof types);
    spec s = small_spec();
    s.types = types;
    types[4] = 7;
    CHECK_STATUS(build(&s, &v), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("token_type[4] = 7");
    types[4] = 6; /* "a" claims to be a byte token */
    CHECK_STATUS(build(&s, &v), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("token 4 has type BYTE");
}

static void rejects_special_ids_outside_the_vocab(void) {
    kiln_vocab *v = NULL;
    spec s = small_spec();
    s.bos = 8;
    CHECK_STATUS(build(&s, &v), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("tokenizer.ggml.bos_token_id = 8");
    s.bos = 0xFFFFFFFFu;
    CHECK_STATUS(build(&s, &v), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("4294967295");
    s = small_spec();
    s.add_bos_as_u32 = true;
    CHECK_STATUS(build(&s, &v), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("add_bos_token");
}

static void loads_other_known_models_but_refuses_to_tokenize(void) {
    kiln_vocab *v = NULL;
    spec s = small_spec();
    s.model = "t5";
    CHECK_OK(build(&s, &v));
    if (!v) return;
    CHECK_STR(kiln_vocab_token_text(v, 6).data, "ab");
    CHECK(!kiln_vocab_add_bos(v));
    int32_t ids[4];
    size_t n = 99;
    CHECK_STATUS(kiln_tokenize(v, "ab", 2, false, ids, 4, &n), KILN_E_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("'t5'");
    kiln_detok *d = NULL;
    CHECK_STATUS(kiln_detok_create(v, true, &d), KILN_E_UNSUPPORTED);
    CHECK(d == NULL);
    kiln_vocab_destroy(v);
}

static void rejects_unknown_models_naming_them(void) {
    kiln_vocab *v = NULL;
    spec s = small_spec();
    s.model = "sentencepiece-v9";
    CHECK_STATUS(build(&s, &v), KILN_E_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("'sentencepiece-v9'");
}

static void rejects_null_arguments(void) {
    kiln_vocab *v = (kiln_vocab *)1;
    CHECK_STATUS(kiln_vocab_create(NULL, &v), KILN_E_INVALID_ARG);
    CHECK(v == NULL);
    CHECK_STATUS(kiln_vocab_create(NULL, NULL), KILN_E_INVALID_ARG);
    kiln_vocab_destroy(NULL);
    CHECK_EQ_INT(kiln_vocab_n_tokens(NULL), 0);
    CHECK_EQ_INT(kiln_vocab_bos(NULL), -1);
}

/* The allocator fails the n-th allocation; counts are kept so the test can sweep n. */
static struct {
    const void *image;
    size_t size;
    kiln_vocab *vocab;
} swept;

static kiln_status vocab_and_tokenize(void *user) {
    int32_t ids[8];
    size_t n;
    kiln_status st = vocab_from_image(swept.image, swept.size, &swept.vocab);
    (void)user;
    return st ? st : kiln_tokenize(swept.vocab, "a b", 3, true, ids, 8, &n);
}

static void destroy_vocab(void *user) {
    (void)user;
    kiln_vocab_destroy(swept.vocab);
    swept.vocab = NULL;
}

static void reports_every_allocation_failure(void) {
    /* Build the file image once with the normal allocator, then fail each later allocation in turn. */
    spec s = small_spec();
    void *mem = NULL;
    harness_sweep sw = {"kiln_vocab_create + kiln_tokenize", NULL, vocab_and_tokenize, destroy_vocab, NULL};
    CHECK_OK(build_image(&s, &mem, &swept.size));
    if (!mem) return;
    swept.image = mem;
    CHECK(harness_alloc_sweep(&sw) > 5);
    kiln_free(mem);
}

int main(void) {
    RUN(reads_the_llama_spm_vocab);
    RUN(reads_the_phi3_and_stories_vocabs);
    RUN(applies_documented_defaults_for_absent_keys);
    RUN(keeps_copies_after_the_file_closes);
    RUN(finds_the_last_id_of_a_repeated_text);
    RUN(rejects_missing_or_mistyped_tokens);
    RUN(rejects_arrays_whose_lengths_disagree);
    RUN(rejects_bad_token_types_and_byte_texts);
    RUN(rejects_special_ids_outside_the_vocab);
    RUN(loads_other_known_models_but_refuses_to_tokenize);
    RUN(rejects_unknown_models_naming_them);
    RUN(rejects_null_arguments);
    RUN(reports_every_allocation_failure);
    return harness_finish();
}
