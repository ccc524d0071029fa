/*
 * test_kv_cache.c - the KV cache's public contract (include/kiln.h, kiln_ctx_decode_batch and kiln_kv_*)
 * under 2000 random operations on a small context (stories260K, n_ctx 64, n_seq_max 4, n_batch 16),
 * driven by a seeded PRNG so that a failure names an operation that can be replayed.
 *
 * The test keeps its own model of the cache, written from the header alone (tests/kv_model.h, shared with
 * fuzz/fuzz_batch.c): a set of cells, each holding one position and the set of sequences that share it. A
 * batch takes one new cell per token; seq_cp adds dst to src's cells in the range (no new cell); seq_rm
 * takes the sequence (every sequence for -1) off the cells in the range and frees a cell whose set becomes
 * empty; seq_keep frees every cell that does not hold the kept sequence and takes the others off the rest;
 * reset frees everything. A call that is refused (an invalid argument, a batch larger than the free cells)
 * changes nothing. After every operation the public observations must equal the model's:
 * kiln_kv_seq_pos_max of every sequence (and -1 outside 0 .. n_seq_max - 1), kiln_kv_n_used, kiln_ctx_n_past.
 *
 * Every 50 operations the K and V themselves are checked: a sequence whose cells form a clean history
 * (positions 0..P, each cell computed while its sequence held exactly the cells now before it; the model
 * tracks this per cell as a hash of the tokens it attended to) decodes one more token, and its logits
 * must equal those of an independent context that decodes the sequence's tokens from scratch: the same
 * argmax (unless the top two lie within the tolerance) and every logit within 1e-4 of the logit scale,
 * the bound test_batch.c derives for an F32 cache when only batch shapes and cell order differ.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>

#define N_CTX 64
#define N_SEQ 4
#define N_BATCH 16
#define N_OPS 2000
#define COMPARE_EVERY 50
#define POS_LIMIT 200 /* positions stay below this; the model knows 512 */
#define REL_TOL 1e-4
#define SEED 0x6b696c6e2d6b7600ull

#include "kv_model.h"

/* ---------------------------------------------------------------------------------------------------
 * The fuzzer
 * ------------------------------------------------------------------------------------------------- */

enum {
    OP_BATCH,         /* a valid batch that fits */
    OP_BATCH_FULL,    /* a valid batch larger than the free cells */
    OP_BATCH_INVALID, /* a batch with one invalid token */
    OP_RM,
    OP_CP,
    OP_CP_HELD, /* seq_cp into a sequence that holds a position of the range */
    OP_KEEP,
    OP_RESET,
    OP_KV_INVALID, /* rm/cp/keep with a bad id or an empty range */
    OP_COMPARE,    /* one token against an independent context */
    N_OP_KINDS
};

static const char *const OP_NAMES[N_OP_KINDS] = {
    "batch", "full batch", "invalid batch",   "rm",     "cp", "cp into held range",
    "keep",  "reset",      "invalid kv call", "compare"};

typedef struct fuzz {
    kiln_ctx *ctx, *ref;
    kiln_batch batch;
    kv_model m;
    int32_t n_vocab;
    uint64_t rng;
    int op;         /* the operation's index */
    char what[200]; /* what it did */
    int count[N_OP_KINDS];
    float *got; /* [n_vocab] */
    double worst;
} fuzz;

static uint32_t rnd(fuzz *f, uint32_t n) {
    f->rng ^= f->rng >> 12;
    f->rng ^= f->rng << 25;
    f->rng ^= f->rng >> 27;
    return (uint32_t)((f->rng * 0x2545f4914f6cdd1dull) >> 32) % n;
}

static int32_t free_cells(const fuzz *f) {
    return N_CTX - model_used(&f->m);
}

/* One past the largest position held by any sequence, at least 1. */
static int32_t pos_hi(const fuzz *f) {
    int32_t hi = 1;
    for (int32_t s = 0; s < N_SEQ; s++)
        if (model_pos_max(&f->m, s) + 2 > hi) hi = model_pos_max(&f->m, s) + 2;
    return hi;
}

