/*
 * cmd_synth.c - `kiln synth`: write a llama-architecture GGUF with random weights and the tensor names,
 * shapes and metadata of a real model, for planning, speed and memory work at real sizes.
 *
 * Weights are normal with std 0.02, norms are 1.0, and every tensor's values come from its own stream of
 * a seeded generator, so the file is reproducible. Tensors are produced one at a time through the GGUF
 * writer's fill callback: the whole model is never in memory.
 */
#include "common.h"

#include <math.h>
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
    "                      context 2048) or stories260k (64, 5, 8, 4, 172, 2048); default tinyllama-1.1b\n"
    "  --n-embd N  --n-layer N  --n-head N  --n-head-kv N  --n-ff N  --n-ctx N\n"
    "                      override any dimension of the shape\n"
    "  --type T            f32, f16 or bf16 for the matrices (default f16); norms stay f32\n"
    "  --vocab FILE        GGUF whose tokenizer.* keys are copied; its token count is the vocab size\n"
    "                      (default: the bundled model's 512-token vocab)\n"
    "  --seed S            generator seed (default 1)\n"
    "  -o, --output FILE   where to write (atomically)\n"
    "  -h, --help          this text\n";

typedef struct synth_shape {
    long n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
} synth_shape;

typedef struct synth_state {
    kiln_type type;
    uint64_t seed;
    uint64_t total_bytes, done_bytes;
    const char *const *names; /* tensor names, to know which are norms */
    bool progress;
} synth_state;

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
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

static void store(kiln_type type, void *dst, size_t i, float v) {
    if (type == KILN_TYPE_F32) ((float *)dst)[i] = v;
    else if (type == KILN_TYPE_F16) ((uint16_t *)dst)[i] = kiln_fp32_to_fp16(v);
    else ((uint16_t *)dst)[i] = kiln_fp32_to_bf16(v);
}

static void show_progress(synth_state *st) {
    if (!st->progress) return;
    int width = 40, filled = (int)(width * (double)st->done_bytes / (double)st->total_bytes);
    fprintf(stderr, "\rkiln synth: [%.*s%*s] %5.1f%% of %.2f GB", filled,
            "########################################", width - filled, "",
            100.0 * (double)st->done_bytes / (double)st->total_bytes, (double)st->total_bytes / 1e9);
}

static kiln_status fill(void *user, int64_t index, void *dst, size_t size) {
    synth_state *st = user;
    bool norm = strstr(st->names[index], "_norm") != NULL;
    kiln_type type = norm ? KILN_TYPE_F32 : st->type;
    size_t elem = type == KILN_TYPE_F32 ? 4 : 2, n = size / elem;
    uint64_t s = st->seed ^ (0x632be59bd9b4e019ULL * (uint64_t)(index + 1));
    for (size_t i = 0; i < n; i += 2) {
        float a = 1.0f, b = 1.0f;
        if (!norm) normal_pair(&s, &a, &b);
        store(type, dst, i, a);
        if (i + 1 < n) store(type, dst, i + 1, b);
    }
    st->done_bytes += size;
    show_progress(st);
    return KILN_OK;
}

static int parse_shape(const char *name, synth_shape *sh) {
    if (!strcmp(name, "tinyllama-1.1b")) *sh = (synth_shape){2048, 22, 32, 4, 5632, 2048};
    else if (!strcmp(name, "stories260k")) *sh = (synth_shape){64, 5, 8, 4, 172, 2048};
    else return cli_usage_error("synth", "unknown shape '%s' (tinyllama-1.1b, stories260k)", name);
    return CLI_OK;
}

typedef struct synth_options {
    synth_shape shape;
    const char *type_name, *vocab, *output, *shape_name;
    uint64_t seed;
} synth_options;

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
    o->type_name = "f16";
    o->vocab = NULL;
    o->output = NULL;
    o->shape_name = "tinyllama-1.1b";
    o->seed = 1;
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
        else if (!strcmp(a, "--seed")) ok = cli_arg_u64("synth", argc, argv, &i, &o->seed);
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
    if (strcmp(o->type_name, "f32") && strcmp(o->type_name, "f16") && strcmp(o->type_name, "bf16"))
        return cli_usage_error("synth", "--type must be f32, f16 or bf16, not '%s'", o->type_name);
    if (o->shape.n_embd % o->shape.n_head || o->shape.n_head % o->shape.n_head_kv ||
        (o->shape.n_embd / o->shape.n_head) % 2)
        return cli_usage_error("synth", "n_embd %ld, n_head %ld, n_head_kv %ld do not divide into even heads",
                               o->shape.n_embd, o->shape.n_head, o->shape.n_head_kv);
    if (!o->vocab) o->vocab = cli_default_model();
    return 0;
}

static kiln_status add_u32(kiln_gguf_writer *w, const char *key, uint32_t v) {
    return kiln_gguf_writer_add_scalar(w, key, KILN_GGUF_UINT32, &v);
}

