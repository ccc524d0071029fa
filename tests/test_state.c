/*
 * test_state.c - saving and restoring a sequence's KV state (kiln_ctx_state_save/load/get/set).
 *
 * The specification: a sequence saved after its prompt and a few greedy tokens, and loaded into a fresh
 * context, continues exactly as the uninterrupted one does: the same greedy tokens and bit-identical
 * logits (the restored cells sit where the uninterrupted context put them, so every sum runs in the same
 * order), for one sequence and for three sequences decoded afterwards in shared batches, with f32, f16 and
 * q8_0 caches. The reference is the uninterrupted run of the same library; the uninterrupted greedy tokens
 * themselves are llama.cpp's golden ids (tests/data/golden, see its README), so the comparison is anchored.
 * A restore into a different cell layout (the sequences loaded in another order) is checked against the
 * same run within the 1e-4 bound of test_kv_cache.c. On a Vulkan device (lavapipe) the cache lives in
 * device memory and the rows move through the buffer verbs; the f32 case is bit-identical there too
 * (skipped without a device). Then the corrupt-file corpus: every malformed file
 * is refused with a named error and changes nothing in the context.
 */
#include "harness.h"
#include "runtime/context.h" /* the Vulkan test checks where the cache lives */

#include <math.h>
#include <stdlib.h>

#define N_CTX 256
#define N_GEN 24   /* greedy tokens decoded after the save, in both runs */
#define N_BEFORE 8 /* greedy tokens decoded before the save */
#define N_SEQS 3

static kiln_model *model;

static char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", KILN_TEST_TMP, name);
    return p;
}

static kiln_ctx *make_ctx(kiln_type kv, int32_t n_seq) {
    kiln_ctx_params p = harness_ctx_params();
    kiln_ctx *c = NULL;
    p.n_ctx = N_CTX;
    p.n_batch = 64;
    p.n_seq_max = n_seq;
    p.kv_type = kv;
    CHECK_OK(kiln_ctx_create(model, &p, &c));
    return c;
}

/* A sequence's history: its tokens so far and the next token to decode. */
typedef struct hist {
    int32_t tok[N_CTX];
    int32_t n;
    int32_t next;
} hist;

/* Decode one batch holding the next token of each listed sequence; record argmax and copy the logits. */
static void step(kiln_ctx *c, hist *h, const int32_t *seqs, int32_t n_seqs, float *logits_out) {
    kiln_batch b;
    int32_t V = kiln_model_n_vocab(model);
    CHECK_OK(kiln_batch_init(N_SEQS, &b));
    for (int32_t i = 0; i < n_seqs; i++) {
        hist *s = &h[seqs[i]];
        CHECK_OK(kiln_batch_add(&b, s->next, s->n, seqs[i], true));
    }
    CHECK_OK(kiln_ctx_decode_batch(c, &b));
    for (int32_t i = 0; i < n_seqs; i++) {
        hist *s = &h[seqs[i]];
        const float *l = kiln_ctx_logits(c, i);
        CHECK(l != NULL);
        if (!l) break;
        memcpy(logits_out + (size_t)i * (size_t)V, l, (size_t)V * sizeof *l);
        s->tok[s->n++] = s->next;
        s->next = harness_argmax(l, V);
    }
    kiln_batch_free(&b);
}

/* Prefill sequence seq with its prompt (its own batch, so its cells are contiguous) and take the first
 * greedy token. */
static void prefill(kiln_ctx *c, hist *h, int32_t seq, const int32_t *prompt, int32_t n) {
    kiln_batch b;
    CHECK_OK(kiln_batch_init(64, &b));
    for (int32_t i = 0; i < n; i++)
        CHECK_OK(kiln_batch_add(&b, prompt[i], i, seq, i == n - 1));
    CHECK_OK(kiln_ctx_decode_batch(c, &b));
    memcpy(h[seq].tok, prompt, (size_t)n * sizeof *prompt);
    h[seq].n = n;
    h[seq].next = harness_argmax(kiln_ctx_logits(c, -1), kiln_model_n_vocab(model));
    kiln_batch_free(&b);
}

/* Prompts: the golden "Once upon a time" prompt, and two shifted copies of it. */
static void prompts(harness_golden *g, int32_t prompt[N_SEQS][16], int32_t *n) {
    harness_golden_load("\"once_upon_a_time_64\"", g);
    *n = (int32_t)g->n_prompt;
    for (int32_t s = 0; s < N_SEQS; s++)
        for (int32_t i = 0; i < *n; i++)
            prompt[s][i] = i == 0 ? g->prompt[0] : g->prompt[1 + (i - 1 + s) % (*n - 1)];
}