/* The cache's observations equal the model's. */
static bool invariants_hold(fuzz *f) {
    bool ok = true;
    for (int32_t s = 0; s < N_SEQ; s++) {
        int32_t got = kiln_kv_seq_pos_max(f->ctx, s), want = model_pos_max(&f->m, s);
        if (got != want) {
            harness_fail(__FILE__, __LINE__, "op %d (%s): pos_max of sequence %d is %d, the model says %d",
                         f->op, f->what, s, got, want);
            ok = false;
        }
    }
    if (kiln_kv_n_used(f->ctx) != model_used(&f->m)) {
        harness_fail(__FILE__, __LINE__, "op %d (%s): %d cells in use, the model says %d", f->op, f->what,
                     kiln_kv_n_used(f->ctx), model_used(&f->m));
        ok = false;
    }
    if (kiln_ctx_n_past(f->ctx) != model_pos_max(&f->m, 0) + 1) {
        harness_fail(__FILE__, __LINE__, "op %d (%s): n_past %d, the model says %d", f->op, f->what,
                     kiln_ctx_n_past(f->ctx), model_pos_max(&f->m, 0) + 1);
        ok = false;
    }
    if (kiln_kv_seq_pos_max(f->ctx, -1) != -1 || kiln_kv_seq_pos_max(f->ctx, N_SEQ) != -1) {
        harness_fail(__FILE__, __LINE__, "op %d (%s): pos_max of an id out of range is not -1", f->op,
                     f->what);
        ok = false;
    }
    return ok;
}

static bool expect(fuzz *f, kiln_status got, kiln_status want) {
    if (got == want) return true;
    harness_fail(__FILE__, __LINE__, "op %d (%s) returned %s, expected %s (%s)", f->op, f->what,
                 kiln_status_name(got), kiln_status_name(want), kiln_last_error());
    return false;
}

/* Append up to k valid tokens, each to a random sequence at its next position (counting the tokens
 * already in the batch), with random logits flags. Returns how many it appended. */
static int32_t add_valid_tokens(fuzz *f, int32_t k, int32_t *next) {
    int32_t n = 0;
    for (; n < k; n++) {
        int32_t s = (int32_t)rnd(f, N_SEQ);
        for (int tries = 0; next[s] >= POS_LIMIT && tries < N_SEQ; tries++)
            s = (s + 1) % N_SEQ;
        if (next[s] >= POS_LIMIT) break;
        if (kiln_batch_add(&f->batch, (int32_t)rnd(f, (uint32_t)f->n_vocab), next[s]++, s, rnd(f, 3) == 0))
            break;
    }
    return n;
}

static void next_positions(const fuzz *f, int32_t *next) {
    for (int32_t s = 0; s < N_SEQ; s++)
        next[s] = model_pos_max(&f->m, s) + 1;
}

/* The logits of an accepted batch exist exactly for the tokens that asked; -1 is the last of them. */
static bool logits_as_asked(fuzz *f) {
    const kiln_batch *b = &f->batch;
    int32_t last = -1;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        const float *l = kiln_ctx_logits(f->ctx, i);
        if ((l != NULL) != (b->logits[i] != 0) || (l && !isfinite(l[0]))) {
            harness_fail(__FILE__, __LINE__, "op %d (%s): logits of token %d are %s, it asked %s", f->op,
                         f->what, i, l ? "there" : "NULL", b->logits[i] ? "yes" : "no");
            return false;
        }
        if (l) last = i;
    }
    const float *l1 = kiln_ctx_logits(f->ctx, -1), *ll = last >= 0 ? kiln_ctx_logits(f->ctx, last) : NULL;
    if ((l1 == NULL) != (ll == NULL) || (l1 && memcmp(l1, ll, (size_t)f->n_vocab * sizeof *l1) != 0)) {
        harness_fail(__FILE__, __LINE__, "op %d (%s): logits(-1) is not the last token that asked", f->op,
                     f->what);
        return false;
    }
    return true;
}