static kiln_status add_metadata(kiln_gguf_writer *w, const synth_options *o, const kiln_gguf *vocab, kiln_type t) {
    const synth_shape *sh = &o->shape;
    char name[96];
    float base = 10000.0f, eps = 1e-5f;
    uint32_t file_type = t == KILN_TYPE_F32 ? 0 : t == KILN_TYPE_F16 ? 1 : 32; /* llama.cpp's ftype */
    kiln_status s;
    snprintf(name, sizeof name, "synthetic %s", o->shape_name);
    if ((s = kiln_gguf_writer_add_str(w, "general.architecture", "llama", 5)) ||
        (s = kiln_gguf_writer_add_str(w, "general.name", name, strlen(name))) ||
        (s = add_u32(w, "general.file_type", file_type)) ||
        (s = add_u32(w, "llama.context_length", (uint32_t)sh->n_ctx)) ||
        (s = add_u32(w, "llama.embedding_length", (uint32_t)sh->n_embd)) ||
        (s = add_u32(w, "llama.block_count", (uint32_t)sh->n_layer)) ||
        (s = add_u32(w, "llama.feed_forward_length", (uint32_t)sh->n_ff)) ||
        (s = add_u32(w, "llama.attention.head_count", (uint32_t)sh->n_head)) ||
        (s = add_u32(w, "llama.attention.head_count_kv", (uint32_t)sh->n_head_kv)) ||
        (s = add_u32(w, "llama.rope.dimension_count", (uint32_t)(sh->n_embd / sh->n_head))) ||
        (s = kiln_gguf_writer_add_scalar(w, "llama.rope.freq_base", KILN_GGUF_FLOAT32, &base)) ||
        (s = kiln_gguf_writer_add_scalar(w, "llama.attention.layer_norm_rms_epsilon", KILN_GGUF_FLOAT32, &eps)))
        return s;
    for (int64_t i = 0; i < kiln_gguf_kv_count(vocab); i++)
        if (!strncmp(kiln_gguf_kv_key(vocab, i), "tokenizer.", 10) && (s = kiln_gguf_writer_copy_kv(w, vocab, i)))
            return s;
    return KILN_OK;
}

/* Tensor names and shapes in llama.cpp's naming. names[] must hold 3 + 9 * n_layer entries of 64 bytes. */
static kiln_status add_tensors(kiln_gguf_writer *w, const synth_shape *sh, int64_t n_vocab, kiln_type t,
                               char (*names)[64], synth_state *st) {
    int64_t E = sh->n_embd, Ekv = sh->n_embd / sh->n_head * sh->n_head_kv, F = sh->n_ff;
    static const char *const layer_names[9] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                               "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
    int64_t layer_shapes[9][2] = {{E, 1}, {E, E}, {E, Ekv}, {E, Ekv}, {E, E}, {E, 1}, {E, F}, {E, F}, {F, E}};
    int n = 0;
    kiln_status s;
#define ADD(nd, a, b, ...)                                                                             \
    do {                                                                                               \
        int64_t ne_[2] = {a, b};                                                                       \
        kiln_type tt_ = (nd) == 1 ? KILN_TYPE_F32 : t;                                                 \
        snprintf(names[n], 64, __VA_ARGS__);                                                           \
        if ((s = kiln_gguf_writer_add_tensor(w, names[n], tt_, nd, ne_, NULL))) return s;               \
        st->total_bytes += (uint64_t)a * (uint64_t)b * (tt_ == KILN_TYPE_F32 ? 4u : 2u);               \
        n++;                                                                                           \
    } while (0)
    ADD(2, E, n_vocab, "token_embd.weight");
    for (long il = 0; il < sh->n_layer; il++)
        for (int k = 0; k < 9; k++) ADD(layer_shapes[k][1] == 1 ? 1 : 2, layer_shapes[k][0], layer_shapes[k][1],
                                        "blk.%ld.%s.weight", il, layer_names[k]);
    ADD(1, E, 1, "output_norm.weight");
    ADD(2, E, n_vocab, "output.weight");
#undef ADD
    return KILN_OK;
}

int cmd_synth(int argc, char **argv) {
    synth_options o;
    synth_state st = {0};
    kiln_gguf *vocab = NULL;
    kiln_gguf_writer *w = NULL;
    char (*names)[64] = NULL;
    const char **name_ptrs = NULL;
    int64_t tok;
    kiln_status s;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    st.type = !strcmp(o.type_name, "f32") ? KILN_TYPE_F32 : !strcmp(o.type_name, "f16") ? KILN_TYPE_F16 : KILN_TYPE_BF16;
    st.seed = o.seed;
    st.progress = isatty(STDERR_FILENO);
    if ((s = kiln_gguf_open(o.vocab, &vocab))) return cli_fail("synth", s, "reading the vocabulary");
    tok = kiln_gguf_find_key(vocab, "tokenizer.ggml.tokens");
    size_t n_names = 3 + 9 * (size_t)o.shape.n_layer;
    names = calloc(n_names, sizeof *names);
    name_ptrs = calloc(n_names, sizeof *name_ptrs);
    if (tok < 0 || kiln_gguf_kv_type(vocab, tok) != KILN_GGUF_ARRAY) rc = cli_usage_error("synth", "'%s' has no tokenizer.ggml.tokens", o.vocab);
    else if (!names || !name_ptrs) rc = cli_fail("synth", KILN_E_NOMEM, "allocating names");
    else if ((s = kiln_gguf_writer_create(&w)) || (s = add_metadata(w, &o, vocab, st.type)) ||
             (s = add_tensors(w, &o.shape, (int64_t)kiln_gguf_arr_len(vocab, tok), st.type, names, &st)))
        rc = cli_fail("synth", s, "describing the model");
    if (!rc) {
        for (size_t i = 0; i < n_names; i++) name_ptrs[i] = names[i];
        st.names = name_ptrs;
        kiln_gguf_writer_set_fill(w, fill, &st);
        if ((s = kiln_gguf_writer_write_file(w, o.output))) rc = cli_fail("synth", s, "writing the model");
        if (st.progress) fputc('\n', stderr);
    }
    if (!rc) fprintf(stderr, "kiln synth: wrote %s (%.3f GB of weights)\n", o.output, (double)st.total_bytes / 1e9);
    kiln_gguf_writer_destroy(w);
    kiln_gguf_close(vocab);
    free(names);
    free(name_ptrs);
    return rc;
}
