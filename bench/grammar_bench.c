/*
 * grammar_bench.c - what a grammar mask costs per token, beside a decode step of the same model
 * (docs/performance.md, "Grammar masks").
 *
 *   cc -O2 -Iinclude bench/grammar_bench.c build/libkiln.a -lm -lpthread -o build/grammar_bench
 *   flock /tmp/kiln-bench.lock build/grammar_bench MODEL.gguf [N_VOCAB_SYNTH] [THREADS]
 *   build/grammar_bench VOCAB.gguf N_VOCAB_SYNTH 0      (masks only: no decode step, percentages vs 100 ms)
 *
 * 1. A decode step: the model's one-token decode after a 1-token prompt, 24 timed steps, median.
 * 2. The mask of every step of a JSON answer under a schema (SCHEMA below, compiled by the library's
 *    converter): the answer's tokens are chosen as a generation would meet them (at each step, of the
 *    tokens the mask allows, the longest whose bytes continue DOC), so the states are those of a real
 *    constrained generation; per step the mask is timed, then the token accepted. Reported: mean, median
 *    and max per step, the cache's hits and misses, and the mean of the steps that walked the trie.
 * 3. The same with the vocabulary grown to N_VOCAB_SYNTH tokens (150000 for a Qwen-sized vocabulary): the
 *    model's tokens plus tokens made by joining two of its normal tokens (deterministic), written to a
 *    GGUF image in memory and read back as a vocabulary.
 */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},\"status\":{\"enum\":[\"new\",\"paid\",\"shipped\"]},"
    "\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":"
    "\"string\"},"
    "\"qty\":{\"type\":\"integer\",\"minimum\":1},\"price\":{\"type\":\"number\"}},\"required\":[\"sku\","
    "\"qty\"]},"
    "\"maxItems\":10},\"note\":{\"type\":\"string\"}},\"required\":[\"id\",\"name\",\"status\",\"items\"]}";
static const char DOC[] =
    "{\"id\": \"123e4567-e89b-12d3-a456-426614174000\", \"name\": \"Ada Lovelace and the engine\", "
    "\"status\": \"paid\", \"items\": [{\"sku\": \"AB-1234\", \"qty\": 2, \"price\": 19.99}, "
    "{\"sku\": \"CD-77\", \"qty\": 1}, {\"sku\": \"EF-9000-XL\", \"qty\": 12, \"price\": 0.5}], "
    "\"note\": \"Please leave the parcel at the door; the dog is friendly but loud.\"}";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what) {
    fprintf(stderr, "grammar_bench: %s: %s\n", what, kiln_last_error());
    exit(1);
}

static double proc_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The median wall time of a one-token decode step; *cpu_ms the median process CPU time of a step divided
 * by the threads (what the step takes when its threads each have a core: the load-independent figure on
 * a shared machine). */
static double decode_step_ms(kiln_model *model, double *cpu_ms) {
    kiln_ctx_params cp = kiln_ctx_params_default();
    cp.n_ctx = 256;
    kiln_ctx *ctx;
    if (kiln_ctx_create(model, &cp, &ctx)) die("context");
    const float *logits;
    int32_t t = kiln_vocab_bos(kiln_model_vocab(model));
    if (t < 0) t = 1;
    if (kiln_ctx_decode(ctx, &t, 1, &logits)) die("decode");
    double ms[24], cpu[24];
    for (int i = 0; i < 24; i++) {
        int32_t next = 100 + i;
        double c0 = proc_cpu_now(), t0 = now();
        if (kiln_ctx_decode(ctx, &next, 1, &logits)) die("decode");
        ms[i] = (now() - t0) * 1e3;
        cpu[i] = (proc_cpu_now() - c0) * 1e3 / kiln_model_n_threads(model);
    }
    kiln_ctx_destroy(ctx);
    qsort(ms, 24, sizeof *ms, cmp_double);
    qsort(cpu, 24, sizeof *cpu, cmp_double);
    *cpu_ms = cpu[12];
    return ms[12];
}

/* The longest allowed token whose bytes continue doc at *at (the detokenized bytes of each token). */
static int32_t pick(const kiln_vocab *vocab, const uint32_t *bits, int32_t n, const char *rest,
                    size_t rest_len, size_t *len) {
    int32_t best = -1;
    *len = 0;
    char buf[512];
    for (int32_t t = 0; t < n; t++) {
        if (!(bits[t >> 5] >> (t & 31) & 1u)) continue;
        size_t k = 0;
        if (kiln_detokenize(vocab, &t, 1, false, buf, sizeof buf, &k) != KILN_OK) continue;
        if (k > *len && k <= rest_len && memcmp(buf, rest, k) == 0) best = t, *len = k;
    }
    return best;
}

