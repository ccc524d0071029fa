/*
 * cmd_run.c - `kiln run`: tokenize a prompt, prefill it in one batch, then generate one token at a time,
 * or, with --lookup or --model-draft, several per target batch by speculative decoding
 * (kiln_spec_step), which gives the same tokens (greedy) or the same distribution (sampling).
 *
 * stdout receives exactly the prompt text followed by the generated text, streamed as it is produced.
 * Diagnostics and the final timing line go to stderr.
 */
#include "common.h"
#include "grammar_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char run_help[] =
    "usage: kiln run [options]\n"
    "\n"
    "Generate text. stdout gets the prompt followed by the generated text; timings go to stderr.\n"
    "\n"
    "  -m, --model FILE       GGUF model (default: the bundled stories260K.gguf, or $KILN_MODEL)\n"
    "  -p, --prompt TEXT      prompt text (default: empty, i.e. start from BOS)\n"
    "  -f, --file FILE        read the prompt from FILE ('-': standard input) instead\n"
    "  -n, --n-predict N      tokens to generate after the prompt (default 128); stops early at EOS\n"
    "                         or when the context is full\n"
    "  -c, --ctx-size N       KV-cache size in tokens (default: the model's context length)\n"
    "  -t, --threads N        worker threads (default: the physical cores)\n"
    "      --devices LIST     backends in priority order, e.g. cpu-restricted:matmul+linear@8,cpu; the CPU\n"
    "                         is always last (default: cpu)\n"
    "      --device D         where to run: auto (a discrete or integrated GPU through Vulkan, else the\n"
    "                         CPU), cpu, or vulkan[:N] (Vulkan device N of `kiln devices`, lavapipe\n"
    "                         included); default $KILN_DEVICE, else cpu. The CPU runs whatever the\n"
    "                         device cannot\n"
    "      --gpu-layers N     with --device: the device runs the last N layers and the output head,\n"
    "                         the CPU the rest (0: none; all, the default; auto: as many as fit)\n"
    "      --cpu LEVEL        CPU kernel level: ref, avx2, avx512, amx or neon (default: the best, or\n"
    "                         $KILN_CPU)\n"
    "      --kv-type T        KV-cache type: f32 (default), f16 or q8_0\n"
    "      --temp T           temperature; 0 = greedy (default 0.8)\n"
    "      --top-k K          keep the K most likely tokens; 0 = off (default 40)\n"
    "      --top-p P          nucleus sampling; 1 = off (default 0.95)\n"
    "      --min-p P          drop tokens below P x the top probability; 0 = off (default 0.05)\n"
    "      --repeat-penalty R penalize the last --repeat-last-n tokens; 1 = off (default 1.0)\n"
    "      --repeat-last-n N  history length for the repeat penalty (default 64)\n"
    "      --seed S           random seed (default: from the clock)\n"
    "      --lookup           speculative decoding with prompt lookup: guess the next tokens from the\n"
    "                         latest earlier occurrence of the last n-gram, verify them in one batch\n"
    "                         (greedy: the same tokens; sampling: the same distribution)\n"
    "  -md, --model-draft F   speculative decoding with draft model F (same vocabulary)\n"
    "      --draft-max N      most guessed tokens per step (default 8)\n"
    "      --lookup-ngram N   longest n-gram prompt lookup matches (default 4)\n"
    CLI_GRAMMAR_HELP
    "      --passes LIST      graph passes: all, none, or e.g. cse,dce or -fuse_qkv (default all,\n"
    "                         or $KILN_PASSES)\n"
    "      --no-fuse          switch off every fusion pass\n"
    "  -v, --verbose          print the graph compiler's and the planner's figures and the runtime's log\n"
    "                         to stderr\n"
    "  -h, --help             this text\n";