/* The whole scenario for n_seqs sequences: run A prefills each sequence and decodes N_BEFORE steps of it,
 * saves each sequence, and decodes N_GEN more steps of all of them in shared batches; run B loads the files
 * (in `order`) into a fresh context and decodes the same N_GEN steps. exact: logits must be bit-identical;
 * else within 1e-4 of the logit scale. */
static void continue_equals_uninterrupted(kiln_type kv, int32_t n_seqs, const int32_t *order, bool exact) {
    static hist ha[N_SEQS], hb[N_SEQS];
    harness_golden g;
    int32_t prompt[N_SEQS][16], n_prompt, seqs[N_SEQS], V = kiln_model_n_vocab(model);
    float *la = malloc((size_t)N_GEN * N_SEQS * (size_t)V * sizeof(float));
    float *lb = malloc((size_t)N_GEN * N_SEQS * (size_t)V * sizeof(float));
    kiln_ctx *a = make_ctx(kv, n_seqs), *b = make_ctx(kv, n_seqs);
    if (!a || !b || !la || !lb) goto done;
    prompts(&g, prompt, &n_prompt);
    /* Each sequence's prompt and first tokens alone, so its cells are contiguous as a load makes them. */
    for (int32_t s = 0; s < n_seqs; s++) {
        seqs[s] = s;
        prefill(a, ha, s, prompt[s], n_prompt);
        for (int32_t k = 0; k < N_BEFORE; k++)
            step(a, ha, &seqs[s], 1, la);
    }
    for (int32_t s = 0; s < n_seqs; s++) {
        char name[64];
        snprintf(name, sizeof name, "state_%d_%d.kvs", (int)kv, s);
        CHECK_OK(kiln_ctx_state_save(a, tmp_path(name), s, ha[s].tok, ha[s].n));
        hb[s].next = ha[s].next;
    }
    for (int32_t k = 0; k < N_GEN; k++)
        step(a, ha, seqs, n_seqs, la + (size_t)k * N_SEQS * (size_t)V);
    for (int32_t i = 0; i < n_seqs; i++) {
        char name[64];
        int32_t s = order[i];
        snprintf(name, sizeof name, "state_%d_%d.kvs", (int)kv, s);
        CHECK_OK(kiln_ctx_state_load(b, tmp_path(name), s, hb[s].tok, N_CTX, &hb[s].n));
        CHECK_EQ_INT(hb[s].n, n_prompt + N_BEFORE);
        CHECK_EQ_INT(kiln_kv_seq_pos_max(b, s), n_prompt + N_BEFORE - 1);
    }
    for (int32_t k = 0; k < N_GEN; k++)
        step(b, hb, seqs, n_seqs, lb + (size_t)k * N_SEQS * (size_t)V);
    for (int32_t s = 0; s < n_seqs; s++) {
        CHECK_EQ_INT(hb[s].n, ha[s].n);
        CHECK(memcmp(ha[s].tok, hb[s].tok, (size_t)ha[s].n * sizeof(int32_t)) == 0);
    }
    if (kv == KILN_TYPE_F32 && n_seqs == 1) /* the uninterrupted run is llama.cpp's greedy continuation */
        for (int32_t i = 0; i < ha[0].n && i < (int32_t)g.n_ids; i++)
            CHECK_EQ_INT(ha[0].tok[i], g.ids[i]);
    if (exact) {
        CHECK(memcmp(la, lb, (size_t)N_GEN * N_SEQS * (size_t)V * sizeof(float)) == 0);
    } else {
        double scale = 0, worst = 0;
        for (size_t i = 0; i < (size_t)N_GEN * N_SEQS * (size_t)V; i++) {
            scale = fmax(scale, fabs(la[i]));
            worst = fmax(worst, fabs(la[i] - lb[i]));
        }
        CHECK(worst <= 1e-4 * scale);
    }
done:
    kiln_ctx_destroy(a);
    kiln_ctx_destroy(b);
    free(la);
    free(lb);
}

static const int32_t IN_ORDER[N_SEQS] = {0, 1, 2}, REVERSED[N_SEQS] = {2, 0, 1};