static void run_masks(const char *label, const kiln_vocab *vocab, const kiln_grammar *g, double step_ms,
                      double step_cpu_ms) {
    kiln_grammar_vocab *gv;
    double t0 = now();
    if (kiln_grammar_vocab_create(vocab, NULL, 0, &gv)) die("grammar vocab");
    double build_ms = (now() - t0) * 1e3;
    kiln_grammar_matcher *m;
    if (kiln_grammar_matcher_create(g, gv, &m)) die("matcher");
    int32_t n = kiln_vocab_n_tokens(vocab);
    double ms[1024], miss_sum = 0, cpu_sum = 0;
    int steps = 0, misses = 0;
    size_t at = 0, total = strlen(DOC);
    while (at < total && steps < 1024) {
        kiln_grammar_stats before, after;
        kiln_grammar_matcher_stats(m, &before);
        const uint32_t *bits;
        double c0 = cpu_now();
        t0 = now();
        if (kiln_grammar_matcher_mask(m, &bits)) die("mask");
        ms[steps] = (now() - t0) * 1e3;
        cpu_sum += (cpu_now() - c0) * 1e3;
        kiln_grammar_matcher_stats(m, &after);
        if (after.cache_misses > before.cache_misses) misses++, miss_sum += ms[steps];
        size_t len;
        int32_t t = pick(vocab, bits, n, DOC + at, total - at, &len);
        if (t < 0) die("no allowed token continues the document");
        if (kiln_grammar_matcher_accept(m, t)) die("accept");
        at += len;
        steps++;
    }
    double sum = 0, sorted[1024];
    for (int i = 0; i < steps; i++)
        sum += ms[i], sorted[i] = ms[i];
    qsort(sorted, (size_t)steps, sizeof *sorted, cmp_double);
    kiln_grammar_stats st;
    kiln_grammar_matcher_stats(m, &st);
    printf("%s: %d tokens in the vocabulary; trie built in %.1f ms\n", label, n, build_ms);
    printf("  %d steps: mask mean %.3f ms (%.2f%% of the decode step), median %.3f ms, max %.3f ms\n", steps,
           sum / steps, 100.0 * sum / steps / step_ms, sorted[steps / 2], sorted[steps - 1]);
    printf("  thread CPU time per mask: mean %.3f ms = %.2f%% of the step's CPU time per thread (%.2f ms)\n",
           cpu_sum / steps, 100.0 * cpu_sum / steps / step_cpu_ms, step_cpu_ms);
    printf(
        "  cache: %llu hits, %llu misses; a miss (trie walk) costs %.3f ms on average (%.1f%% of a step)\n",
        (unsigned long long)st.cache_hits, (unsigned long long)st.cache_misses,
        misses ? miss_sum / misses : 0.0, misses ? 100.0 * miss_sum / misses / step_ms : 0.0);
    kiln_grammar_matcher_destroy(m);
    kiln_grammar_vocab_destroy(gv);
}

