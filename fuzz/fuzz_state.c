/*
 * fuzz_state.c - libFuzzer target for the KV state reader (kiln_ctx_state_set, the reader behind
 * kiln_ctx_state_load): a hostile state file restored into a live context.
 *
 * The model is models/stories260K.gguf (the bundled model, loaded once) with three contexts of 16 cells and 2
 * sequences, one per cache type (f32, f16, q8_0), each holding 3 tokens of sequence 0. Byte 0 of the input
 * picks the context (bits 0-1) and whether to recompute the trailing checksum over the rest (bit 2: without
 * it almost every mutation stops at the checksum, with it the fuzzer reaches the checks behind); the rest is
 * the state, loaded into sequence 1. A refused state must leave a message and the cache as it was
 * (sequence 0 untouched, sequence 1 empty, the cell table valid). An accepted one must hold sequence 1
 * at positions ending where the file says, decode one more token of it, and save back to exactly the
 * input's bytes with the history it gave back; then sequence 1 is cleared. Any crash, sanitizer report,
 * leak or trap is a bug. Seeds: corpus/state (gen_state_corpus.c); dictionary state.dict.
 */
#include "kiln.h"
#include "runtime/context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CTX 16

static kiln_model *model;
static kiln_ctx *ctxs[3];
static uint8_t *copy;
static size_t copy_cap;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    static const kiln_type types[3] = {KILN_TYPE_F32, KILN_TYPE_F16, KILN_TYPE_Q8_0};
    static const int32_t prefix[3] = {1, 2, 3};
    kiln_model_params mp = kiln_model_params_default();
    const float *logits;
    (void)argc, (void)argv;
    mp.n_threads = 1;
    if (kiln_model_load_ex(KILN_FUZZ_BUNDLED_MODEL, &mp, &model) != KILN_OK) goto fail;
    for (int i = 0; i < 3; i++) {
        kiln_ctx_params p = kiln_ctx_params_default();
        p.n_ctx = N_CTX;
        p.n_batch = 8;
        p.n_seq_max = 2;
        p.kv_type = types[i];
        if (kiln_ctx_create(model, &p, &ctxs[i]) != KILN_OK ||
            kiln_ctx_decode(ctxs[i], prefix, 3, &logits) != KILN_OK)
            goto fail;
    }
    return 0;
fail:
    fprintf(stderr, "fuzz_state: %s\n", kiln_last_error());
    abort();
}

static void reseal(uint8_t *s, size_t size) {
    uint64_t h = 0xcbf29ce484222325ull;
    if (size < 8) return;
    for (size_t i = 0; i < size - 8; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    for (int i = 0; i < 8; i++)
        s[size - 8 + (size_t)i] = (uint8_t)(h >> (8 * i));
}

static void check(bool ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "fuzz_state: %s (%s)\n", what, kiln_last_error());
    abort();
}

static void accepted(kiln_ctx *c, const uint8_t *state, size_t size, const int32_t *tok, int32_t n) {
    kiln_batch b;
    size_t again_size = 0;
    uint8_t *again;
    int32_t pm = kiln_kv_seq_pos_max(c, 1);
    check(pm >= -1 && pm < INT32_MAX, "a loaded sequence's last position");
    check(kiln_ctx_state_size(c, 1, n, &again_size) == KILN_OK && again_size == size, "state size");
    again = malloc(size);
    check(again && kiln_ctx_state_get(c, 1, tok, n, again, size) == KILN_OK, "saving a loaded state");
    check(memcmp(again, state, size) == 0, "a loaded state saves back to other bytes");
    free(again);
    if (pm + 1 < 512 && kiln_kv_n_used(c) < N_CTX && kiln_batch_init(1, &b) == KILN_OK) {
        kiln_batch_add(&b, 0, pm + 1, 1, true);
        check(kiln_ctx_decode_batch(c, &b) == KILN_OK && kiln_ctx_logits(c, 0), "decoding after a load");
        kiln_batch_free(&b);
    }
    check(kiln_kv_seq_rm(c, 1, -1, -1) == KILN_OK, "clearing sequence 1");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_ctx *c;
    int32_t tok[64], n = -1, used;
    kiln_status s;
    if (size < 1) return 0;
    c = ctxs[(data[0] & 3) % 3];
    if (!copy || size - 1 > copy_cap) {
        free(copy);
        copy_cap = size - 1;
        copy = malloc(copy_cap ? copy_cap : 1);
        if (!copy) abort();
    }
    memcpy(copy, data + 1, size - 1);
    if (data[0] & 4) reseal(copy, size - 1);
    used = kiln_kv_n_used(c);
    s = kiln_ctx_state_set(c, 1, copy, size - 1, tok, 64, &n);
    check(kiln__kv_check(&c->cells) == KILN_OK, "the cell table after a load");
    if (s != KILN_OK) {
        check(kiln_last_error()[0] != 0, "a refusal without a message");
        check(n == -1 && kiln_kv_n_used(c) == used && kiln_kv_seq_pos_max(c, 1) == -1 &&
                  kiln_kv_seq_pos_max(c, 0) == 2,
              "a refused state changed the cache");
        return 0;
    }
    accepted(c, copy, size - 1, tok, n);
    return 0;
}
