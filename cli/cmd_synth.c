/*
 * cmd_synth.c - `kiln synth`: write a llama-architecture GGUF with random weights and the tensor names,
 * shapes and metadata of a real model, for planning, speed and memory work at real sizes.
 *
 * Weights are normal with std 0.02, norms are 1.0, and every tensor's values come from its own stream of
 * a seeded counter-based generator (splitmix64), so the file is reproducible and any row can be made
 * without the rows before it: the rows of each tensor are split among threads (-t), and the bytes do not
 * depend on the thread count. Tensors are produced one at a time through the GGUF writer's fill callback:
 * the whole model is never in memory.
 *
 * A quantization mix (--type q4_k_m, q4_0, ...) is written directly, and is byte for byte the file that
 * `kiln quantize` makes from the F16 file of the same seed: each value is rounded to F16 first, every
 * tensor gets the type kiln_quant_mix_types chooses (the quantizer's own rules), rows are quantized with
 * kiln_quantize_row, and the metadata ends with general.quantization_version and general.file_type, in the
 * order the quantizer writes them.
 */
#include "common.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char synth_help[] =
    "usage: kiln synth [--shape NAME] [options] -o OUT.gguf\n"
    "\n"
    "Write a llama-architecture GGUF with random weights (normal, std 0.02; norms 1.0; seeded).\n"
    "\n"
    "  --shape NAME        tinyllama-1.1b (n_embd 2048, 22 layers, 32 heads, 4 KV heads, ffn 5632,\n"
    "                      context 2048), llama2-7b (4096, 32, 32, 32, 11008, 4096) or stories260k\n"
    "                      (64, 5, 8, 4, 172, 2048); default tinyllama-1.1b\n"
    "  --n-embd N  --n-layer N  --n-head N  --n-head-kv N  --n-ff N  --n-ctx N\n"
    "                      override any dimension of the shape\n"
    "  --type T            f32, f16 or bf16 for the matrices (default f16; norms stay f32), or a\n"
    "                      quantization mix (q4_0, q8_0, q4_k_m, q4_k_s, q5_k_m, q3_k_m, q2_k, q6_k):\n"
    "                      the same bytes as `kiln quantize` makes from the f16 file of the same seed\n"
    "  --vocab FILE        GGUF whose tokenizer.* keys are copied; its token count is the vocab size\n"
    "                      (default: the bundled model's 512-token vocab)\n"
    "  --chat-template FILE\n"
    "                      write FILE's text as tokenizer.chat_template (a Jinja template such as\n"
    "                      Qwen2.5's, recognized by its markers when the model is served)\n"
    "  --seed S            generator seed (default 1)\n"
    "  -t, --threads N     threads that make the rows (default: every online CPU); the file is the\n"
    "                      same for every N\n"
    "  -o, --output FILE   where to write (atomically)\n"
    "  -h, --help          this text\n";

typedef struct synth_shape {
    long n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
} synth_shape;

typedef struct synth_state {
    kiln_tensor_info *tensors; /* every tensor as described to the writer (type = the type written) */
    bool quantized;            /* a mix: matrices are rounded to F16, then quantized */
    uint64_t seed;
    int n_threads;
    uint64_t total_bytes, done_bytes;
    bool progress;
    char error[256]; /* a worker thread's error message (messages are per thread) */
} synth_state;

#define SPLITMIX_GAMMA 0x9e3779b97f4a7c15ULL

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += SPLITMIX_GAMMA);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Two independent normal samples with std 0.02 (Box-Muller). */
static void normal_pair(uint64_t *s, float *a, float *b) {
    double u1 = ((double)(splitmix64(s) >> 11) + 1.0) * 0x1p-53; /* (0, 1] */
    double u2 = (double)(splitmix64(s) >> 11) * 0x1p-53;
    double r = 0.02 * sqrt(-2.0 * log(u1));
    *a = (float)(r * cos(6.283185307179586 * u2));
    *b = (float)(r * sin(6.283185307179586 * u2));
}

/* Values [e0, e0 + n) of the stream that starts at state s0. Pair p (values 2p and 2p + 1) is normal_pair at
 * state s0 + 2p * gamma, so a range is made without the values before it. */