/* Run f->batch expecting `want`; on success the model takes its tokens. */
static bool run_batch(fuzz *f, kiln_status want) {
    const kiln_batch *b = &f->batch;
    if (!expect(f, kiln_ctx_decode_batch(f->ctx, b), want)) return false;
    if (want != KILN_OK) return true;
    for (int32_t i = 0; i < b->n_tokens; i++)
        model_add(&f->m, b->seq_id[i], b->pos[i], b->token[i]);
    return logits_as_asked(f);
}

static bool op_batch(fuzz *f, bool overfill) {
    int32_t next[N_SEQ], k, n, avail = free_cells(f);
    if (overfill) {
        if (avail >= N_BATCH) return true; /* cannot overfill within n_batch now */
        k = avail + 1 + (int32_t)rnd(f, (uint32_t)(N_BATCH - avail));
    } else {
        k = 1 + (int32_t)rnd(f, N_BATCH);
        if (k > avail && avail > 0) k = avail;
    }
    next_positions(f, next);
    kiln_batch_clear(&f->batch);
    n = add_valid_tokens(f, k, next);
    if (n == 0) return true;
    snprintf(f->what, sizeof f->what, "batch of %d tokens, %d cells free", n, avail);
    f->count[n > avail ? OP_BATCH_FULL : OP_BATCH]++;
    return run_batch(f, n > avail ? KILN_E_CONTEXT_FULL : KILN_OK);
}

/* A batch of valid tokens with one invalid token among them; it fits, so the error is the argument. */
static bool op_batch_invalid(fuzz *f) {
    int32_t next[N_SEQ], avail = free_cells(f), room = avail < N_BATCH ? avail : N_BATCH,
                         kind = (int32_t)rnd(f, 6);
    int32_t s = (int32_t)rnd(f, N_SEQ), tok = (int32_t)rnd(f, (uint32_t)f->n_vocab), pos, seq = s;
    static const char *const kinds[6] = {"a gap",
                                         "a held position",
                                         "a negative position",
                                         "a bad sequence id",
                                         "a token outside the vocabulary",
                                         "a sequence out of order"};
    if (room < 3) return true;
    next_positions(f, next);
    kiln_batch_clear(&f->batch);
    add_valid_tokens(f, (int32_t)rnd(f, (uint32_t)(room - 2)), next);
    if (kind == 1 && next[s] == 0) kind = 2;
    if ((kind == 0 || kind == 5) && next[s] + 4 >= POS_LIMIT) kind = 2;
    pos = next[s];
    switch (kind) {
    case 0: pos = next[s] + 1 + (int32_t)rnd(f, 3); break;
    case 1: pos = (int32_t)rnd(f, (uint32_t)next[s]); break; /* <= pos_max, or repeats a batch position */
    case 2: pos = -1 - (int32_t)rnd(f, 5); break;
    case 3: seq = rnd(f, 2) ? N_SEQ + (int32_t)rnd(f, 3) : -1 - (int32_t)rnd(f, 3); break;
    case 4: tok = rnd(f, 2) ? f->n_vocab + (int32_t)rnd(f, 10) : -1 - (int32_t)rnd(f, 10); break;
    default: /* next + 1 first, then next */
        CHECK_OK(kiln_batch_add(&f->batch, tok, next[s] + 1, s, true));
        break;
    }
    CHECK_OK(kiln_batch_add(&f->batch, tok, pos, seq, rnd(f, 2) == 0));
    if (kind != 5) { /* move the bad token to a random place: the others keep their order */
        kiln_batch *b = &f->batch;
        int32_t j = (int32_t)rnd(f, (uint32_t)b->n_tokens), last = b->n_tokens - 1;
        int32_t t = b->token[last], p = b->pos[last], q = b->seq_id[last];
        int8_t lg = b->logits[last];
        for (int32_t i = last; i > j; i--) {
            b->token[i] = b->token[i - 1];
            b->pos[i] = b->pos[i - 1];
            b->seq_id[i] = b->seq_id[i - 1];
            b->logits[i] = b->logits[i - 1];
        }
        b->token[j] = t;
        b->pos[j] = p;
        b->seq_id[j] = q;
        b->logits[j] = lg;
    }
    snprintf(f->what, sizeof f->what, "batch of %d tokens with %s (token %d, position %d, sequence %d)",
             f->batch.n_tokens, kinds[kind], tok, pos, seq);
    f->count[OP_BATCH_INVALID]++;
    return run_batch(f, KILN_E_INVALID_ARG);
}

