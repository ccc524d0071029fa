/*
 * fuzz_batch.c - libFuzzer target for the batch API and the KV-cache calls (kiln_ctx_decode_batch,
 * kiln_ctx_decode, kiln_kv_seq_rm/cp/keep, kiln_ctx_reset) on one small model, checked after every step
 * against the model of the cache that tests/test_kv_cache.c uses (tests/kv_model.h).
 *
 * The model is corpus/model/llama3_tied.gguf (loaded once); each input starts from a reset context of 16
 * cells, n_batch 8 and 4 sequences, and is read as a list of operations (one opcode byte, then its
 * arguments; an input that runs out ends the list):
 *   0 batch     n byte, then per token a control byte and a value byte. The control byte picks the
 *               sequence (0..3, or 4 / -1 / 5: out of range), asks for logits, and says whether the position
 *               is the one that continues the sequence or the value byte's; the value byte is the token
 *               (with one in four control values asking for an id just outside the vocabulary).
 *               n may exceed n_batch.
 *   1 seq_rm    seq, p0, p1 (signed bytes; -1 is "open", -1 for seq is every sequence)
 *   2 seq_cp    src, dst, p0, p1
 *   3 seq_keep  seq
 *   4 reset
 *   5 decode    n byte and n token bytes through kiln_ctx_decode (sequence 0)
 * For each call the status the header promises is computed from the model of the cache first (the order of
 * checks: batch size, then each token's id, sequence and position, then free cells), and the call must
 * return exactly it; an accepted call is applied to the model, a refused one must change nothing. After
 * every step the public observations (kiln_kv_seq_pos_max of every id, kiln_kv_n_used, kiln_ctx_n_past)
 * must equal the model's and the cell table must pass its own invariant check (kiln__kv_check). An
 * accepted batch has logits exactly for the tokens that asked. Seeds: corpus/batch; dictionary batch.dict.
 */
#include "kiln.h"
#include "runtime/context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CTX 16
#define N_SEQ 4
#define N_BATCH 8
#define POS_LIMIT 8192 /* an input of at most a few KB cannot reach it; batches that would are skipped */

#include "kv_model.h"

static kiln_model *model;
static kiln_ctx *ctx;
static kiln_batch batch;
static int32_t n_vocab;
static kv_model m;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_ctx_params p = kiln_ctx_params_default();
    (void)argc, (void)argv;
    mp.n_threads = 1;
    p.n_ctx = N_CTX;
    p.n_batch = N_BATCH;
    p.n_seq_max = N_SEQ;
    if (kiln_model_load_ex(KILN_FUZZ_MODEL_DIR "/llama3_tied.gguf", &mp, &model) != KILN_OK ||
        kiln_ctx_create(model, &p, &ctx) != KILN_OK || kiln_batch_init(2 * N_BATCH, &batch) != KILN_OK) {
        fprintf(stderr, "fuzz_batch: %s\n", kiln_last_error());
        abort();
    }
    n_vocab = kiln_model_n_vocab(model);
    return 0;
}

typedef struct reader {
    const uint8_t *p, *end;
} reader;

static bool get(reader *r, uint8_t *out) {
    if (r->p == r->end) return false;
    *out = *r->p++;
    return true;
}

static int32_t seq_of(uint8_t b) {
    static const int32_t ids[8] = {0, 1, 2, 3, 0, 1, N_SEQ, -1};
    return ids[b & 7];
}

/* The public observations equal the model's; the cell table is consistent. */
static void check_invariants(void) {
    for (int32_t s = -2; s <= N_SEQ; s++) {
        int32_t want = s >= 0 && s < N_SEQ ? model_pos_max(&m, s) : -1;
        if (kiln_kv_seq_pos_max(ctx, s) != want) __builtin_trap();
    }
    if (kiln_kv_n_used(ctx) != model_used(&m)) __builtin_trap();
    if (kiln_ctx_n_past(ctx) != model_pos_max(&m, 0) + 1) __builtin_trap();
    if (kiln__kv_check(&ctx->cells) != KILN_OK) __builtin_trap();
}

static void expect(kiln_status got, kiln_status want) {
    if (got != want) __builtin_trap();
    if (got != KILN_OK && kiln_last_error()[0] == '\0') __builtin_trap();
}

/* The status kiln_ctx_decode_batch promises for `batch` in the model's state. */
static kiln_status batch_status(void) {
    int32_t next[N_SEQ];
    if (batch.n_tokens < 1 || batch.n_tokens > N_BATCH) return KILN_E_INVALID_ARG;
    for (int32_t s = 0; s < N_SEQ; s++)
        next[s] = model_pos_max(&m, s) + 1;
    for (int32_t i = 0; i < batch.n_tokens; i++) {
        int32_t s = batch.seq_id[i];
        if (batch.token[i] < 0 || batch.token[i] >= n_vocab || s < 0 || s >= N_SEQ) return KILN_E_INVALID_ARG;
        if (batch.pos[i] != next[s]) return KILN_E_INVALID_ARG;
        next[s]++;
    }
    return batch.n_tokens > N_CTX - model_used(&m) ? KILN_E_CONTEXT_FULL : KILN_OK;
}