static void stream_values(uint64_t s0, uint64_t e0, size_t n, float *out) {
    uint64_t s = s0 + (e0 / 2) * 2 * SPLITMIX_GAMMA;
    size_t k = 0;
    float a, b;
    if (n > 0 && (e0 & 1)) {
        normal_pair(&s, &a, &b);
        out[k++] = b;
    }
    for (; k + 1 < n; k += 2)
        normal_pair(&s, &out[k], &out[k + 1]);
    if (k < n) {
        normal_pair(&s, &a, &b);
        out[k] = a;
    }
}

static void show_progress(synth_state *st) {
    if (!st->progress) return;
    int width = 40, filled = (int)(width * (double)st->done_bytes / (double)st->total_bytes);
    fprintf(stderr, "\rkiln synth: [%.*s%*s] %5.1f%% of %.2f GB", filled,
            "########################################", width - filled, "",
            100.0 * (double)st->done_bytes / (double)st->total_bytes, (double)st->total_bytes / 1e9);
}

/* One thread's share of a tensor: rows [r0, r1). */
typedef struct synth_work {
    const synth_state *st;
    const kiln_tensor_info *t;
    uint64_t s0;
    char *dst;
    size_t row_bytes;
    int64_t r0, r1;
    kiln_status status;
    char error[256];
} synth_work;

/* Make one row of n values into row (1.0 for norms; rounded through F16 for a mix) and store it in the
 * tensor's type. */
static kiln_status make_row(const synth_work *w, int64_t r, float *row) {
    kiln_type type = w->t->type;
    int64_t n = w->t->ne[0];
    bool norm = w->t->n_dims == 1;
    void *dst = w->dst + (size_t)r * w->row_bytes;
    if (norm)
        for (int64_t i = 0; i < n; i++)
            row[i] = 1.0f;
    else
        stream_values(w->s0, (uint64_t)r * (uint64_t)n, (size_t)n, row);
    if (w->st->quantized && !norm)
        for (int64_t i = 0; i < n; i++)
            row[i] = kiln_fp16_to_fp32(kiln_fp32_to_fp16(row[i]));
    if (type == KILN_TYPE_F32) {
        memcpy(dst, row, (size_t)n * sizeof *row);
        return KILN_OK;
    }
    return kiln_quantize_row(type, row, dst, n);
}

static void *work_rows(void *arg) {
    synth_work *w = arg;
    float *row = malloc((size_t)w->t->ne[0] * sizeof *row);
    if (!row) {
        w->status = KILN_E_NOMEM;
        snprintf(w->error, sizeof w->error, "out of memory for a row of '%s'", w->t->name);
        return NULL;
    }
    for (int64_t r = w->r0; r < w->r1 && !w->status; r++)
        if ((w->status = make_row(w, r, row)))
            snprintf(w->error, sizeof w->error, "tensor '%s' row %lld: %s", w->t->name, (long long)r,
                     kiln_last_error());
    free(row);
    return NULL;
}

/* The writer's fill callback: split the tensor's rows among the threads, in contiguous ranges. */
static kiln_status fill(void *user, int64_t index, void *dst, size_t size) {
    synth_state *st = user;
    const kiln_tensor_info *t = &st->tensors[index];
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    int n = rows < st->n_threads ? (int)rows : st->n_threads, started = 0;
    synth_work work[256];
    pthread_t tid[256];
    kiln_status s = KILN_OK;
    for (int k = 0; k < n; k++)
        work[k] = (synth_work){st,
                               t,
                               st->seed ^ (0x632be59bd9b4e019ULL * (uint64_t)(index + 1)),
                               dst,
                               size / (size_t)rows,
                               rows * k / n,
                               rows * (k + 1) / n,
                               KILN_OK,
                               ""};
    for (int k = 1; k < n; k++, started++)
        if (pthread_create(&tid[k], NULL, work_rows, &work[k])) break;
    work_rows(&work[0]);
    for (int k = started + 1; k < n; k++)
        work_rows(&work[k]); /* rows no thread could take */
    for (int k = 1; k <= started; k++)
        pthread_join(tid[k], NULL);
    for (int k = 0; k < n && !s; k++)
        if ((s = work[k].status)) snprintf(st->error, sizeof st->error, "%s", work[k].error);
    if (s) return s;
    st->done_bytes += size;
    show_progress(st);
    return KILN_OK;
}

