/*
 * cmd_bench_spec.c - `kiln bench --lookup | --model-draft FILE`: greedy generation after a prompt, plain
 * (one target step per token) against speculative (kiln_spec_step), in the same run.
 *
 * Each repetition runs both (plain first on odd repetitions, speculative first on even ones, so that a
 * drift in the machine's load falls on both), timing the generation only (the prompt is evaluated before
 * the clock starts). The report gives the medians of tokens/s, their ratio, the drafted and accepted
 * tokens, and whether the speculative tokens equal the plain ones (they must: both are greedy decoding).
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: kiln bench --lookup | --model-draft FILE  -m FILE (-p TEXT | -f FILE) [options]\n"
    "\n"
    "Greedy generation after a prompt, plain against speculative, in the same run (medians over R).\n"
    "\n"
    "  -m, --model FILE        the target model\n"
    "      --lookup            speculate with prompt lookup\n"
    "  -md, --model-draft F    speculate with draft model F (same vocabulary)\n"
    "  -p, --prompt TEXT       the prompt; -f, --file FILE reads it from FILE\n"
    "  -n, --n-gen N           tokens generated (default 128)\n"
    "  -r, --repetitions R     runs of each after one warm-up run (default 3)\n"
    "      --draft-max N       most guessed tokens per step (default 8)\n"
    "      --lookup-ngram N    longest n-gram prompt lookup matches (default 4)\n"
    "      --draft-fixed       guess --draft-max tokens every step (default: the number of guesses is\n"
    "                          chosen from the measured batch costs and the acceptance so far)\n"
    "  -t, --threads N, --device D, --devices LIST, --cpu LEVEL: as kiln run\n";

typedef struct spec_bench {
    const char *model, *draft, *prompt, *file;
    bool lookup, fixed;
    long n_gen, reps, draft_max, ngram;
    cli_engine engine;
    kiln_model *m, *dm;
    kiln_ctx *ctx, *dctx;
    kiln_spec *spec;
    int32_t *prompt_ids, n_prompt;
    int32_t *plain, *fast; /* [n_prompt + n_gen] the tokens of each kind of run */
} spec_bench;

static int parse(int argc, char **argv, spec_bench *b) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(help, stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            ok = cli_arg_str("bench", argc, argv, &i, &b->model);
        else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft"))
            ok = cli_arg_str("bench", argc, argv, &i, &b->draft);
        else if (!strcmp(a, "--lookup"))
            b->lookup = true;
        else if (!strcmp(a, "--draft-fixed"))
            b->fixed = true;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
            ok = cli_arg_str("bench", argc, argv, &i, &b->prompt);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file"))
            ok = cli_arg_str("bench", argc, argv, &i, &b->file);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen"))
            ok = cli_arg_int("bench", argc, argv, &i, 1, 1L << 16, &b->n_gen);
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions"))
            ok = cli_arg_int("bench", argc, argv, &i, 1, 100, &b->reps);
        else if (!strcmp(a, "--draft-max"))
            ok = cli_arg_int("bench", argc, argv, &i, 1, 63, &b->draft_max);
        else if (!strcmp(a, "--lookup-ngram"))
            ok = cli_arg_int("bench", argc, argv, &i, 1, 16, &b->ngram);
        else if (!cli_arg_engine("bench", argc, argv, &i, &b->engine, &ok))
            return cli_usage_error("bench", "unknown option '%s'", a);
        if (!ok) return CLI_USAGE;
    }
    if (b->lookup == (b->draft != NULL))
        return cli_usage_error("bench", "give one of --lookup and --model-draft");
    if (!b->prompt == !b->file) return cli_usage_error("bench", "give the prompt with -p or -f");
    if (!b->model) b->model = cli_default_model();
    return CLI_OK;
}

