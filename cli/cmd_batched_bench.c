/*
 * cmd_batched_bench.c - `kiln batched-bench`: the speed of decoding many sequences at once, modelled on
 * llama.cpp's llama-batched-bench (the same -npp/-ntg/-npl lists, the same table and JSON-lines fields).
 *
 * For every case (PP prompt tokens, TG generated tokens, B parallel sequences) the cache is cleared, then:
 * prompt processing decodes B prompts of PP seeded random token ids, one per sequence, sequence after
 * sequence in batches of up to n_batch tokens, keeping logits only on each sequence's last prompt token;
 * text generation runs TG steps, each one batch holding one token for every sequence, every token keeping
 * its logits. The fed tokens are seeded random ids, not sampled: speed does not depend on which token is
 * fed, and llama-batched-bench does the same (std::rand() ids, in the llama.cpp vendored by
 * llama-cpp-python 0.3.36). Each case runs once. Before the first, 16 tokens warm the engine up, and before
 * each, the plans of its batch shapes are compiled, so no timing includes compilation.
 *
 * Columns: N_KV = B * (PP + TG), the cells the case fills; S_PP = B * PP / T_PP; S_TG = B * TG / T_TG;
 * S = N_KV / (T_PP + T_TG). A case that does not fit -c is skipped, as llama-batched-bench does.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char batched_bench_help[] =
    "usage: kiln batched-bench [-m FILE] [-npp LIST] [-ntg LIST] [-npl LIST] [options]\n"
    "\n"
    "Measure prompt processing and generation speed with B sequences decoded together, for every\n"
    "combination of the lists (as llama.cpp's llama-batched-bench). Prompts and generated tokens are\n"
    "seeded random token ids; each generation step is one batch of B tokens.\n"
    "\n"
    "  -m, --model FILE      GGUF model (default: the bundled stories260K)\n"
    "  -npp LIST             prompt tokens per sequence, comma-separated (default 128)\n"
    "  -ntg LIST             generated tokens per sequence (default 128)\n"
    "  -npl LIST             parallel sequences B, at most 64 (default 1,2,4,8,16)\n"
    "  -c, --ctx-size N      KV-cache cells shared by the sequences (default: B * (PP + TG) of the\n"
    "                        largest case); cases that do not fit are skipped\n"
    "  -b, --batch-size N    most tokens per decode call (default 512)\n"
    "  -t, --threads N       threads (default: the physical cores)\n"
    "      --devices LIST    backends in priority order, e.g. cpu-restricted:matmul+linear@8,cpu; the\n"
    "                        CPU is always last (default: cpu)\n"
    "      --device D        where to run: auto (a discrete or integrated GPU through Vulkan, else the\n"
    "                        CPU), cpu, or vulkan[:N] (Vulkan device N of `kiln devices`, lavapipe\n"
    "                        included); default $KILN_DEVICE, else cpu. The CPU runs whatever the device\n"
    "                        cannot\n"
    "      --gpu-layers N    with --device: the device runs the last N layers and the output head,\n"
    "                        the CPU the rest (0: none; all, the default; auto: as many as fit)\n"
    "      --cpu LEVEL       CPU kernel level: ref, avx2, avx512, amx or neon (default: the best, or\n"
    "                        $KILN_CPU)\n"
    "      --json            one JSON object per case (llama-batched-bench's jsonl fields) instead of\n"
    "                        the table\n"
    "  -v, --verbose         print the runtime's log to stderr\n"
    "  -h, --help            this text\n"
    "\n"
    "Columns: PP, TG, B; N_KV = B * (PP + TG); T_PP s and S_PP t/s = B * PP / T_PP for the prompts;\n"
    "T_TG s and S_TG t/s = B * TG / T_TG for the generation; T s and S t/s = N_KV / T for both.\n";

enum { LIST_MAX = 32 };

typedef struct bb_options {
    const char *model;
    long npp[LIST_MAX], ntg[LIST_MAX], npl[LIST_MAX];
    int n_npp, n_ntg, n_npl;
    long n_ctx, n_batch;
    bool json;
    cli_engine engine;
} bb_options;

static int parse(int argc, char **argv, bb_options *o) {
    memset(o, 0, sizeof *o);
    o->npp[0] = o->ntg[0] = 128;
    o->n_npp = o->n_ntg = 1;
    for (int k = 0; k < 5; k++)
        o->npl[k] = 1L << k;
    o->n_npl = 5;
    o->n_batch = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(batched_bench_help, stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            ok = cli_arg_str("batched-bench", argc, argv, &i, &o->model);
        else if (!strcmp(a, "-npp"))
            ok = cli_arg_int_list("batched-bench", argc, argv, &i, 1, 1L << 20, o->npp, LIST_MAX, &o->n_npp);
        else if (!strcmp(a, "-ntg"))
            ok = cli_arg_int_list("batched-bench", argc, argv, &i, 1, 1L << 20, o->ntg, LIST_MAX, &o->n_ntg);
        else if (!strcmp(a, "-npl"))
            ok = cli_arg_int_list("batched-bench", argc, argv, &i, 1, KILN_SEQ_MAX, o->npl, LIST_MAX,
                                  &o->n_npl);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            ok = cli_arg_int("batched-bench", argc, argv, &i, 1, 1L << 24, &o->n_ctx);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size"))
            ok = cli_arg_int("batched-bench", argc, argv, &i, 1, 1L << 20, &o->n_batch);
        else if (!strcmp(a, "--json"))
            o->json = true;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose"))
            o->engine.verbose = true;
        else if (!cli_arg_engine("batched-bench", argc, argv, &i, &o->engine, &ok))
            return cli_usage_error("batched-bench", "unknown option '%s'", a);
        if (!ok) return CLI_USAGE;
    }
    if (!o->model) o->model = cli_default_model();
    return CLI_OK;
}

/* One benchmark case and the state its batches are built with. */
typedef struct bb_case {
    int32_t pp, tg, pl;
    kiln_ctx *ctx;
    kiln_batch *batch;
    int32_t n_vocab;
    uint64_t rng;
    bool compile_only; /* compile the plan of each batch instead of decoding it */
    int32_t n_outputs; /* tokens of the current batch that keep their logits */
} bb_case;