typedef struct run_options {
    const char *model;
    const char *prompt;
    const char *prompt_file; /* -f: the prompt's file, read into prompt_buf */
    char *prompt_buf;
    long n_predict;
    long n_ctx;
    cli_engine engine;
    kiln_sampler_params sampling;
    bool seed_given;
    bool no_fuse;
    kiln_type kv_type;
    bool lookup;             /* --lookup */
    const char *model_draft; /* --model-draft */
    long draft_max, lookup_ngram;
    cli_grammar grammar;
} run_options;

static int parse(int argc, char **argv, run_options *o) {
    o->model = NULL;
    o->prompt = "";
    o->prompt_file = NULL;
    o->prompt_buf = NULL;
    o->n_predict = 128;
    o->n_ctx = 0;
    o->engine = (cli_engine){0};
    o->sampling = kiln_sampler_params_default();
    o->seed_given = false;
    o->no_fuse = false;
    o->kv_type = KILN_TYPE_F32;
    o->lookup = false;
    o->model_draft = NULL;
    o->draft_max = 8;
    o->lookup_ngram = 4;
    o->grammar = (cli_grammar){0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(run_help, stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = cli_arg_str("run", argc, argv, &i, &o->model);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) ok = cli_arg_str("run", argc, argv, &i, &o->prompt);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) ok = cli_arg_str("run", argc, argv, &i, &o->prompt_file);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            ok = cli_arg_int("run", argc, argv, &i, 0, 1L << 30, &o->n_predict);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            ok = cli_arg_int("run", argc, argv, &i, 0, 1L << 24, &o->n_ctx);
        else if (!strcmp(a, "--passes")) ok = cli_arg_str("run", argc, argv, &i, &o->engine.passes);
        else if (!strcmp(a, "--no-fuse")) o->no_fuse = true;
        else if (!strcmp(a, "--lookup")) o->lookup = true;
        else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft"))
            ok = cli_arg_str("run", argc, argv, &i, &o->model_draft);
        else if (!strcmp(a, "--draft-max")) ok = cli_arg_int("run", argc, argv, &i, 1, 63, &o->draft_max);
        else if (!strcmp(a, "--lookup-ngram")) ok = cli_arg_int("run", argc, argv, &i, 1, 16, &o->lookup_ngram);
        else if (!strcmp(a, "--kv-type")) ok = cli_arg_kv_type("run", argc, argv, &i, &o->kv_type);
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o->engine.verbose = true;
        else if (!cli_arg_engine("run", argc, argv, &i, &o->engine, &ok) &&
                 !cli_arg_sampling("run", argc, argv, &i, &o->sampling, &o->seed_given, &ok) &&
                 !cli_arg_grammar("run", argc, argv, &i, &o->grammar, &ok))
            return cli_usage_error("run", "unknown option '%s'", a);
        if (!ok) return CLI_USAGE;
    }
    if (o->prompt_file && o->prompt[0]) return cli_usage_error("run", "give the prompt with -p or -f, not both");
    if (o->lookup && o->model_draft) return cli_usage_error("run", "give --lookup or --model-draft, not both");
    if (!o->model) o->model = cli_default_model();
    if (!o->seed_given) o->sampling.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return 0;
}

typedef struct generation {
    kiln_model *model;
    kiln_ctx *ctx;
    kiln_model *draft_model; /* --model-draft */
    kiln_ctx *draft_ctx;
    kiln_spec *spec; /* --lookup or --model-draft */
    kiln_sampler *sampler;
    kiln_detok *detok;
    int32_t *prompt;
    size_t n_prompt;
} generation;

static void generation_free(generation *g) {
    kiln_spec_destroy(g->spec);
    kiln_ctx_destroy(g->draft_ctx);
    kiln_model_destroy(g->draft_model);
    kiln_detok_destroy(g->detok);
    kiln_sampler_destroy(g->sampler);
    kiln_ctx_destroy(g->ctx);
    kiln_model_destroy(g->model);
    free(g->prompt);
}

