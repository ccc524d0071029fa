/*
 * cmd_perplexity.c - `kiln perplexity -m FILE -f TEXT [--kl-base BASE.gguf] [-c CTX]`: the quality of a
 * (quantized) model over a text. As llama.cpp's perplexity tool does, the text is tokenized once (with
 * BOS), cut into chunks of CTX tokens, each chunk starts with BOS in a fresh cache, and only the second
 * half of each chunk is scored (every scored token then has at least CTX/2 tokens of context). With a
 * base model, the same positions also give the KL divergence KL(base || model) of the next-token
 * distributions (mean and 99th percentile) and how often both models' top-1 tokens agree.
 *
 * Each chunk is scored in one kiln_ctx_decode_batch per model: all its tokens in one batch (n_batch is
 * the chunk length), every token keeping its logits. The numbers are those of decoding token by token
 * (the KV cache and causal attention see the same context either way), within the rounding of the
 * batched kernels.
 */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char perplexity_help[] =
    "usage: kiln perplexity -m FILE -f TEXT [--kl-base BASE.gguf] [-c CTX] [--chunks N] [-t N]\n"
    "                       [--devices LIST] [--cpu LEVEL]\n"
    "\n"
    "Perplexity of a model over a text file, scoring the second half of each CTX-token chunk (llama.cpp's\n"
    "method). With --kl-base, also the KL divergence against the base model (mean, 99th percentile) and\n"
    "the top-1 agreement, over the same positions.\n"
    "\n"
    "  -m, --model FILE    the model to measure (default: the bundled model)\n"
    "  -f, --file TEXT     the text file\n"
    "      --kl-base FILE  a base model with the same vocabulary (for example the F16/F32 original)\n"
    "  -c, --ctx N         chunk length in tokens (default 128)\n"
    "      --chunks N      stop after N chunks (default: all)\n"
    "  -t, --threads N     threads (default: the physical cores)\n"
    "      --devices LIST  backends in priority order, e.g. cpu-restricted:matmul+linear@8,cpu; the CPU is\n"
    "                      always last (default: cpu)\n"
    "      --device D      where to run: auto (a discrete or integrated GPU through Vulkan, else the\n"
    "                      CPU), cpu, or vulkan[:N] (Vulkan device N of `kiln devices`, lavapipe\n"
    "                      included); default $KILN_DEVICE, else cpu. The CPU runs whatever the device\n"
    "                      cannot\n"
    "      --cpu LEVEL     CPU kernel level: ref, avx2, avx512, amx or neon (default: the best, or\n"
    "                      $KILN_CPU)\n"
    "  -h, --help          this text\n";

typedef struct stats {
    double nll_sum, nll_sq, base_nll_sum;
    int64_t n, top1_same;
    double *kl; /* one per scored token when a base model is given */
} stats;

/* log-softmax of logits at index tok, and the argmax; in double. */
static double log_prob(const float *logits, int32_t n, int32_t tok, int32_t *argmax) {
    double max = -INFINITY, sum = 0;
    int32_t best = 0;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > max) max = logits[i], best = i;
    for (int32_t i = 0; i < n; i++) sum += exp((double)logits[i] - max);
    *argmax = best;
    return (double)logits[tok] - max - log(sum);
}