static void one_sequence_continues_bit_identically_f32(void) {
    continue_equals_uninterrupted(KILN_TYPE_F32, 1, IN_ORDER, true);
}
static void one_sequence_continues_bit_identically_f16(void) {
    continue_equals_uninterrupted(KILN_TYPE_F16, 1, IN_ORDER, true);
}
static void one_sequence_continues_bit_identically_q8_0(void) {
    continue_equals_uninterrupted(KILN_TYPE_Q8_0, 1, IN_ORDER, true);
}
static void three_sequences_in_shared_batches_continue_bit_identically(void) {
    continue_equals_uninterrupted(KILN_TYPE_F32, N_SEQS, IN_ORDER, true);
    continue_equals_uninterrupted(KILN_TYPE_F16, N_SEQS, IN_ORDER, true);
    continue_equals_uninterrupted(KILN_TYPE_Q8_0, N_SEQS, IN_ORDER, true);
}
static void sequences_restored_into_other_cells_continue_within_tolerance(void) {
    continue_equals_uninterrupted(KILN_TYPE_F32, N_SEQS, REVERSED, false);
}

/* On a Vulkan device (lavapipe here) the cache lives in device memory: save and load move its rows
 * through the buffer verbs, and a restored sequence still continues bit-identically. Skipped without a
 * Vulkan device. */
static void a_device_resident_cache_saves_and_restores_through_the_buffer_verbs(void) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_model *vk = NULL, *cpu = model;
    mp.devices = "vulkan";
    CHECK_OK(kiln_model_load_ex(KILN_MODEL_PATH, &mp, &vk));
    if (!vk) return;
    if (kiln_model_device_note(vk)) {
        printf("  skipped: %s\n", kiln_model_device_note(vk));
    } else {
        kiln_ctx *c;
        model = vk;
        if ((c = make_ctx(KILN_TYPE_F32, 1))) {
            CHECK(c->kv.backend != c->engine->cpu); /* the cache is in the device's memory */
            kiln_ctx_destroy(c);
        }
        continue_equals_uninterrupted(KILN_TYPE_F32, 1, IN_ORDER, true);
        model = cpu;
    }
    kiln_model_destroy(vk);
}

/* A context holding one sequence of the golden prompt, and that sequence's state in memory. */
typedef struct fixture {
    kiln_ctx *c;
    int32_t tok[16];
    int32_t n;
    uint8_t *state;
    size_t size;
} fixture;

static void fixture_make(fixture *f, kiln_type kv) {
    harness_golden g;
    const float *logits;
    memset(f, 0, sizeof *f);
    harness_golden_load("\"once_upon_a_time_64\"", &g);
    f->n = (int32_t)g.n_prompt;
    memcpy(f->tok, g.prompt, (size_t)f->n * sizeof(int32_t));
    if (!(f->c = make_ctx(kv, 2))) return;
    CHECK_OK(kiln_ctx_decode(f->c, f->tok, f->n, &logits));
    CHECK_OK(kiln_ctx_state_size(f->c, 0, f->n, &f->size));
    f->state = malloc(f->size);
    CHECK_OK(kiln_ctx_state_get(f->c, 0, f->tok, f->n, f->state, f->size));
}

static void fixture_free(fixture *f) {
    kiln_ctx_destroy(f->c);
    free(f->state);
}

static void le32_put(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Recompute the trailing FNV-1a checksum after an edit, so that the edit itself is what is tested. */
static void reseal(uint8_t *s, size_t size) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size - 8; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    for (int i = 0; i < 8; i++)
        s[size - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
}

static void memory_and_file_hold_the_same_bytes(void) {
    fixture f;
    size_t size = 0;
    char *bytes;
    fixture_make(&f, KILN_TYPE_F16);
    if (!f.c) return;
    CHECK_OK(kiln_ctx_state_save(f.c, tmp_path("same.kvs"), 0, f.tok, f.n));
    bytes = harness_read_file(tmp_path("same.kvs"), &size);
    CHECK_EQ_INT(size, f.size);
    CHECK(bytes && memcmp(bytes, f.state, size) == 0);
    CHECK(memcmp(f.state, "KILNKVST", 8) == 0);
    free(bytes);
    fixture_free(&f);
}

/* Load `bytes` into sequence 1 of f's context: it must fail with `status` and a message mentioning
 * `fragment`, and leave the cache as it was. */
static void refused(fixture *f, const uint8_t *bytes, size_t size, kiln_status status, const char *fragment) {
    int32_t tok[32], n = -7, used = kiln_kv_n_used(f->c), pm0 = kiln_kv_seq_pos_max(f->c, 0);
    CHECK_STATUS(kiln_ctx_state_set(f->c, 1, bytes, size, tok, 32, &n), status);
    CHECK_ERROR_MENTIONS(fragment);
    CHECK_EQ_INT(n, -7);
    CHECK_EQ_INT(kiln_kv_n_used(f->c), used);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(f->c, 0), pm0);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(f->c, 1), -1);
}