static int setup(spec_bench *b, char *text) {
    const kiln_vocab *v;
    kiln_spec_params sp = kiln_spec_params_default();
    kiln_ctx_params cp;
    size_t n = 0, cap = strlen(text) + 2;
    kiln_status s;
    int rc;
    if ((rc = cli_model_load("bench", b->model, &b->engine, b->model, &b->m))) return rc;
    v = kiln_model_vocab(b->m);
    if (!(b->prompt_ids = malloc(cap * sizeof(int32_t))))
        return cli_fail("bench", KILN_E_NOMEM, "the prompt");
    if ((s = kiln_tokenize(v, text, strlen(text), kiln_vocab_add_bos(v), b->prompt_ids, cap, &n)))
        return cli_fail("bench", s, "tokenizing the prompt");
    b->n_prompt = (int32_t)n;
    cp = cli_ctx_params(&b->engine);
    cp.n_ctx = b->n_prompt + (int32_t)b->n_gen + 8;
    if ((s = kiln_ctx_create(b->m, &cp, &b->ctx))) return cli_fail("bench", s, "creating the context");
    if (b->draft) {
        if ((rc = cli_model_load("bench", b->draft, &b->engine, b->draft, &b->dm))) return rc;
        if ((s = kiln_ctx_create(b->dm, &cp, &b->dctx)))
            return cli_fail("bench", s, "creating the draft's context");
    }
    sp.draft = b->dctx;
    sp.n_draft = (int32_t)b->draft_max;
    sp.ngram_max = (int32_t)b->ngram;
    sp.fixed = b->fixed;
    if ((s = kiln_spec_create(b->ctx, &sp, &b->spec)))
        return cli_fail("bench", s, "starting speculative decoding");
    b->plain = malloc((size_t)cp.n_ctx * sizeof(int32_t));
    b->fast = malloc((size_t)cp.n_ctx * sizeof(int32_t));
    return b->plain && b->fast ? CLI_OK : cli_fail("bench", KILN_E_NOMEM, "the token lists");
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* One generation of n_gen tokens into ids (after the prompt); returns tokens/s, or < 0 on failure. */
static double run(spec_bench *b, bool spec, int32_t *ids) {
    int32_t V = kiln_model_n_vocab(b->m), n = b->n_prompt, end = b->n_prompt + (int32_t)b->n_gen, out[64], m;
    const float *logits;
    kiln_status s;
    double t0;
    kiln_ctx_reset(b->ctx);
    memcpy(ids, b->prompt_ids, (size_t)n * sizeof *ids);
    if ((s = kiln_ctx_decode(b->ctx, ids, n, &logits))) return cli_fail("bench", s, "the prompt"), -1;
    t0 = cli_now_seconds();
    ids[n++] = argmax(logits, V);
    while (n < end) {
        if (spec) {
            if ((s = kiln_spec_step(b->spec, NULL, ids, n, end - n, out, &m))) break;
            memcpy(ids + n, out, (size_t)m * sizeof *ids);
            n += m;
        } else {
            if ((s = kiln_ctx_decode(b->ctx, &ids[n - 1], 1, &logits))) break;
            ids[n++] = argmax(logits, V);
        }
    }
    if (s) return cli_fail("bench", s, "generation"), -1;
    return (double)b->n_gen / (cli_now_seconds() - t0);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int measure(spec_bench *b) {
    double tp[100], ts[100];
    kiln_spec_stats st0, st1;
    int32_t diff = -1, total = b->n_prompt + (int32_t)b->n_gen;
    if (run(b, false, b->plain) < 0 || run(b, true, b->fast) < 0) return CLI_FAIL; /* warm-up */
    kiln_spec_get_stats(b->spec, &st0);
    for (long r = 0; r < b->reps; r++) {
        bool spec_first = r % 2 == 1;
        if ((spec_first && (ts[r] = run(b, true, b->fast)) < 0) || (tp[r] = run(b, false, b->plain)) < 0 ||
            (!spec_first && (ts[r] = run(b, true, b->fast)) < 0))
            return CLI_FAIL;
    }
    kiln_spec_get_stats(b->spec, &st1);
    for (int32_t i = 0; i < total && diff < 0; i++)
        if (b->plain[i] != b->fast[i]) diff = i;
    qsort(tp, (size_t)b->reps, sizeof *tp, cmp);
    qsort(ts, (size_t)b->reps, sizeof *ts, cmp);
    printf("model: %s; %s; prompt %d tokens, %ld generated, greedy; cpu %s, %ld threads\n\n", b->model,
           b->draft ? b->draft : "prompt lookup", b->n_prompt, b->n_gen, kiln_get_cpu_level(),
           b->engine.n_threads);
    printf("| mode | t/s (median of %ld) | target batches | drafted | accepted |\n|---|---|---|---|---|\n",
           b->reps);
    printf("| plain | %.2f | %ld | | |\n", tp[b->reps / 2], b->n_gen);
    printf("| speculative | %.2f | %.1f | %.1f | %.1f (%.1f%%) |\n", ts[b->reps / 2],
           (double)(st1.steps - st0.steps) / (double)b->reps,
           (double)(st1.drafted - st0.drafted) / (double)b->reps,
           (double)(st1.accepted - st0.accepted) / (double)b->reps,
           st1.drafted > st0.drafted
               ? 100.0 * (double)(st1.accepted - st0.accepted) / (double)(st1.drafted - st0.drafted)
               : 0.0);
    printf("\nspeed-up %.2fx; tokens %s\n", ts[b->reps / 2] / tp[b->reps / 2],
           diff < 0 ? "identical" : "DIFFER");
    if (diff >= 0)
        fprintf(stderr, "kiln bench: the speculative tokens differ from the plain ones at %d\n", diff);
    return diff < 0 ? CLI_OK : CLI_FAIL;
}

int cmd_bench_spec(int argc, char **argv) {
    spec_bench b = {.n_gen = 128, .reps = 3, .draft_max = 8, .ngram = 4};
    char *text = NULL;
    size_t len;
    int rc = parse(argc, argv, &b);
    if (rc) return rc < 0 ? CLI_OK : rc;
    if (b.file && (rc = cli_read_text("bench", b.file, &text, &len))) return rc;
    rc = setup(&b, text ? text : (char *)b.prompt);
    if (!rc) {
        b.engine.n_threads = kiln_model_n_threads(b.m);
        rc = measure(&b);
    }
    kiln_spec_destroy(b.spec);
    kiln_ctx_destroy(b.dctx);
    kiln_ctx_destroy(b.ctx);
    kiln_model_destroy(b.dm);
    kiln_model_destroy(b.m);
    free(b.prompt_ids);
    free(b.plain);
    free(b.fast);
    free(text);
    return rc;
}