/* KL(p || q) of the softmaxes of base logits p and model logits q. */
static double kl_divergence(const float *p, const float *q, int32_t n) {
    double pmax = -INFINITY, qmax = -INFINITY, ps = 0, qs = 0, kl = 0;
    for (int32_t i = 0; i < n; i++) {
        if (p[i] > pmax) pmax = p[i];
        if (q[i] > qmax) qmax = q[i];
    }
    for (int32_t i = 0; i < n; i++) ps += exp((double)p[i] - pmax), qs += exp((double)q[i] - qmax);
    double lps = log(ps), lqs = log(qs);
    for (int32_t i = 0; i < n; i++) {
        double lp = (double)p[i] - pmax - lps, lq = (double)q[i] - qmax - lqs;
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

/* Score one chunk: all c tokens in one batch in ctx (and base), every token keeping its logits; the
 * logits of position j predict token j + 1, and positions c / 2 .. c - 2 are scored. */
static kiln_status run_chunk(kiln_ctx *ctx, kiln_ctx *base, kiln_batch *batch, const int32_t *tok, int32_t c,
                             int32_t n_vocab, stats *st) {
    kiln_status s;
    kiln_batch_clear(batch);
    for (int32_t j = 0; j < c; j++)
        if ((s = kiln_batch_add(batch, tok[j], j, 0, true))) return s;
    kiln_ctx_reset(ctx);
    if ((s = kiln_ctx_decode_batch(ctx, batch))) return s;
    if (base) {
        kiln_ctx_reset(base);
        if ((s = kiln_ctx_decode_batch(base, batch))) return s;
    }
    for (int32_t j = c / 2; j + 1 < c; j++) {
        const float *logits = kiln_ctx_logits(ctx, j), *blogits = base ? kiln_ctx_logits(base, j) : NULL;
        if (!logits || (base && !blogits)) return KILN_E_INTERNAL; /* every token asked for its logits */
        int32_t am, bam;
        double lp = log_prob(logits, n_vocab, tok[j + 1], &am);
        st->nll_sum -= lp;
        st->nll_sq += lp * lp;
        if (base) {
            st->base_nll_sum -= log_prob(blogits, n_vocab, tok[j + 1], &bam);
            st->kl[st->n] = kl_divergence(blogits, logits, n_vocab);
            st->top1_same += am == bam;
        }
        st->n++;
    }
    return KILN_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const stats *st, int64_t chunks, int32_t c, bool with_base) {
    double mean = st->nll_sum / (double)st->n;
    double var = st->nll_sq / (double)st->n - mean * mean;
    double se = st->n > 1 && var > 0 ? sqrt(var / (double)(st->n - 1)) : 0;
    printf("perplexity: %.4f +/- %.4f over %lld tokens (%lld chunks of %d, second half of each scored)\n",
           exp(mean), exp(mean) * se, (long long)st->n, (long long)chunks, (int)c);
    if (!with_base) return;
    double kl_sum = 0;
    for (int64_t i = 0; i < st->n; i++) kl_sum += st->kl[i];
    qsort(st->kl, (size_t)st->n, sizeof(double), cmp_double);
    int64_t p99 = (int64_t)ceil(0.99 * (double)st->n) - 1;
    printf("base perplexity: %.4f\n", exp(st->base_nll_sum / (double)st->n));
    printf("KL divergence: mean %.6f, 99th percentile %.6f, max %.6f\n", kl_sum / (double)st->n,
           st->kl[p99 < 0 ? 0 : p99], st->kl[st->n - 1]);
    printf("top-1 agreement: %.2f%% (%lld of %lld)\n", 100.0 * (double)st->top1_same / (double)st->n,
           (long long)st->top1_same, (long long)st->n);
}

typedef struct opts {
    const char *model, *file, *base;
    long ctx, chunks;
    cli_engine engine;
} opts;

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){NULL, NULL, NULL, 128, 0, {0}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(perplexity_help, stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = cli_arg_str("perplexity", argc, argv, &i, &o->model);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) ok = cli_arg_str("perplexity", argc, argv, &i, &o->file);
        else if (!strcmp(a, "--kl-base")) ok = cli_arg_str("perplexity", argc, argv, &i, &o->base);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) ok = cli_arg_int("perplexity", argc, argv, &i, 4, 1 << 20, &o->ctx);
        else if (!strcmp(a, "--chunks")) ok = cli_arg_int("perplexity", argc, argv, &i, 1, 1 << 30, &o->chunks);
        else if (!cli_arg_engine("perplexity", argc, argv, &i, &o->engine, &ok))
            return cli_usage_error("perplexity", "unknown argument '%s'", a);
        if (!ok) return CLI_USAGE;
    }
    if (!o->file) return cli_usage_error("perplexity", "missing -f TEXT");
    if (!o->model) o->model = cli_default_model();
    return CLI_OK;
}