/* A random range: all, a tail, a head, or a stretch. */
static void random_range(fuzz *f, int32_t *p0, int32_t *p1) {
    int32_t hi = pos_hi(f);
    switch (rnd(f, 4)) {
    case 0: *p0 = -1, *p1 = -1; break;
    case 1: *p0 = (int32_t)rnd(f, (uint32_t)hi), *p1 = -1; break;
    case 2: *p0 = -1, *p1 = 1 + (int32_t)rnd(f, (uint32_t)hi); break;
    default: *p0 = (int32_t)rnd(f, (uint32_t)hi), *p1 = *p0 + 1 + (int32_t)rnd(f, 12); break;
    }
}

static bool op_rm(fuzz *f) {
    int32_t s = (int32_t)rnd(f, N_SEQ + 1) - 1, p0, p1;
    random_range(f, &p0, &p1);
    snprintf(f->what, sizeof f->what, "seq_rm(%d, %d, %d)", s, p0, p1);
    f->count[OP_RM]++;
    if (!expect(f, kiln_kv_seq_rm(f->ctx, s, p0, p1), KILN_OK)) return false;
    model_rm(&f->m, s, p0, p1);
    return true;
}

static bool op_cp(fuzz *f) {
    int32_t src = (int32_t)rnd(f, N_SEQ), dst = (int32_t)rnd(f, N_SEQ - 1), p0, p1;
    bool held_own = false, held_shared = false;
    if (dst >= src) dst++;
    random_range(f, &p0, &p1);
    for (int32_t c = 0; c < N_CTX; c++) {
        const mcell *x = &f->m.cell[c];
        if (!(x->seqs >> dst & 1u) || !in_range(x->pos, p0, p1)) continue;
        if (x->seqs >> src & 1u)
            held_shared = true;
        else
            held_own = true;
    }
    /* dst holding the range only through cells it already shares with src: the header does not say
     * whether sharing them again is refused, so the fuzzer does not ask. */
    if (held_shared && !held_own) return true;
    snprintf(f->what, sizeof f->what, "seq_cp(%d, %d, %d, %d)%s", src, dst, p0, p1,
             held_own ? " into a held range" : "");
    f->count[held_own ? OP_CP_HELD : OP_CP]++;
    if (!expect(f, kiln_kv_seq_cp(f->ctx, src, dst, p0, p1), held_own ? KILN_E_INVALID_ARG : KILN_OK))
        return false;
    if (!held_own) model_cp(&f->m, src, dst, p0, p1);
    return true;
}

static bool op_keep(fuzz *f) {
    int32_t s = (int32_t)rnd(f, N_SEQ);
    snprintf(f->what, sizeof f->what, "seq_keep(%d)", s);
    f->count[OP_KEEP]++;
    if (!expect(f, kiln_kv_seq_keep(f->ctx, s), KILN_OK)) return false;
    model_keep(&f->m, s);
    return true;
}

static bool op_reset(fuzz *f) {
    snprintf(f->what, sizeof f->what, "reset");
    f->count[OP_RESET]++;
    kiln_ctx_reset(f->ctx);
    model_reset(&f->m);
    return true;
}

static int32_t bad_id(fuzz *f) {
    return rnd(f, 2) ? N_SEQ + (int32_t)rnd(f, 3) : -2 - (int32_t)rnd(f, 3);
}