static int tokenize_prompt(generation *g, const char *prompt) {
    const kiln_vocab *vocab = kiln_model_vocab(g->model);
    size_t len = strlen(prompt), cap = len + 2, n = 0;
    kiln_status s;
    g->prompt = malloc(cap * sizeof *g->prompt);
    if (!g->prompt) return cli_fail("run", KILN_E_NOMEM, "tokenizing the prompt");
    s = kiln_tokenize(vocab, prompt, len, kiln_vocab_add_bos(vocab), g->prompt, cap, &n);
    if (s == KILN_E_RANGE) {
        int32_t *p = realloc(g->prompt, n * sizeof *p);
        if (!p) return cli_fail("run", KILN_E_NOMEM, "tokenizing the prompt");
        g->prompt = p;
        s = kiln_tokenize(vocab, prompt, len, kiln_vocab_add_bos(vocab), g->prompt, n, &n);
    }
    if (s) return cli_fail("run", s, "tokenizing the prompt");
    if (n == 0) return cli_usage_error("run", "the prompt is empty and the model adds no BOS token");
    g->n_prompt = n;
    return CLI_OK;
}

static void write_piece(kiln_str piece) {
    if (piece.len) {
        fwrite(piece.data, 1, piece.len, stdout);
        fflush(stdout);
    }
}

/* The plans the run uses: the prompt's batches (at most n_batch tokens, the last token's logits) and the
 * one-token decode step. */
/* The device backends' memory pool figures (docs/vulkan.md), when a device ran. */
static void print_device_memory(const kiln_model *m) {
    kiln_model_memory mm;
    if (kiln_model_memory_info(m, &mm) || mm.device.requests == 0) return;
    fprintf(stderr,
            "kiln: device memory: %llu allocations, %llu frees, %llu buffers asked, %llu reused, %llu evicted; "
            "%.1f MiB held, peak %.2f MiB in use, weights %.2f MiB\n",
            (unsigned long long)mm.device.allocations, (unsigned long long)mm.device.frees,
            (unsigned long long)mm.device.requests, (unsigned long long)mm.device.reuses,
            (unsigned long long)mm.device.evictions, (double)mm.device.bytes / 1048576.0,
            (double)mm.device.peak_bytes / 1048576.0, (double)mm.device.weight_bytes / 1048576.0);
}

static int print_plans(generation *g) {
    int32_t n_batch = kiln_ctx_n_batch(g->ctx);
    int32_t first = (int64_t)g->n_prompt < n_batch ? (int32_t)g->n_prompt : n_batch;
    int rc = cli_print_plan_info("run", g->ctx, first, 1);
    if (!rc && first != 1) rc = cli_print_plan_info("run", g->ctx, 1, 1);
    return rc;
}

/* The generation loop; returns the number of tokens generated through *n_gen. The prompt text goes to
 * stdout once the prompt is evaluated, so that the weight-preparation bar of the first computation (on a
 * terminal's stderr) does not draw over it. */
