/*
 * test_alloc_failures.c - every allocation of every public constructor, failed in turn: loading a model
 * (plain and with parameters), creating a context, the first decode (which compiles a plan and prepares
 * the model's weights), a batch of several sequences, the vocabulary and the sampler constructors, and
 * quantizing a file. Each run must fail with KILN_E_NOMEM and a message that says "out of memory", leave
 * no block allocated once its objects are destroyed, and the last run (which no failure reaches) must
 * succeed; harness_alloc_sweep (tests/harness.h) drives them. The GGUF reader and writer have their sweeps
 * in test_gguf_malformed.c and test_gguf_write.c, the serving engine in test_server_alloc.c.
 *
 * What the sweeps cannot reach: memory that libc and pthreads allocate themselves (thread stacks and
 * thread-local storage of the CPU thread pool, stdio buffers, the dynamic loader) and the file mapping
 * (mmap), which do not go through kiln__alloc. The bundled stories260K model keeps each sweep to a few
 * hundred runs.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Everything a sweep's steps make, released by teardown. */
static struct {
    kiln_model *model;
    kiln_ctx *ctx;
    kiln_gguf *gguf;
    kiln_vocab *vocab;
    kiln_sampler *sampler;
    kiln_batch batch;
    kiln_model_params model_params;
    const float *logits;
} s;

static void teardown(void *user) {
    (void)user;
    kiln_batch_free(&s.batch);
    kiln_ctx_destroy(s.ctx);
    kiln_model_destroy(s.model);
    kiln_sampler_destroy(s.sampler);
    kiln_vocab_destroy(s.vocab);
    kiln_gguf_close(s.gguf);
    memset(&s, 0, sizeof s);
}

static kiln_ctx_params small_ctx_params(void) {
    kiln_ctx_params p = kiln_ctx_params_default();
    p.n_ctx = 64;
    p.n_batch = 16;
    p.n_seq_max = 4;
    return p;
}

static kiln_status load_model(void *user) {
    (void)user;
    return kiln_model_load(KILN_MODEL_PATH, &s.model);
}

static kiln_status load_model_ex(void *user) {
    (void)user;
    return kiln_model_load_ex(KILN_MODEL_PATH, &s.model_params, &s.model);
}

static kiln_status create_ctx(void *user) {
    kiln_ctx_params p = small_ctx_params();
    (void)user;
    return kiln_ctx_create(s.model, &p, &s.ctx);
}

static kiln_status load_model_and_create_ctx(void *user) {
    kiln_status st = load_model(user);
    return st ? st : create_ctx(user);
}

static kiln_status decode_prompt(void *user) {
    static const int32_t prompt[] = {1, 403, 407, 261, 378, 505};
    (void)user;
    return kiln_ctx_decode(s.ctx, prompt, (int32_t)(sizeof prompt / sizeof prompt[0]), &s.logits);
}

/* Three sequences of different lengths in one batch, the last token of each asking for logits. */
static kiln_status decode_three_sequences(void *user) {
    static const int32_t lengths[3] = {4, 2, 5};
    kiln_status st = kiln_batch_init(16, &s.batch);
    (void)user;
    for (int32_t q = 0; !st && q < 3; q++)
        for (int32_t i = 0; !st && i < lengths[q]; i++)
            st = kiln_batch_add(&s.batch, 1 + 37 * q + 11 * i, i, q, i == lengths[q] - 1);
    return st ? st : kiln_ctx_decode_batch(s.ctx, &s.batch);
}

static kiln_status open_model_file(void *user) {
    (void)user;
    return kiln_gguf_open(KILN_MODEL_PATH, &s.gguf);
}

static kiln_status create_vocab(void *user) {
    int32_t ids[32];
    size_t n = 0;
    kiln_status st = kiln_vocab_create(s.gguf, &s.vocab);
    (void)user;
    return st ? st : kiln_tokenize(s.vocab, "Once upon a time", 16, true, ids, 32, &n);
}

static kiln_status create_sampler(void *user) {
    kiln_sampler_params p = kiln_sampler_params_default();
    p.repeat_penalty = 1.1f;
    (void)user;
    return kiln_sampler_create(512, &p, &s.sampler);
}

static const char *quantized_path(void) {
    return KILN_TEST_TMP "/alloc_failures_q8.gguf";
}

static kiln_status quantize(void *user) {
    kiln_quantize_params p = kiln_quantize_params_default();
    (void)user;
    p.mix = KILN_MIX_Q8_0;
    return kiln_quantize_file(KILN_MODEL_PATH, quantized_path(), &p, NULL, NULL);
}

static long sweep(const char *what, kiln_status (*setup)(void *), kiln_status (*op)(void *)) {
    harness_sweep sw = {what, setup, op, teardown, NULL};
    long n = harness_alloc_sweep(&sw);
    printf("     %s: %ld allocations failed in turn\n", what, n);
    return n;
}

static void every_allocation_of_kiln_model_load_fails_cleanly(void) {
    CHECK(sweep("kiln_model_load", NULL, load_model) > 10);
}

/* Two threads and the CPU backend named: the thread pool's own allocations are in the sweep too. */
static void every_allocation_of_kiln_model_load_ex_fails_cleanly(void) {
    s.model_params = kiln_model_params_default();
    s.model_params.n_threads = 2;
    s.model_params.devices = "cpu";
    CHECK(sweep("kiln_model_load_ex", NULL, load_model_ex) > 10);
}