static bool op_batch(reader *r) {
    uint8_t n, c, v;
    int32_t next[N_SEQ];
    if (!get(r, &n)) return false;
    n = (uint8_t)(1 + n % (N_BATCH + 2));
    kiln_batch_clear(&batch);
    for (int32_t s = 0; s < N_SEQ; s++)
        next[s] = model_pos_max(&m, s) + 1;
    for (uint8_t i = 0; i < n; i++) {
        if (!get(r, &c) || !get(r, &v)) return false;
        int32_t s = seq_of(c), token = v % n_vocab;
        bool cont = ((c >> 4) & 3) != 3, logits = (c >> 3) & 1;
        int32_t pos = cont && s >= 0 && s < N_SEQ ? next[s]++ : (int8_t)v;
        if ((c >> 6) == 3) token = v & 1 ? n_vocab : -1;
        if (pos >= POS_LIMIT) return false;
        kiln_batch_add(&batch, token, pos, s, logits);
    }
    kiln_status want = batch_status();
    expect(kiln_ctx_decode_batch(ctx, &batch), want);
    if (want != KILN_OK) return true;
    int32_t last = -1;
    for (int32_t i = 0; i < batch.n_tokens; i++) {
        model_add(&m, batch.seq_id[i], batch.pos[i], batch.token[i]);
        if ((kiln_ctx_logits(ctx, i) != NULL) != (batch.logits[i] != 0)) __builtin_trap();
        if (batch.logits[i]) last = i;
    }
    if (kiln_ctx_logits(ctx, -1) != (last >= 0 ? kiln_ctx_logits(ctx, last) : NULL)) __builtin_trap();
    if (kiln_ctx_logits(ctx, batch.n_tokens) != NULL) __builtin_trap();
    return true;
}

static bool valid_seq(int32_t s) {
    return s >= 0 && s < N_SEQ;
}

static bool empty_range(int32_t p0, int32_t p1) {
    return p1 >= 0 && (p0 < 0 ? 0 : p0) >= p1;
}

static bool op_rm(reader *r) {
    uint8_t s, a, b;
    if (!get(r, &s) || !get(r, &a) || !get(r, &b)) return false;
    int32_t seq = seq_of(s), p0 = (int8_t)a, p1 = (int8_t)b;
    bool ok = (valid_seq(seq) || seq == -1) && !empty_range(p0, p1);
    expect(kiln_kv_seq_rm(ctx, seq, p0, p1), ok ? KILN_OK : KILN_E_INVALID_ARG);
    if (ok) model_rm(&m, seq, p0, p1);
    return true;
}

static bool op_cp(reader *r) {
    uint8_t s, d, a, b;
    if (!get(r, &s) || !get(r, &d) || !get(r, &a) || !get(r, &b)) return false;
    int32_t src = seq_of(s), dst = seq_of(d), p0 = (int8_t)a, p1 = (int8_t)b;
    bool held_own = false;
    bool ok = valid_seq(src) && valid_seq(dst) && !empty_range(p0, p1);
    for (int32_t c = 0; ok && src != dst && c < N_CTX; c++)
        if ((m.cell[c].seqs >> dst & 1u) && !(m.cell[c].seqs >> src & 1u) && in_range(m.cell[c].pos, p0, p1))
            held_own = true;
    ok = ok && !held_own;
    expect(kiln_kv_seq_cp(ctx, src, dst, p0, p1), ok ? KILN_OK : KILN_E_INVALID_ARG);
    if (ok) model_cp(&m, src, dst, p0, p1);
    return true;
}

static bool op_keep(reader *r) {
    uint8_t s;
    if (!get(r, &s)) return false;
    int32_t seq = seq_of(s);
    expect(kiln_kv_seq_keep(ctx, seq), valid_seq(seq) ? KILN_OK : KILN_E_INVALID_ARG);
    if (valid_seq(seq)) model_keep(&m, seq);
    return true;
}

static bool op_decode(reader *r) {
    uint8_t n, v;
    int32_t toks[2 * N_CTX];
    const float *logits = NULL;
    bool bad = false;
    if (!get(r, &n)) return false;
    n = (uint8_t)(n % (2 * N_CTX));
    for (uint8_t i = 0; i < n; i++) {
        if (!get(r, &v)) return false;
        toks[i] = v < 250 ? v % n_vocab : n_vocab + (v & 1) * -(n_vocab + 1); /* n_vocab or -1 */
        bad = bad || toks[i] < 0 || toks[i] >= n_vocab;
    }
    int32_t p0 = model_pos_max(&m, 0) + 1;
    if (p0 + n >= POS_LIMIT) return false;
    kiln_status want = n == 0                       ? KILN_E_INVALID_ARG
                       : n > N_CTX - model_used(&m) ? KILN_E_CONTEXT_FULL
                       : bad                        ? KILN_E_INVALID_ARG
                                                    : KILN_OK;
    expect(kiln_ctx_decode(ctx, toks, n, &logits), want);
    if (want != KILN_OK) return true;
    if (!logits) __builtin_trap();
    for (int32_t i = 0; i < n; i++)
        model_add(&m, 0, p0 + i, toks[i]);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, data + size};
    uint8_t op;
    kiln_ctx_reset(ctx);
    model_reset(&m);
    check_invariants();
    while (get(&r, &op)) {
        bool more;
        switch (op % 6) {
        case 0: more = op_batch(&r); break;
        case 1: more = op_rm(&r); break;
        case 2: more = op_cp(&r); break;
        case 3: more = op_keep(&r); break;
        case 4:
            kiln_ctx_reset(ctx);
            model_reset(&m);
            more = true;
            break;
        default: more = op_decode(&r); break;
        }
        check_invariants();
        if (!more) break;
    }
    return 0;
}