/* The model's vocabulary grown to n_total tokens, as a GGUF image in memory. */
static kiln_vocab *grown_vocab(const kiln_gguf *src, int32_t n_total, void **image, kiln_gguf **file) {
    int64_t ki = kiln_gguf_find_key(src, "tokenizer.ggml.tokens");
    int64_t ks = kiln_gguf_find_key(src, "tokenizer.ggml.scores");
    int64_t kt = kiln_gguf_find_key(src, "tokenizer.ggml.token_type");
    if (ki < 0 || ks < 0 || kt < 0) die("the model has no SentencePiece vocabulary to grow");
    int32_t n = (int32_t)kiln_gguf_arr_len(src, ki);
    kiln_str *toks = calloc((size_t)n_total, sizeof *toks);
    float *scores = calloc((size_t)n_total, sizeof *scores);
    int32_t *types = calloc((size_t)n_total, sizeof *types);
    char *blob = malloc((size_t)n_total * 64);
    const float *s0 = kiln_gguf_arr_data(src, ks);
    const int32_t *t0 = kiln_gguf_arr_data(src, kt);
    size_t used = 0;
    for (int32_t i = 0; i < n; i++) {
        kiln_gguf_arr_str(src, ki, (uint64_t)i, &toks[i]);
        scores[i] = s0[i], types[i] = t0[i];
    }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int32_t i = n; i < n_total;) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int32_t a = (int32_t)(x % (uint64_t)n), b = (int32_t)((x >> 32) % (uint64_t)n);
        if (types[a] != KILN_TOKEN_NORMAL || types[b] != KILN_TOKEN_NORMAL) continue;
        if (toks[a].len + toks[b].len > 60) continue;
        char *p = blob + used;
        memcpy(p, toks[a].data, toks[a].len);
        memcpy(p + toks[a].len, toks[b].data, toks[b].len);
        toks[i] = (kiln_str){p, toks[a].len + toks[b].len};
        used += toks[i].len;
        scores[i] = -1000.0f - (float)i, types[i] = KILN_TOKEN_NORMAL;
        i++;
    }
    kiln_gguf_writer *w;
    size_t size;
    kiln_str model;
    if (kiln_gguf_get_str(src, "tokenizer.ggml.model", &model)) die("tokenizer.ggml.model");
    uint32_t bos = 1, eos = 2;
    kiln_gguf_get_u32(src, "tokenizer.ggml.bos_token_id", &bos);
    kiln_gguf_get_u32(src, "tokenizer.ggml.eos_token_id", &eos);
    if (kiln_gguf_writer_create(&w) ||
        kiln_gguf_writer_add_str(w, "tokenizer.ggml.model", model.data, model.len) ||
        kiln_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", toks, (uint64_t)n_total) ||
        kiln_gguf_writer_add_array(w, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, scores,
                                   (uint64_t)n_total) ||
        kiln_gguf_writer_add_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types,
                                   (uint64_t)n_total) ||
        kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.bos_token_id", KILN_GGUF_UINT32, &bos) ||
        kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.eos_token_id", KILN_GGUF_UINT32, &eos) ||
        kiln_gguf_writer_write_memory(w, image, &size))
        die("writing the grown vocabulary");
    kiln_gguf_writer_destroy(w);
    kiln_vocab *v;
    if (kiln_gguf_open_memory(*image, size, file) || kiln_vocab_create(*file, &v))
        die("reading the grown vocabulary");
    free(toks), free(scores), free(types), free(blob);
    return v;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: grammar_bench MODEL.gguf [N_VOCAB_SYNTH] [THREADS]\n");
        return 2;
    }
    int32_t n_synth = argc > 2 ? atoi(argv[2]) : 150000;
    kiln_model_params mp = kiln_model_params_default();
    mp.n_threads = argc > 3 ? atoi(argv[3]) : 0;
    kiln_model *model = NULL;
    kiln_gguf *vfile = NULL; /* opened here (masks only) */
    const kiln_gguf *src = NULL;
    kiln_vocab *vocab = NULL;
    double step = 100.0, step_cpu = 100.0;
    if (argc > 3 && mp.n_threads == 0) {
        if (kiln_gguf_open(argv[1], &vfile) || kiln_vocab_create(vfile, &vocab))
            die("reading the vocabulary");
        src = vfile;
        printf("masks only: percentages are of a nominal 100 ms step\n");
    } else {
        if (kiln_model_load_ex(argv[1], &mp, &model)) die("loading the model");
        step = decode_step_ms(model, &step_cpu);
        printf("decode step: median %.2f ms wall, %.2f ms CPU per thread, over 24 one-token steps (%d "
               "threads)\n",
               step, step_cpu, kiln_model_n_threads(model));
        src = kiln_model_gguf(model);
        vocab = (kiln_vocab *)kiln_model_vocab(model);
    }
    char *gbnf;
    size_t len;
    kiln_grammar *g;
    if (kiln_json_schema_to_gbnf(SCHEMA, sizeof SCHEMA - 1, &gbnf, &len) || kiln_grammar_parse(gbnf, len, &g))
        die("compiling the schema");
    run_masks("model vocabulary", vocab, g, step, step_cpu);
    void *image;
    kiln_gguf *file;
    kiln_vocab *big = grown_vocab(src, n_synth, &image, &file);
    run_masks("grown vocabulary", big, g, step, step_cpu);
    kiln_vocab_destroy(big);
    kiln_gguf_close(file);
    kiln_free(image);
    kiln_grammar_destroy(g);
    kiln_free(gbnf);
    if (!model) kiln_vocab_destroy(vocab), kiln_gguf_close(vfile);
    kiln_model_destroy(model);
    return 0;
}