static int generate(generation *g, const run_options *o, double *t_prompt, double *t_gen, long *n_gen) {
    const kiln_vocab *vocab = kiln_model_vocab(g->model);
    const float *logits;
    kiln_str piece;
    kiln_status s;
    double t0 = cli_now_seconds();
    int32_t eos = kiln_vocab_eos(vocab);
    if ((s = kiln_ctx_decode(g->ctx, g->prompt, (int32_t)g->n_prompt, &logits)))
        return cli_fail("run", s, "evaluating the prompt");
    *t_prompt = cli_now_seconds() - t0;
    fputs(o->prompt, stdout);
    fflush(stdout);
    for (size_t i = 0; i < g->n_prompt; i++) kiln_sampler_accept(g->sampler, g->prompt[i]);
    t0 = cli_now_seconds();
    for (*n_gen = 0; *n_gen < o->n_predict;) {
        int32_t next;
        if ((s = kiln_sampler_sample(g->sampler, logits, &next))) return cli_fail("run", s, "sampling");
        kiln_sampler_accept(g->sampler, next);
        ++*n_gen;
        if (next == eos) break;
        if ((s = kiln_detok_push(g->detok, next, &piece))) return cli_fail("run", s, "detokenizing");
        write_piece(piece);
        if (*n_gen == o->n_predict || cli_grammar_done(&o->grammar)) break;
        if (kiln_ctx_n_past(g->ctx) >= kiln_ctx_n_ctx(g->ctx)) {
            fprintf(stderr, "\nkiln run: context full (%d tokens); stopping\n", kiln_ctx_n_ctx(g->ctx));
            break;
        }
        if ((s = kiln_ctx_decode(g->ctx, &next, 1, &logits))) return cli_fail("run", s, "decoding");
    }
    if ((s = kiln_detok_flush(g->detok, &piece))) return cli_fail("run", s, "detokenizing");
    write_piece(piece);
    *t_gen = cli_now_seconds() - t0;
    return CLI_OK;
}

/* Speculative generation: each kiln_spec_step gives the next tokens, one target batch each, drawn with
 * the sampler (which it also tells of each token, as generate does). hist holds the prompt and every
 * token chosen; its last is not yet decoded. */
static int generate_spec(generation *g, const run_options *o, double *t_prompt, double *t_gen, long *n_gen) {
    int32_t eos = kiln_vocab_eos(kiln_model_vocab(g->model)), n_ctx = kiln_ctx_n_ctx(g->ctx), out[64], m = 0;
    int32_t *hist = malloc((size_t)n_ctx * sizeof *hist), n;
    const float *logits;
    kiln_str piece;
    kiln_status s;
    double t0 = cli_now_seconds();
    bool end = false;
    if (!hist) return cli_fail("run", KILN_E_NOMEM, "the history");
    if ((s = kiln_ctx_decode(g->ctx, g->prompt, (int32_t)g->n_prompt, &logits))) {
        free(hist);
        return cli_fail("run", s, "evaluating the prompt");
    }
    *t_prompt = cli_now_seconds() - t0;
    fputs(o->prompt, stdout);
    fflush(stdout);
    memcpy(hist, g->prompt, g->n_prompt * sizeof *hist);
    n = (int32_t)g->n_prompt;
    t0 = cli_now_seconds();
    for (size_t i = 0; i < g->n_prompt; i++) kiln_sampler_accept(g->sampler, g->prompt[i]);
    if ((s = kiln_sampler_sample(g->sampler, logits, &out[0]))) end = true;
    else kiln_sampler_accept(g->sampler, out[0]);
    m = 1;
    for (*n_gen = 0; !end && !s;) {
        for (int32_t i = 0; i < m && !end; i++) {
            ++*n_gen;
            hist[n++] = out[i];
            if (out[i] == eos || *n_gen == o->n_predict) end = true;
            else if ((s = kiln_detok_push(g->detok, out[i], &piece))) end = true;
            else write_piece(piece);
        }
        if (end) break;
        if (n >= n_ctx) {
            fprintf(stderr, "\nkiln run: context full (%d tokens); stopping\n", n_ctx);
            break;
        }
        s = kiln_spec_step(g->spec, g->sampler, hist, n, (int32_t)(o->n_predict - *n_gen), out, &m);
    }
    free(hist);
    if (s) return cli_fail("run", s, "speculative decoding");
    if ((s = kiln_detok_flush(g->detok, &piece))) return cli_fail("run", s, "detokenizing");
    write_piece(piece);
    *t_gen = cli_now_seconds() - t0;
    return CLI_OK;
}