static int32_t random_token(bb_case *c) {
    c->rng = c->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int32_t)((c->rng >> 33) % (uint64_t)c->n_vocab);
}

/* Decode (or only compile the plan of) the batch built so far, and empty it. */
static kiln_status flush(bb_case *c) {
    kiln_status s = KILN_OK;
    kiln_plan_info info;
    if (c->batch->n_tokens == 0) return KILN_OK;
    if (c->compile_only) /* a batch without logits still computes one row, as decode does */
        s = kiln_ctx_plan_info(c->ctx, c->batch->n_tokens, c->n_outputs > 0 ? c->n_outputs : 1, &info);
    else
        s = kiln_ctx_decode_batch(c->ctx, c->batch);
    kiln_batch_clear(c->batch);
    c->n_outputs = 0;
    return s;
}

static kiln_status add(bb_case *c, int32_t pos, int32_t seq, bool logits) {
    kiln_status s = kiln_batch_add(c->batch, random_token(c), pos, seq, logits);
    c->n_outputs += logits;
    if (!s && c->batch->n_tokens == c->batch->capacity) s = flush(c);
    return s;
}

/* The prompts: sequence after sequence, logits on each one's last token. */
static kiln_status prompt_phase(bb_case *c) {
    kiln_status s = KILN_OK;
    for (int32_t j = 0; !s && j < c->pl; j++)
        for (int32_t i = 0; !s && i < c->pp; i++)
            s = add(c, i, j, i == c->pp - 1);
    return s ? s : flush(c);
}

/* The generation: TG steps of one token per sequence, every token keeping its logits. */
static kiln_status generation_phase(bb_case *c) {
    kiln_status s = KILN_OK;
    for (int32_t i = 0; !s && i < c->tg; i++) {
        for (int32_t j = 0; !s && j < c->pl; j++)
            s = add(c, c->pp + i, j, true);
        if (!s) s = flush(c);
    }
    return s;
}

typedef struct bb_result {
    double t_pp, t_tg;
} bb_result;

static int run_case(bb_case *c, bb_result *r) {
    kiln_status s;
    double t0;
    c->compile_only = true;
    if ((s = prompt_phase(c)) || (s = generation_phase(c)))
        return cli_fail("batched-bench", s, "compiling the plans");
    c->compile_only = false;
    c->rng = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)c->pp << 40) ^ ((uint64_t)c->tg << 20) ^ (uint64_t)c->pl;
    kiln_ctx_reset(c->ctx);
    t0 = cli_now_seconds();
    if ((s = prompt_phase(c))) return cli_fail("batched-bench", s, "prompt processing");
    r->t_pp = cli_now_seconds() - t0;
    t0 = cli_now_seconds();
    if ((s = generation_phase(c))) return cli_fail("batched-bench", s, "generation");
    r->t_tg = cli_now_seconds() - t0;
    return CLI_OK;
}