static int parse_shape(const char *name, synth_shape *sh) {
    if (!strcmp(name, "tinyllama-1.1b")) *sh = (synth_shape){2048, 22, 32, 4, 5632, 2048};
    else if (!strcmp(name, "llama2-7b"))
        *sh = (synth_shape){4096, 32, 32, 32, 11008, 4096};
    else if (!strcmp(name, "stories260k")) *sh = (synth_shape){64, 5, 8, 4, 172, 2048};
    else
        return cli_usage_error("synth", "unknown shape '%s' (tinyllama-1.1b, llama2-7b, stories260k)", name);
    return CLI_OK;
}

typedef struct synth_options {
    synth_shape shape;
    const char *type_name, *vocab, *output, *shape_name, *chat_template_file;
    char *chat_template; /* the text of --chat-template, or NULL */
    size_t chat_template_len;
    kiln_type type; /* of the matrices: F32, F16 or BF16 (the source type when mix is set) */
    bool is_mix;
    kiln_quant_mix mix;
    uint64_t seed;
    long n_threads;
} synth_options;

/* --type: a float type, or a mix, which is made from F16 values. */
static int parse_type(synth_options *o) {
    o->type = KILN_TYPE_F16;
    if (!strcmp(o->type_name, "f32"))
        o->type = KILN_TYPE_F32;
    else if (!strcmp(o->type_name, "bf16"))
        o->type = KILN_TYPE_BF16;
    else if (strcmp(o->type_name, "f16")) {
        if (kiln_quant_mix_parse(o->type_name, &o->mix))
            return cli_usage_error("synth",
                                   "--type must be f32, f16, bf16 or a quantization mix, not '%s' (%s)",
                                   o->type_name, kiln_last_error());
        o->is_mix = true;
    }
    return CLI_OK;
}

static int parse(int argc, char **argv, synth_options *o) {
    static const struct {
        const char *flag;
        size_t offset;
    } dims[] = {
        {"--n-embd", offsetof(synth_shape, n_embd)},   {"--n-layer", offsetof(synth_shape, n_layer)},
        {"--n-head", offsetof(synth_shape, n_head)},   {"--n-head-kv", offsetof(synth_shape, n_head_kv)},
        {"--n-ff", offsetof(synth_shape, n_ff)},       {"--n-ctx", offsetof(synth_shape, n_ctx)},
    };
    synth_shape over = {0};
    *o = (synth_options){.type_name = "f16", .shape_name = "tinyllama-1.1b", .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true, known = false;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(synth_help, stdout);
            return -1;
        }
        for (size_t d = 0; d < sizeof dims / sizeof dims[0] && !known; d++)
            if (!strcmp(a, dims[d].flag)) {
                known = true;
                ok = cli_arg_int("synth", argc, argv, &i, 1, 1L << 20, (long *)((char *)&over + dims[d].offset));
            }
        if (known) ;
        else if (!strcmp(a, "--shape")) ok = cli_arg_str("synth", argc, argv, &i, &o->shape_name);
        else if (!strcmp(a, "--type")) ok = cli_arg_str("synth", argc, argv, &i, &o->type_name);
        else if (!strcmp(a, "--vocab")) ok = cli_arg_str("synth", argc, argv, &i, &o->vocab);
        else if (!strcmp(a, "--chat-template"))
            ok = cli_arg_str("synth", argc, argv, &i, &o->chat_template_file);
        else if (!strcmp(a, "--seed")) ok = cli_arg_u64("synth", argc, argv, &i, &o->seed);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            ok = cli_arg_int("synth", argc, argv, &i, 1, 256, &o->n_threads);
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) ok = cli_arg_str("synth", argc, argv, &i, &o->output);
        else return cli_usage_error("synth", "unknown option '%s'", a);
        if (!ok) return CLI_USAGE;
    }
    if (parse_shape(o->shape_name, &o->shape)) return CLI_USAGE;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        long v = *(long *)((char *)&over + dims[d].offset);
        if (v) *(long *)((char *)&o->shape + dims[d].offset) = v;
    }
    if (!o->output) return cli_usage_error("synth", "missing -o OUT.gguf");
    if (parse_type(o)) return CLI_USAGE;
    if (o->shape.n_embd % o->shape.n_head || o->shape.n_head % o->shape.n_head_kv ||
        (o->shape.n_embd / o->shape.n_head) % 2)
        return cli_usage_error("synth", "n_embd %ld, n_head %ld, n_head_kv %ld do not divide into even heads",
                               o->shape.n_embd, o->shape.n_head, o->shape.n_head_kv);
    if (!o->vocab) o->vocab = cli_default_model();
    if (!o->n_threads) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o->n_threads = cpus < 1 ? 1 : cpus > 256 ? 256 : cpus;
    }
    return 0;
}