/* One edit of the good state, resealed or not. */
static void refused_edit(fixture *f, size_t at, const void *patch, size_t len, bool seal, kiln_status status,
                         const char *fragment) {
    uint8_t *s = malloc(f->size);
    memcpy(s, f->state, f->size);
    memcpy(s + at, patch, len);
    if (seal) reseal(s, f->size);
    refused(f, s, f->size, status, fragment);
    free(s);
}

static void corrupt_states_are_refused_by_name(void) {
    fixture f;
    uint8_t w[8];
    size_t tokens_at = 64, pos_at, rows_at;
    fixture_make(&f, KILN_TYPE_F32);
    if (!f.c) return;
    pos_at = tokens_at + 4 * (size_t)f.n;
    rows_at = pos_at + 4 * (size_t)f.n;
    /* The good state loads into sequence 1 and gives back its history. */
    {
        int32_t tok[32], n = 0;
        CHECK_OK(kiln_ctx_state_set(f.c, 1, f.state, f.size, tok, 32, &n));
        CHECK_EQ_INT(n, f.n);
        CHECK(memcmp(tok, f.tok, (size_t)n * sizeof(int32_t)) == 0);
        CHECK_EQ_INT(kiln_kv_seq_pos_max(f.c, 1), f.n - 1);
        CHECK_OK(kiln_kv_seq_rm(f.c, 1, -1, -1));
    }
    refused(&f, f.state, 0, KILN_E_FORMAT, "truncated KV state");
    refused(&f, f.state, 40, KILN_E_FORMAT, "truncated KV state");
    refused(&f, f.state, f.size - 1, KILN_E_FORMAT, "truncated or trailing");
    refused(&f, f.state, rows_at + 3, KILN_E_FORMAT, "truncated or trailing");
    refused_edit(&f, 0, "KILNKVSX", 8, true, KILN_E_FORMAT, "bad magic");
    le32_put(w, 2);
    refused_edit(&f, 8, w, 4, true, KILN_E_UNSUPPORTED, "version 2");
    le32_put(w, KILN_TYPE_F16);
    refused_edit(&f, 12, w, 4, true, KILN_E_INVALID_ARG, "cache type f16");
    le32_put(w, 0xdeadbeef);
    refused_edit(&f, 16, w, 4, true, KILN_E_INVALID_ARG, "another model");
    le32_put(w, 7);
    refused_edit(&f, 24, w, 4, true, KILN_E_FORMAT, "7 layers");
    refused_edit(&f, 28, w, 4, true, KILN_E_FORMAT, "disagrees with the model");
    le32_put(w, 0x7fffffff);
    refused_edit(&f, 36, w, 4, true, KILN_E_FORMAT, "payload size");
    refused_edit(&f, 40, w, 4, true, KILN_E_FORMAT, "exceed KILN_MAX_CTX");
    le32_put(w, 1);
    refused_edit(&f, 44, w, 4, true, KILN_E_FORMAT, "reserved");
    refused_edit(&f, 56, w, 4, true, KILN_E_FORMAT, "payload size");
    le32_put(w, (uint32_t)kiln_model_n_vocab(model));
    refused_edit(&f, tokens_at + 4, w, 4, true, KILN_E_FORMAT, "token 512 at index 1");
    le32_put(w, 0xffffffffu);
    refused_edit(&f, pos_at, w, 4, true, KILN_E_FORMAT, "position -1 at index 0");
    le32_put(w, 0);
    refused_edit(&f, pos_at + 8, w, 4, true, KILN_E_FORMAT, "position 0 at index 2 does not follow 1");
    refused_edit(&f, rows_at + 5, "\x55", 1, false, KILN_E_FORMAT, "checksum");
    refused_edit(&f, f.size - 1, "\x55", 1, false, KILN_E_FORMAT, "checksum");
    {
        uint8_t *longer = calloc(1, f.size + 4);
        memcpy(longer, f.state, f.size);
        refused(&f, longer, f.size + 4, KILN_E_FORMAT, "trailing");
        free(longer);
    }
    /* A history longer than the caller's array, and a state larger than the free cells. */
    {
        int32_t tok[4], n = -7;
        CHECK_STATUS(kiln_ctx_state_set(f.c, 1, f.state, f.size, tok, 4, &n), KILN_E_RANGE);
        CHECK_ERROR_MENTIONS("array holds 4");
    }
    fixture_free(&f);
}