/* Read and tokenize the text (with BOS). */
static int tokenize_file(const kiln_model *m, const char *path, int32_t **ids, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kiln perplexity: cannot open '%s'\n", path);
        return CLI_FAIL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    char buf[65536];
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (len + got > cap) {
            cap = (len + got) * 2;
            char *t = realloc(text, cap);
            if (!t) break;
            text = t;
        }
        memcpy(text + len, buf, got);
        len += got;
    }
    fclose(f);
    const kiln_vocab *v = kiln_model_vocab(m);
    *ids = malloc((len + 2) * sizeof **ids);
    kiln_status s = *ids ? kiln_tokenize(v, text ? text : "", len, kiln_vocab_add_bos(v), *ids, len + 2, n)
                         : KILN_E_NOMEM;
    free(text);
    return s ? cli_fail("perplexity", s, "tokenizing the text") : CLI_OK;
}

static int measure(const opts *o, kiln_model *m, kiln_model *bm, const int32_t *ids, size_t n_ids) {
    kiln_ctx_params cp = cli_ctx_params(&o->engine);
    kiln_ctx *ctx = NULL, *base = NULL;
    kiln_batch batch = {0};
    int32_t n_vocab = kiln_model_n_vocab(m), c = (int32_t)o->ctx;
    int64_t chunks = (int64_t)(n_ids / (size_t)c), done = 0;
    stats st = {0};
    int32_t *chunk = malloc((size_t)c * sizeof(int32_t));
    int rc = chunk ? CLI_OK : cli_fail("perplexity", KILN_E_NOMEM, "the chunk buffer");
    if (o->chunks && chunks > o->chunks) chunks = o->chunks;
    if (!rc && chunks < 1) {
        fprintf(stderr, "kiln perplexity: the text has %zu tokens, fewer than one chunk of %d (use -c)\n", n_ids, c);
        rc = CLI_FAIL;
    }
    st.kl = bm ? malloc((size_t)(chunks > 0 ? chunks : 1) * (size_t)c * sizeof(double)) : NULL;
    if (!rc && bm && !st.kl) rc = cli_fail("perplexity", KILN_E_NOMEM, "the KL buffer");
    cp.n_ctx = c;
    cp.n_batch = c; /* a chunk is one batch */
    kiln_status s = KILN_OK;
    if (!rc && (s = kiln_batch_init(c, &batch))) rc = cli_fail("perplexity", s, "allocating the batch");
    if (!rc && (s = kiln_ctx_create(m, &cp, &ctx))) rc = cli_fail("perplexity", s, "creating a context");
    if (!rc && bm && (s = kiln_ctx_create(bm, &cp, &base))) rc = cli_fail("perplexity", s, "creating the base context");
    double t0 = cli_now_seconds();
    for (; !rc && done < chunks; done++) {
        memcpy(chunk, ids + done * c, (size_t)c * sizeof(int32_t));
        if (kiln_vocab_bos(kiln_model_vocab(m)) >= 0) chunk[0] = kiln_vocab_bos(kiln_model_vocab(m));
        if ((s = run_chunk(ctx, base, &batch, chunk, c, n_vocab, &st))) rc = cli_fail("perplexity", s, "decoding");
        else fprintf(stderr, "[%lld/%lld] running perplexity %.4f (%.1f s)\n", (long long)done + 1, (long long)chunks,
                     exp(st.nll_sum / (double)st.n), cli_now_seconds() - t0);
    }
    if (!rc) report(&st, chunks, c, bm != NULL);
    kiln_ctx_destroy(base);
    kiln_ctx_destroy(ctx);
    kiln_batch_free(&batch);
    free(st.kl);
    free(chunk);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    opts o;
    kiln_model *m = NULL, *bm = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    if ((rc = cli_model_load("perplexity", o.model, &o.engine, "loading the model", &m))) return rc;
    if (o.base) rc = cli_model_load("perplexity", o.base, &o.engine, "loading the base model", &bm);
    if (!rc && bm && kiln_model_n_vocab(bm) != kiln_model_n_vocab(m)) {
        fprintf(stderr, "kiln perplexity: the base model has %d tokens, the model %d: not the same vocabulary\n",
                kiln_model_n_vocab(bm), kiln_model_n_vocab(m));
        rc = CLI_FAIL;
    }
    if (!rc) rc = tokenize_file(m, o.file, &ids, &n_ids);
    if (!rc) rc = measure(&o, m, bm, ids, n_ids);
    free(ids);
    kiln_model_destroy(bm);
    kiln_model_destroy(m);
    return rc;
}