static kiln_status add_u32(kiln_gguf_writer *w, const char *key, uint32_t v) {
    return kiln_gguf_writer_add_scalar(w, key, KILN_GGUF_UINT32, &v);
}

/* The model's keys. A float file names its type third; a mix's file ends with the quantization version and
 * the mix, where `kiln quantize` puts them, so that both ways of making it give the same bytes. */
static kiln_status add_metadata(kiln_gguf_writer *w, const synth_options *o, const kiln_gguf *vocab) {
    const synth_shape *sh = &o->shape;
    char name[96];
    float base = 10000.0f, eps = 1e-5f;
    kiln_type t = o->type;
    uint32_t file_type = t == KILN_TYPE_F32 ? 0 : t == KILN_TYPE_F16 ? 1 : 32; /* llama.cpp's ftype */
    kiln_status s;
    snprintf(name, sizeof name, "synthetic %s", o->shape_name);
    if ((s = kiln_gguf_writer_add_str(w, "general.architecture", "llama", 5)) ||
        (s = kiln_gguf_writer_add_str(w, "general.name", name, strlen(name))) ||
        (!o->is_mix && (s = add_u32(w, "general.file_type", file_type))) ||
        (s = add_u32(w, "llama.context_length", (uint32_t)sh->n_ctx)) ||
        (s = add_u32(w, "llama.embedding_length", (uint32_t)sh->n_embd)) ||
        (s = add_u32(w, "llama.block_count", (uint32_t)sh->n_layer)) ||
        (s = add_u32(w, "llama.feed_forward_length", (uint32_t)sh->n_ff)) ||
        (s = add_u32(w, "llama.attention.head_count", (uint32_t)sh->n_head)) ||
        (s = add_u32(w, "llama.attention.head_count_kv", (uint32_t)sh->n_head_kv)) ||
        (s = add_u32(w, "llama.rope.dimension_count", (uint32_t)(sh->n_embd / sh->n_head))) ||
        (s = kiln_gguf_writer_add_scalar(w, "llama.rope.freq_base", KILN_GGUF_FLOAT32, &base)) ||
        (s = kiln_gguf_writer_add_scalar(w, "llama.attention.layer_norm_rms_epsilon", KILN_GGUF_FLOAT32,
                                         &eps)))
        return s;
    for (int64_t i = 0; i < kiln_gguf_kv_count(vocab); i++)
        if (!strncmp(kiln_gguf_kv_key(vocab, i), "tokenizer.", 10) &&
            !(o->chat_template && !strcmp(kiln_gguf_kv_key(vocab, i), "tokenizer.chat_template")) &&
            (s = kiln_gguf_writer_copy_kv(w, vocab, i)))
            return s;
    if (o->chat_template &&
        (s = kiln_gguf_writer_add_str(w, "tokenizer.chat_template", o->chat_template, o->chat_template_len)))
        return s;
    if (o->is_mix && ((s = add_u32(w, "general.quantization_version", 2)) ||
                      (s = add_u32(w, "general.file_type", (uint32_t)o->mix))))
        return s;
    return KILN_OK;
}

/* Tensor names and shapes in llama.cpp's naming, with the float type: names[] holds 3 + 9 * n_layer
 * entries of 64 bytes, which tensors[] points into. Returns the count. */
static int64_t describe_tensors(const synth_shape *sh, int64_t n_vocab, kiln_type t, char (*names)[64],
                                kiln_tensor_info *tensors) {
    int64_t E = sh->n_embd, Ekv = sh->n_embd / sh->n_head * sh->n_head_kv, F = sh->n_ff, n = 0;
    static const char *const layer_names[9] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                               "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
    int64_t layer_shapes[9][2] = {{E, 1}, {E, E}, {E, Ekv}, {E, Ekv}, {E, E}, {E, 1}, {E, F}, {E, F}, {F, E}};
#define ADD(nd, a, b, ...)                                                                                   \
    do {                                                                                                     \
        snprintf(names[n], 64, __VA_ARGS__);                                                                 \
        tensors[n] = (kiln_tensor_info){                                                                     \
            .name = names[n], .type = (nd) == 1 ? KILN_TYPE_F32 : t, .n_dims = (nd), .ne = {a, b, 1, 1}};    \
        n++;                                                                                                 \
    } while (0)
    ADD(2, E, n_vocab, "token_embd.weight");
    for (long il = 0; il < sh->n_layer; il++)
        for (int k = 0; k < 9; k++)
            ADD(layer_shapes[k][1] == 1 ? 1 : 2, layer_shapes[k][0], layer_shapes[k][1], "blk.%ld.%s.weight",
                il, layer_names[k]);
    ADD(1, E, 1, "output_norm.weight");
    ADD(2, E, n_vocab, "output.weight");
#undef ADD
    return n;
}