static void every_allocation_of_kiln_ctx_create_fails_cleanly(void) {
    CHECK(sweep("kiln_ctx_create", load_model, create_ctx) > 3);
}

/* The first decode compiles the plan for its bucket and prepares the model's weights for the kernels:
 * a failure in either must leave the context and the model as they were. */
static void every_allocation_of_the_first_decode_fails_cleanly(void) {
    CHECK(sweep("the first kiln_ctx_decode", load_model_and_create_ctx, decode_prompt) > 3);
}

static void every_allocation_of_a_batch_of_three_sequences_fails_cleanly(void) {
    CHECK(sweep("kiln_ctx_decode_batch, 3 sequences", load_model_and_create_ctx, decode_three_sequences) > 3);
}

/* After every failure of the first decode the same context decodes correctly: the failed calls changed
 * nothing. The reference is a fresh context that never saw a failure. */
static void a_context_decodes_correctly_after_failed_decodes(void) {
    static const int32_t prompt[] = {1, 403, 407, 261, 378, 505};
    kiln_model *m = NULL;
    kiln_ctx *ref = NULL, *c = NULL;
    kiln_ctx_params p = small_ctx_params();
    const float *want = NULL, *got = NULL;
    float *copy = NULL;
    int32_t n_vocab;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    n_vocab = kiln_model_n_vocab(m);
    CHECK_OK(kiln_ctx_create(m, &p, &ref));
    CHECK_OK(kiln_ctx_decode(ref, prompt, 6, &want));
    copy = want ? malloc((size_t)n_vocab * sizeof *copy) : NULL;
    if (copy) memcpy(copy, want, (size_t)n_vocab * sizeof *copy);
    kiln_ctx_destroy(ref);
    kiln_model_destroy(m);
    m = NULL;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    CHECK_OK(kiln_ctx_create(m, &p, &c));
    harness_count_allocations();
    for (long k = 1; c && copy; k++) {
        kiln_status st;
        harness_fail_allocation(k);
        st = kiln_ctx_decode(c, prompt, 6, &got);
        harness_fail_allocation(0);
        if (st == KILN_OK) break;
        CHECK_STATUS(st, KILN_E_NOMEM);
        CHECK_EQ_INT(kiln_ctx_n_past(c), 0);
        if (st != KILN_E_NOMEM) break;
    }
    for (int32_t i = 0; got && copy && i < n_vocab; i++)
        if (got[i] != copy[i]) {
            harness_fail(__FILE__, __LINE__, "logit %d: %.9g after failed decodes, %.9g fresh", i, got[i],
                         copy[i]);
            break;
        }
    kiln_ctx_destroy(c);
    kiln_model_destroy(m);
    kiln_set_allocator(NULL);
    free(copy);
}

static void every_allocation_of_kiln_vocab_create_fails_cleanly(void) {
    CHECK(sweep("kiln_vocab_create + kiln_tokenize", open_model_file, create_vocab) > 3);
}

static void every_allocation_of_kiln_sampler_create_fails_cleanly(void) {
    CHECK(sweep("kiln_sampler_create", NULL, create_sampler) >= 1);
}

/* A failed quantization leaves no output (the writer renames a finished temporary file into place). */
static void every_allocation_of_kiln_quantize_file_fails_cleanly_and_leaves_no_file(void) {
    remove(quantized_path());
    for (long k = 1;; k++) {
        kiln_status st;
        harness_count_allocations();
        harness_fail_allocation(k);
        st = quantize(NULL);
        harness_fail_allocation(0);
        if (harness_live_blocks() != 0)
            harness_fail(__FILE__, __LINE__, "allocation %ld failing: %ld blocks left", k,
                         harness_live_blocks());
        if (st == KILN_OK) {
            CHECK(harness_allocations() < k);
            CHECK(access(quantized_path(), F_OK) == 0);
            printf("     kiln_quantize_file: %ld allocations failed in turn\n", k - 1);
            break;
        }
        CHECK_STATUS(st, KILN_E_NOMEM);
        CHECK_ERROR_MENTIONS("out of memory");
        if (access(quantized_path(), F_OK) == 0) {
            harness_fail(__FILE__, __LINE__, "allocation %ld failing left %s behind", k, quantized_path());
            remove(quantized_path());
        }
        if (st != KILN_E_NOMEM) break;
    }
    kiln_set_allocator(NULL);
    remove(quantized_path());
}

int main(void) {
    RUN(every_allocation_of_kiln_model_load_fails_cleanly);
    RUN(every_allocation_of_kiln_model_load_ex_fails_cleanly);
    RUN(every_allocation_of_kiln_ctx_create_fails_cleanly);
    RUN(every_allocation_of_the_first_decode_fails_cleanly);
    RUN(every_allocation_of_a_batch_of_three_sequences_fails_cleanly);
    RUN(a_context_decodes_correctly_after_failed_decodes);
    RUN(every_allocation_of_kiln_vocab_create_fails_cleanly);
    RUN(every_allocation_of_kiln_sampler_create_fails_cleanly);
    RUN(every_allocation_of_kiln_quantize_file_fails_cleanly_and_leaves_no_file);
    return harness_finish();
}