static bool op_kv_invalid(fuzz *f) {
    int32_t s = (int32_t)rnd(f, N_SEQ), p0 = (int32_t)rnd(f, (uint32_t)pos_hi(f));
    int32_t p1 = p0 - (int32_t)rnd(f, (uint32_t)p0 + 1); /* p1 <= p0, both given */
    int32_t other = (s + 1 + (int32_t)rnd(f, N_SEQ - 1)) % N_SEQ, bad = bad_id(f), id = rnd(f, 2) ? bad : -1;
    kiln_status got;
    switch (rnd(f, 6)) {
    case 0:
        id = rnd(f, 2) ? s : -1;
        snprintf(f->what, sizeof f->what, "seq_rm(%d, %d, %d), an empty range", id, p0, p1);
        got = kiln_kv_seq_rm(f->ctx, id, p0, p1);
        break;
    case 1:
        snprintf(f->what, sizeof f->what, "seq_rm(%d, -1, -1), a bad id", bad);
        got = kiln_kv_seq_rm(f->ctx, bad, -1, -1);
        break;
    case 2:
        snprintf(f->what, sizeof f->what, "seq_cp(%d, %d, -1, -1), a bad source", id, s);
        got = kiln_kv_seq_cp(f->ctx, id, s, -1, -1);
        break;
    case 3:
        snprintf(f->what, sizeof f->what, "seq_cp(%d, %d, -1, -1), a bad destination", s, id);
        got = kiln_kv_seq_cp(f->ctx, s, id, -1, -1);
        break;
    case 4:
        snprintf(f->what, sizeof f->what, "seq_cp(%d, %d, %d, %d), an empty range", s, other, p0, p1);
        got = kiln_kv_seq_cp(f->ctx, s, other, p0, p1);
        break;
    default:
        snprintf(f->what, sizeof f->what, "seq_keep(%d), a bad id", id);
        got = kiln_kv_seq_keep(f->ctx, id);
        break;
    }
    f->count[OP_KV_INVALID]++;
    return expect(f, got, KILN_E_INVALID_ARG);
}

/* One more token for a sequence with a clean history, against an independent context that decodes the
 * sequence's tokens from scratch. Makes such a sequence (and a free cell) when there is none. */
static bool op_compare(fuzz *f) {
    int32_t toks[POS_LIMIT + 1], P = -1, s = -1, s0 = (int32_t)rnd(f, N_SEQ);
    for (int32_t k = 0; k < N_SEQ && s < 0; k++) {
        int32_t t = (s0 + k) % N_SEQ;
        if (model_clean(&f->m, t, toks, &P) && P + 1 < POS_LIMIT) s = t;
    }
    if (s < 0) {
        s = s0;
        snprintf(f->what, sizeof f->what, "seq_rm(%d, -1, -1) to compare it", s);
        if (!expect(f, kiln_kv_seq_rm(f->ctx, s, -1, -1), KILN_OK)) return false;
        model_rm(&f->m, s, -1, -1);
        if (!invariants_hold(f)) return false;
    }
    while (free_cells(f) == 0) {
        int32_t t = -1, p0 = -1;
        for (int32_t k = 0; k < N_SEQ && t < 0; k++)
            if (k != s && model_pos_max(&f->m, k) >= 0) t = k;
        if (t < 0) t = s, p0 = model_pos_max(&f->m, s); /* s holds every cell: drop its last */
        snprintf(f->what, sizeof f->what, "seq_rm(%d, %d, -1) to free a cell", t, p0);
        if (!expect(f, kiln_kv_seq_rm(f->ctx, t, p0, -1), KILN_OK)) return false;
        model_rm(&f->m, t, p0, -1);
        if (!invariants_hold(f)) return false;
    }
    if (!model_clean(&f->m, s, toks, &P)) {
        harness_fail(__FILE__, __LINE__, "op %d: the fuzzer's model lost the clean sequence %d", f->op, s);
        return false;
    }
    toks[P + 1] = (int32_t)rnd(f, (uint32_t)f->n_vocab);
    kiln_batch_clear(&f->batch);
    CHECK_OK(kiln_batch_add(&f->batch, toks[P + 1], P + 1, s, true));
    snprintf(f->what, sizeof f->what, "compare: token %d at position %d of sequence %d", toks[P + 1], P + 1,
             s);
    f->count[OP_COMPARE]++;
    if (!run_batch(f, KILN_OK)) return false;
    const float *l = kiln_ctx_logits(f->ctx, 0), *r = NULL;
    if (!l) return false;
    memcpy(f->got, l, (size_t)f->n_vocab * sizeof *l);
    kiln_ctx_reset(f->ref);
    if (!expect(f, kiln_ctx_decode(f->ref, toks, P + 2, &r), KILN_OK) || !r) return false;
    double diff = 0.0, scale = 1e-30;
    int32_t a = 0, b = 0;
    for (int32_t i = 0; i < f->n_vocab; i++) {
        double d = fabs((double)f->got[i] - (double)r[i]);
        diff = d > diff || d != d ? d : diff;
        scale = fmax(scale, fabs((double)r[i]));
        if (f->got[i] > f->got[a]) a = i;
        if (r[i] > r[b]) b = i;
    }
    diff /= scale;
    if (diff > f->worst || diff != diff) f->worst = diff;
    if (!(diff <= REL_TOL)) {
        harness_fail(__FILE__, __LINE__,
                     "op %d (%s, %d tokens of history): logits differ from a fresh context "
                     "by %.3g of the logit scale",
                     f->op, f->what, P + 1, diff);
        return false;
    }
    if (a != b && r[b] - r[a] > 2.0 * REL_TOL * scale) {
        harness_fail(__FILE__, __LINE__, "op %d (%s): argmax %d, a fresh context says %d", f->op, f->what, a,
                     b);
        return false;
    }
    return true;
}

