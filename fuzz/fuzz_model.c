/*
 * fuzz_model.c - libFuzzer target for model loading and a first decode on a hostile GGUF: hyperparameters,
 * tensor names, shapes and types, tied weights, the vocabulary and the chat template all come from the input.
 *
 * kiln_model_load takes a path (the library has no load-from-memory entry point), so each input is written
 * to one memfd made at start-up (memfd_create; truncated and rewritten per input, never on disk) and loaded
 * through /proc/self/fd/N, which the loader maps like any file. A rejected input must leave *out NULL and a
 * message. An accepted model must answer every getter; its chat template is detected; a short text is
 * tokenized and detokenized with its vocabulary; and a context of 8 cells on 1 thread runs one batch of two
 * tokens (ids 0 and n_vocab - 1): a decoder must give the logits it was asked for, an encoder (not causal)
 * a sentence embedding. A context or decode may fail with a named error (a model can load and still be
 * unrunnable, e.g. a Q8_0 cache it cannot hold), but must not crash. Any crash, sanitizer report, leak or
 * trap is a bug. Seeds: corpus/model (gen_model_corpus.c); dictionary model.dict.
 */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int fd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fd = memfd_create("fuzz_model", 0);
    if (fd < 0) {
        perror("fuzz_model: memfd_create");
        abort();
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return 0;
}

static bool put_input(const uint8_t *data, size_t size) {
    if (ftruncate(fd, 0) != 0) return false;
    for (size_t done = 0; done < size;) {
        ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
        if (n <= 0) return false;
        done += (size_t)n;
    }
    return true;
}

static void use_vocab(const kiln_vocab *v) {
    static const char text[] = "ab a\n<|im_start|>hello!";
    int32_t ids[64];
    size_t n = 0, len = 0;
    char out[256];
    if (kiln_tokenize_special(v, text, sizeof text - 1, true, true, ids, 64, &n) != KILN_OK) return;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= kiln_vocab_n_tokens(v)) __builtin_trap();
    kiln_status st = kiln_detokenize(v, ids, n, true, out, sizeof out, &len);
    if (st != KILN_OK && st != KILN_E_RANGE) __builtin_trap();
}

static void decode(kiln_model *m) {
    kiln_ctx_params p = kiln_ctx_params_default();
    kiln_ctx *ctx = NULL;
    kiln_batch b;
    int32_t n_vocab = kiln_model_n_vocab(m);
    bool encoder = !kiln_model_is_causal(m);
    p.n_ctx = 8;
    p.n_batch = 8;
    p.embeddings = encoder;
    if (encoder && kiln_model_pooling(m) == KILN_POOLING_NONE) p.pooling = KILN_POOLING_MEAN;
    if (kiln_ctx_create(m, &p, &ctx) != KILN_OK) {
        if (ctx != NULL || kiln_last_error()[0] == '\0') __builtin_trap();
        return;
    }
    if (kiln_batch_init(2, &b) != KILN_OK) goto done;
    kiln_batch_add(&b, 0, 0, 0, false);
    kiln_batch_add(&b, n_vocab - 1, 1, 0, true);
    kiln_status st = kiln_ctx_decode_batch(ctx, &b);
    if (st == KILN_OK) {
        const float *out = encoder ? kiln_ctx_embeddings_seq(ctx, 0) : kiln_ctx_logits(ctx, 1);
        size_t n = encoder ? (size_t)kiln_model_n_embd(m) : (size_t)n_vocab;
        if (!out) __builtin_trap();
        volatile float sink = out[0] + out[n - 1];
        (void)sink;
        if (!encoder && kiln_ctx_logits(ctx, 0) != NULL) __builtin_trap(); /* it did not ask */
    } else if (kiln_last_error()[0] == '\0') {
        __builtin_trap();
    }
    kiln_batch_free(&b);
done:
    kiln_ctx_destroy(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_model *m = NULL;
    const kiln_chat_template *t = NULL;
    kiln_model_memory mem;
    if (!put_input(data, size)) return 0;
    mp.n_threads = 1;
    if (kiln_model_load_ex(path, &mp, &m) != KILN_OK) {
        if (m != NULL || kiln_last_error()[0] == '\0') __builtin_trap();
        return 0;
    }
    if (kiln_model_n_vocab(m) <= 0 || kiln_model_n_embd(m) <= 0 || kiln_model_n_threads(m) != 1 ||
        kiln_model_arch(m)[0] == '\0' || kiln_model_vocab(m) == NULL || kiln_model_gguf(m) == NULL)
        __builtin_trap();
    if (kiln_model_memory_info(m, &mem) != KILN_OK || mem.file_bytes != size) __builtin_trap();
    if (kiln_chat_template_detect(kiln_model_gguf(m), &t) == KILN_OK && t == NULL) __builtin_trap();
    use_vocab(kiln_model_vocab(m));
    decode(m);
    kiln_model_destroy(m);
    return 0;
}