static void a_state_goes_only_into_its_own_model_and_cache_type(void) {
    fixture f;
    kiln_model *other = NULL;
    kiln_ctx *c = NULL, *c16 = NULL;
    int32_t tok[32], n = 0;
    fixture_make(&f, KILN_TYPE_F32);
    if (!f.c) return;
    CHECK_OK(kiln_model_load(harness_data_path("arch/llama3.gguf"), &other));
    if (other) {
        CHECK_OK(kiln_ctx_create(other, NULL, &c));
        if (c) {
            CHECK_STATUS(kiln_ctx_state_set(c, 0, f.state, f.size, tok, 32, &n), KILN_E_INVALID_ARG);
            CHECK_ERROR_MENTIONS("saved from another model");
            CHECK_EQ_INT(kiln_kv_n_used(c), 0);
        }
    }
    c16 = make_ctx(KILN_TYPE_F16, 1);
    if (c16) {
        CHECK_STATUS(kiln_ctx_state_set(c16, 0, f.state, f.size, tok, 32, &n), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("cache type f32 (0), this context's cache is f16");
    }
    kiln_ctx_destroy(c);
    kiln_ctx_destroy(c16);
    kiln_model_destroy(other);
    fixture_free(&f);
}

static void bad_arguments_and_files_are_named(void) {
    fixture f;
    int32_t tok[32], n = 0;
    kiln_ctx *small = NULL;
    kiln_ctx_params p = harness_ctx_params();
    fixture_make(&f, KILN_TYPE_F32);
    if (!f.c) return;
    CHECK_STATUS(kiln_ctx_state_load(f.c, tmp_path("no-such.kvs"), 0, tok, 32, &n), KILN_E_IO);
    CHECK_ERROR_MENTIONS("no-such.kvs");
    CHECK_STATUS(kiln_ctx_state_save(f.c, tmp_path("no-such-dir/x.kvs"), 0, tok, 0), KILN_E_IO);
    CHECK_ERROR_MENTIONS("no-such-dir");
    CHECK_STATUS(kiln_ctx_state_save(f.c, tmp_path("x.kvs"), 2, tok, 0), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("sequence id 2");
    CHECK_STATUS(kiln_ctx_state_save(f.c, tmp_path("x.kvs"), 0, NULL, 3), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_ctx_state_get(f.c, 0, f.tok, f.n, f.state, f.size - 1), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("the buffer has");
    p.n_ctx = 4;
    CHECK_OK(kiln_ctx_create(model, &p, &small));
    if (small) {
        CHECK_STATUS(kiln_ctx_state_set(small, 0, f.state, f.size, tok, 32, &n), KILN_E_CONTEXT_FULL);
        CHECK_ERROR_MENTIONS("of 4 are free");
    }
    kiln_ctx_destroy(small);
    /* An empty sequence round-trips as an empty state. */
    CHECK_OK(kiln_ctx_state_save(f.c, tmp_path("empty.kvs"), 1, NULL, 0));
    n = 5;
    CHECK_OK(kiln_ctx_state_load(f.c, tmp_path("empty.kvs"), 1, NULL, 0, &n));
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(f.c, 1), -1);
    fixture_free(&f);
}

int main(void) {
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &model));
    if (!model) return harness_finish();
    RUN(one_sequence_continues_bit_identically_f32);
    RUN(one_sequence_continues_bit_identically_f16);
    RUN(one_sequence_continues_bit_identically_q8_0);
    RUN(three_sequences_in_shared_batches_continue_bit_identically);
    RUN(sequences_restored_into_other_cells_continue_within_tolerance);
    RUN(a_device_resident_cache_saves_and_restores_through_the_buffer_verbs);
    RUN(memory_and_file_hold_the_same_bytes);
    RUN(corrupt_states_are_refused_by_name);
    RUN(a_state_goes_only_into_its_own_model_and_cache_type);
    RUN(bad_arguments_and_files_are_named);
    kiln_model_destroy(model);
    return harness_finish();
}