static void random_operations_keep_the_cache_equal_to_its_model(void) {
    kiln_model *model = NULL;
    kiln_ctx_params p = harness_ctx_params();
    fuzz f;
    int done = 0;
    memset(&f, 0, sizeof f);
    f.rng = SEED;
    model_reset(&f.m);
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &model));
    if (!model) return;
    f.n_vocab = kiln_model_n_vocab(model);
    p.n_ctx = N_CTX;
    p.n_batch = N_BATCH;
    p.n_seq_max = N_SEQ;
    CHECK_OK(kiln_ctx_create(model, &p, &f.ctx));
    p.n_ctx = 128; /* the reference: one sequence of up to N_CTX + 1 tokens */
    p.n_batch = 128;
    p.n_seq_max = 1;
    CHECK_OK(kiln_ctx_create(model, &p, &f.ref));
    CHECK_OK(kiln_batch_init(N_BATCH, &f.batch));
    f.got = malloc((size_t)f.n_vocab * sizeof *f.got);
    CHECK(f.got != NULL);
    if (!f.ctx || !f.ref || !f.batch.token || !f.got) goto out;
    CHECK(invariants_hold(&f));

    for (f.op = 0; f.op < N_OPS; f.op++) {
        uint32_t r = rnd(&f, 100);
        bool ok;
        snprintf(f.what, sizeof f.what, "nothing");
        if (f.op % COMPARE_EVERY == COMPARE_EVERY - 1)
            ok = op_compare(&f);
        else if (r < 50)
            ok = op_batch(&f, false);
        else if (r < 55)
            ok = op_batch(&f, true);
        else if (r < 62)
            ok = op_batch_invalid(&f);
        else if (r < 76)
            ok = op_rm(&f);
        else if (r < 86)
            ok = op_cp(&f);
        else if (r < 90)
            ok = op_keep(&f);
        else if (r < 92)
            ok = op_reset(&f);
        else
            ok = op_kv_invalid(&f);
        if (!ok || !invariants_hold(&f)) break;
        done++;
    }
    CHECK_EQ_INT(done, N_OPS);
    printf("  %d operations (seed %#llx):", done, (unsigned long long)SEED);
    for (int k = 0; k < N_OP_KINDS; k++)
        printf("%s %s %d", k ? "," : "", OP_NAMES[k], f.count[k]);
    printf("\n  worst logit difference against a fresh context: %.3g of the logit scale\n", f.worst);
    /* Every kind of operation ran often enough to mean something. */
    for (int k = 0; k < N_OP_KINDS && done == N_OPS; k++)
        CHECK(f.count[k] >= (k == OP_COMPARE ? N_OPS / COMPARE_EVERY : 10));
out:
    free(f.got);
    kiln_batch_free(&f.batch);
    kiln_ctx_destroy(f.ctx);
    kiln_ctx_destroy(f.ref);
    kiln_model_destroy(model);
}

int main(void) {
    RUN(random_operations_keep_the_cache_equal_to_its_model);
    return harness_finish();
}