static void print_header(const bb_options *o, const kiln_ctx *ctx, int32_t n_threads) {
    printf("\nkiln batched-bench: n_kv_max = %d, n_batch = %d, n_seq_max = %d, n_threads = %d, devices = %s,"
           " cpu = %s\n\n",
           kiln_ctx_n_ctx(ctx), kiln_ctx_n_batch(ctx), kiln_ctx_n_seq_max(ctx), n_threads,
           cli_engine_devices(&o->engine) ? cli_engine_devices(&o->engine) : "cpu", kiln_get_cpu_level());
    printf("|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |\n", "PP", "TG", "B", "N_KV",
           "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
    printf("|%6s-|-%6s-|-%4s-|-%6s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|\n", "------", "------", "----",
           "------", "--------", "--------", "--------", "--------", "--------", "--------");
}

static void print_row(const bb_options *o, const kiln_ctx *ctx, int32_t n_threads, const bb_case *c,
                      const bb_result *r) {
    int32_t n_kv = c->pl * (c->pp + c->tg);
    double t = r->t_pp + r->t_tg;
    double s_pp = (double)c->pl * c->pp / r->t_pp, s_tg = (double)c->pl * c->tg / r->t_tg, s = n_kv / t;
    if (o->json)
        printf("{\"n_kv_max\": %d, \"n_batch\": %d, \"n_threads\": %d, \"pp\": %d, \"tg\": %d, \"pl\": %d, "
               "\"n_kv\": %d, \"t_pp\": %f, \"speed_pp\": %f, \"t_tg\": %f, \"speed_tg\": %f, \"t\": %f, "
               "\"speed\": %f}\n",
               kiln_ctx_n_ctx(ctx), kiln_ctx_n_batch(ctx), n_threads, c->pp, c->tg, c->pl, n_kv, r->t_pp,
               s_pp, r->t_tg, s_tg, t, s);
    else
        printf("|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n", c->pp, c->tg,
               c->pl, n_kv, r->t_pp, s_pp, r->t_tg, s_tg, t, s);
    fflush(stdout);
}

/* Decode 16 tokens of sequence 0 (fewer when n_batch is smaller), then forget them. */
static int warm_up(bb_case *c) {
    kiln_status s = KILN_OK;
    int32_t n = c->batch->capacity < 16 ? c->batch->capacity : 16;
    c->rng = 1;
    for (int32_t i = 0; !s && i < n; i++)
        s = add(c, i, 0, i == n - 1);
    if (!s) s = flush(c);
    kiln_ctx_reset(c->ctx);
    return s ? cli_fail("batched-bench", s, "warming up") : CLI_OK;
}

static int run_cases(const bb_options *o, kiln_ctx *ctx, kiln_batch *batch, int32_t n_vocab,
                     int32_t n_threads) {
    bb_case c = {.ctx = ctx, .batch = batch, .n_vocab = n_vocab};
    int rc = warm_up(&c);
    if (!rc && !o->json) print_header(o, ctx, n_threads);
    for (int a = 0; !rc && a < o->n_npp; a++)
        for (int b = 0; !rc && b < o->n_ntg; b++)
            for (int k = 0; !rc && k < o->n_npl; k++) {
                bb_result r = {0, 0};
                c.pp = (int32_t)o->npp[a], c.tg = (int32_t)o->ntg[b], c.pl = (int32_t)o->npl[k];
                if ((int64_t)c.pl * (c.pp + c.tg) > kiln_ctx_n_ctx(ctx)) {
                    fprintf(stderr,
                            "kiln batched-bench: skipping PP %d, TG %d, B %d: %lld cells exceed -c %d\n",
                            c.pp, c.tg, c.pl, (long long)c.pl * (c.pp + c.tg), kiln_ctx_n_ctx(ctx));
                    continue;
                }
                if (!(rc = run_case(&c, &r))) print_row(o, ctx, n_threads, &c, &r);
            }
    return rc;
}

int cmd_batched_bench(int argc, char **argv) {
    bb_options o;
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    kiln_batch batch = {0};
    kiln_ctx_params cp;
    int64_t largest = 0;
    long max_pl = 1;
    kiln_status s;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    for (int a = 0; a < o.n_npp; a++)
        for (int b = 0; b < o.n_ntg; b++)
            for (int k = 0; k < o.n_npl; k++) {
                int64_t cells = (int64_t)o.npl[k] * (o.npp[a] + o.ntg[b]);
                if (cells > largest) largest = cells;
            }
    for (int k = 0; k < o.n_npl; k++)
        if (o.npl[k] > max_pl) max_pl = o.npl[k];
    if (!o.n_ctx && largest > KILN_MAX_CTX)
        return cli_usage_error("batched-bench",
                               "the largest case needs %lld cells, more than KILN_MAX_CTX (%d)",
                               (long long)largest, KILN_MAX_CTX);
    if ((rc = cli_model_load("batched-bench", o.model, &o.engine, NULL, &m))) return rc;
    cp = cli_ctx_params(&o.engine);
    cp.n_ctx = (int32_t)(o.n_ctx ? o.n_ctx : largest);
    cp.n_batch = (int32_t)o.n_batch;
    cp.n_seq_max = (int32_t)max_pl;
    if ((s = kiln_ctx_create(m, &cp, &ctx))) rc = cli_fail("batched-bench", s, "creating the context");
    if (!rc && (s = kiln_batch_init(kiln_ctx_n_batch(ctx), &batch)))
        rc = cli_fail("batched-bench", s, "allocating the batch");
    if (!rc) rc = run_cases(&o, ctx, &batch, kiln_model_n_vocab(m), kiln_model_n_threads(m));
    kiln_batch_free(&batch);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
    return rc;
}