/* The speculative decoder of --lookup or --model-draft (the draft model on the target's engine options). */
static int spec_create(generation *g, const run_options *o, const kiln_ctx_params *cp) {
    kiln_spec_params sp = kiln_spec_params_default();
    kiln_status s;
    int rc;
    sp.n_draft = (int32_t)o->draft_max;
    sp.ngram_max = (int32_t)o->lookup_ngram;
    if (o->model_draft) {
        if ((rc = cli_model_load("run", o->model_draft, &o->engine, NULL, &g->draft_model))) return rc;
        if ((s = kiln_ctx_create(g->draft_model, cp, &g->draft_ctx)))
            return cli_fail("run", s, "creating the draft model's context");
        sp.draft = g->draft_ctx;
    }
    if ((s = kiln_spec_create(g->ctx, &sp, &g->spec))) return cli_fail("run", s, "starting speculative decoding");
    return CLI_OK;
}

int cmd_run(int argc, char **argv) {
    run_options o;
    generation g = {0};
    kiln_ctx_params cp;
    double t_load = cli_now_seconds(), t_prompt = 0, t_gen = 0;
    long n_gen = 0;
    kiln_status s;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    if (o.prompt_file) {
        size_t len;
        if ((rc = cli_read_text("run", o.prompt_file, &o.prompt_buf, &len))) return rc;
        o.prompt = o.prompt_buf;
    }
    if ((rc = cli_model_load("run", o.model, &o.engine, NULL, &g.model))) {
        free(o.prompt_buf);
        return rc;
    }
    cp = cli_ctx_params(&o.engine);
    cp.n_ctx = (int32_t)o.n_ctx;
    cp.no_fuse = o.no_fuse;
    cp.kv_type = o.kv_type;
    if ((s = kiln_ctx_create(g.model, &cp, &g.ctx))) rc = cli_fail("run", s, "creating the context");
    if (!rc && (s = kiln_sampler_create(kiln_model_n_vocab(g.model), &o.sampling, &g.sampler)))
        rc = cli_fail("run", s, "creating the sampler");
    if (!rc) rc = cli_grammar_setup("run", &o.grammar, g.model, g.sampler);
    if (!rc) rc = tokenize_prompt(&g, o.prompt);
    if (!rc && (int64_t)g.n_prompt > kiln_ctx_n_ctx(g.ctx))
        rc = cli_usage_error("run", "the prompt has %zu tokens but the context holds %d", g.n_prompt,
                             kiln_ctx_n_ctx(g.ctx));
    if (!rc && (s = kiln_detok_create(kiln_model_vocab(g.model), o.prompt[0] == '\0', &g.detok)))
        rc = cli_fail("run", s, "creating the detokenizer");
    t_load = cli_now_seconds() - t_load;
    if (!rc && (o.lookup || o.model_draft)) rc = spec_create(&g, &o, &cp);
    if (!rc && o.engine.verbose) rc = print_plans(&g);
    if (!rc) rc = g.spec ? generate_spec(&g, &o, &t_prompt, &t_gen, &n_gen) : generate(&g, &o, &t_prompt, &t_gen, &n_gen);
    if (!rc) {
        fprintf(stderr, "\n\nkiln run: load %.1f ms | prompt %zu tokens, %.1f t/s | generation %ld tokens, %.1f t/s\n",
                t_load * 1e3, g.n_prompt, t_prompt > 0 ? (double)g.n_prompt / t_prompt : 0.0, n_gen,
                t_gen > 0 ? (double)n_gen / t_gen : 0.0);
    }
    if (!rc && g.spec) {
        kiln_spec_stats st;
        kiln_spec_get_stats(g.spec, &st);
        fprintf(stderr, "kiln run: speculative: %lld target batches, %lld tokens drafted, %lld accepted (%.1f%%)\n",
                (long long)st.steps, (long long)st.drafted, (long long)st.accepted,
                st.drafted ? 100.0 * (double)st.accepted / (double)st.drafted : 0.0);
    }
    if (!rc && o.engine.verbose) print_device_memory(g.model);
    generation_free(&g);
    cli_grammar_free(&o.grammar);
    free(o.prompt_buf);
    return rc;
}