/* Choose each tensor's type (the mix's rules when there is one) and describe it to the writer. */
static kiln_status add_tensors(kiln_gguf_writer *w, const synth_options *o, int64_t count, synth_state *st) {
    kiln_type *types = calloc((size_t)count, sizeof *types);
    kiln_status s = types ? KILN_OK : KILN_E_NOMEM;
    if (!s && o->is_mix)
        s = kiln_quant_mix_types(o->mix, st->tensors, count, o->shape.n_head / o->shape.n_head_kv, types);
    for (int64_t i = 0; !s && i < count; i++) {
        kiln_tensor_info *t = &st->tensors[i];
        size_t row;
        if (o->is_mix) t->type = types[i];
        if (!(s = kiln_type_row_bytes(t->type, t->ne[0], &row)))
            s = kiln_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL);
        st->total_bytes += (uint64_t)row * (uint64_t)t->ne[1];
    }
    free(types);
    return s;
}

int cmd_synth(int argc, char **argv) {
    synth_options o;
    synth_state st = {0};
    kiln_gguf *vocab = NULL;
    kiln_gguf_writer *w = NULL;
    char (*names)[64] = NULL;
    int64_t tok, count = 0;
    double t0 = cli_now_seconds();
    kiln_status s;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    st.quantized = o.is_mix;
    st.seed = o.seed;
    st.n_threads = (int)o.n_threads;
    st.progress = isatty(STDERR_FILENO);
    if (o.chat_template_file && (rc = cli_read_text("synth", o.chat_template_file, &o.chat_template,
                                                    &o.chat_template_len)))
        return rc;
    if ((s = kiln_gguf_open(o.vocab, &vocab))) {
        free(o.chat_template);
        return cli_fail("synth", s, "reading the vocabulary");
    }
    tok = kiln_gguf_find_key(vocab, "tokenizer.ggml.tokens");
    size_t n_names = 3 + 9 * (size_t)o.shape.n_layer;
    names = calloc(n_names, sizeof *names);
    st.tensors = calloc(n_names, sizeof *st.tensors);
    if (tok < 0 || kiln_gguf_kv_type(vocab, tok) != KILN_GGUF_ARRAY) rc = cli_usage_error("synth", "'%s' has no tokenizer.ggml.tokens", o.vocab);
    else if (!names || !st.tensors)
        rc = cli_fail("synth", KILN_E_NOMEM, "allocating names");
    else {
        count = describe_tensors(&o.shape, (int64_t)kiln_gguf_arr_len(vocab, tok), o.type, names, st.tensors);
        if ((s = kiln_gguf_writer_create(&w)) || (s = add_metadata(w, &o, vocab)) ||
            (s = add_tensors(w, &o, count, &st)))
            rc = cli_fail("synth", s, "describing the model");
    }
    if (!rc) {
        kiln_gguf_writer_set_fill(w, fill, &st);
        s = kiln_gguf_writer_write_file(w, o.output);
        if (st.progress) fputc('\n', stderr);
        if (s && st.error[0])
            rc = (fprintf(stderr, "kiln synth: %s\n", st.error), CLI_FAIL);
        else if (s)
            rc = cli_fail("synth", s, "writing the model");
    }
    if (!rc)
        fprintf(stderr, "kiln synth: wrote %s (%.3f GB of weights, %s) in %.1f s on %d threads\n", o.output,
                (double)st.total_bytes / 1e9, o.type_name, cli_now_seconds() - t0, st.n_threads);
    kiln_gguf_writer_destroy(w);
    kiln_gguf_close(vocab);
    free(names);
    free(st.tensors);
    free(o.chat_template);
    return rc;
}
