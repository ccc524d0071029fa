/*
 * cmd_embed.c - `kiln embed`: sentence embeddings of texts with an encoder model (BERT). Each text is
 * tokenized as sentence-transformers feeds it ([CLS] text [SEP], cut to --max-tokens with [SEP] kept), the
 * texts are packed in order into batches (at most n_batch tokens and 64 sequences each, every text whole
 * in one batch), and each text's pooled, L2-normalized embedding is printed in the order given.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char embed_help[] =
    "usage: kiln embed -m FILE [options] [TEXT ...]\n"
    "\n"
    "Print one sentence embedding per text: each on a line as space-separated floats, or with --json all\n"
    "as one JSON array of arrays. Texts come from the arguments, then from -f FILE (one text per line).\n"
    "The model must be an encoder (a BERT GGUF, see docs/embeddings.md); embeddings are pooled as the\n"
    "model says (bert.pooling_type) and scaled to unit length.\n"
    "\n"
    "  -m, --model FILE       GGUF encoder model (required)\n"
    "  -f, --file FILE        also embed each line of FILE ('-': standard input); empty lines are texts too\n"
    "      --json             print a JSON array of arrays\n"
    "      --max-tokens N     cut each text to N tokens, [CLS] and [SEP] included (default: the model's\n"
    "                         context length; all-MiniLM-L6-v2 was trained with 256)\n"
    "      --pooling NAME     mean, cls or last instead of the model's pooling\n"
    "  -t, --threads N        worker threads (default: the physical cores)\n"
    "      --devices LIST     backends in priority order (default: cpu)\n"
    "      --device D         auto, cpu or vulkan[:N] (default $KILN_DEVICE, else cpu; docs/vulkan.md)\n"
    "      --cpu LEVEL        CPU kernel level: ref, avx2, avx512, amx or neon (default: the best, or\n"
    "                         $KILN_CPU)\n"
    "  -v, --verbose          print the runtime's log to stderr\n"
    "  -h, --help             this text\n";

typedef struct embed_options {
    const char *model, *file;
    bool json;
    long max_tokens;
    kiln_pooling pooling;
    cli_engine engine;
} embed_options;

typedef struct text_list {
    const char **texts; /* [n] borrowed from argv or from file_buf */
    size_t n;
    char *file_buf;
} text_list;

static int parse(int argc, char **argv, embed_options *o, text_list *t) {
    memset(o, 0, sizeof *o);
    o->pooling = KILN_POOLING_UNSPECIFIED;
    t->texts = calloc((size_t)argc, sizeof *t->texts);
    if (!t->texts) return cli_fail("embed", KILN_E_NOMEM, "reading the arguments");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *name;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(embed_help, stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            ok = cli_arg_str("embed", argc, argv, &i, &o->model);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file"))
            ok = cli_arg_str("embed", argc, argv, &i, &o->file);
        else if (!strcmp(a, "--json"))
            o->json = true;
        else if (!strcmp(a, "--max-tokens"))
            ok = cli_arg_int("embed", argc, argv, &i, 2, 1L << 24, &o->max_tokens);
        else if (!strcmp(a, "--pooling")) {
            if (!(ok = cli_arg_str("embed", argc, argv, &i, &name))) break;
            if (!strcmp(name, "mean"))
                o->pooling = KILN_POOLING_MEAN;
            else if (!strcmp(name, "cls"))
                o->pooling = KILN_POOLING_CLS;
            else if (!strcmp(name, "last"))
                o->pooling = KILN_POOLING_LAST;
            else
                return cli_usage_error("embed", "--pooling '%s' is not one of mean, cls, last", name);
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose"))
            o->engine.verbose = true;
        else if (cli_arg_engine("embed", argc, argv, &i, &o->engine, &ok)) {
        } else if (a[0] == '-' && a[1] != '\0')
            return cli_usage_error("embed", "unknown option '%s'", a);
        else
            t->texts[t->n++] = a;
        if (!ok) return CLI_USAGE;
    }
    if (!o->model) return cli_usage_error("embed", "missing -m FILE (an encoder model)");
    return 0;
}

/* Append every line of -f FILE to the texts. */
static int read_lines(const embed_options *o, int argc, text_list *t) {
    size_t len, lines = 0;
    int rc = cli_read_text("embed", o->file, &t->file_buf, &len);
    if (rc) return rc;
    for (size_t i = 0; i < len; i++)
        lines += t->file_buf[i] == '\n';
    const char **more = realloc(t->texts, ((size_t)argc + lines + 1) * sizeof *more);
    if (!more) return cli_fail("embed", KILN_E_NOMEM, "reading the file");
    t->texts = more;
    for (char *p = t->file_buf; p < t->file_buf + len;) {
        char *nl = memchr(p, '\n', (size_t)(t->file_buf + len - p));
        if (nl) *nl = '\0';
        if (nl && nl > p && nl[-1] == '\r') nl[-1] = '\0';
        t->texts[t->n++] = p;
        if (!nl) break;
        p = nl + 1;
    }
    return CLI_OK;
}

/* [CLS] text [SEP] (BOS and EOS as the vocabulary asks), cut to max tokens keeping the EOS. */
static int tokenize(const kiln_vocab *v, const char *text, int32_t max, int32_t **ids, int32_t *n) {
    size_t len = strlen(text), need = 0, cap = len + 3;
    bool eos = kiln_vocab_add_eos(v) && kiln_vocab_eos(v) >= 0;
    kiln_status s;
    *ids = malloc(cap * sizeof **ids);
    s = *ids ? kiln_tokenize(v, text, len, kiln_vocab_add_bos(v), *ids, cap - 1, &need) : KILN_E_NOMEM;
    if (s == KILN_E_RANGE) {
        free(*ids);
        cap = need + 1;
        *ids = malloc(cap * sizeof **ids);
        s = *ids ? kiln_tokenize(v, text, len, kiln_vocab_add_bos(v), *ids, cap - 1, &need) : KILN_E_NOMEM;
    }
    if (s) return cli_fail("embed", s, "tokenizing");
    if (need > (size_t)max - (eos ? 1 : 0)) need = (size_t)max - (eos ? 1 : 0);
    if (eos) (*ids)[need++] = kiln_vocab_eos(v);
    if (need == 0) return cli_usage_error("embed", "a text has no tokens and the model adds none");
    *n = (int32_t)need;
    return CLI_OK;
}

static void print_vector(const float *e, int32_t n, bool json, bool first) {
    if (json) fputs(first ? "[" : ",\n [", stdout);
    for (int32_t i = 0; i < n; i++)
        printf(json ? (i ? ",%.9g" : "%.9g") : (i ? " %.9g" : "%.9g"), (double)e[i]);
    fputs(json ? "]" : "\n", stdout);
}

/* Embed texts [i0, i1) (their tokens in ids/n_ids) in one batch and print them. */
static int embed_batch(kiln_ctx *ctx, kiln_batch *b, int32_t **ids, const int32_t *n_ids, size_t i0,
                       size_t i1, int32_t n_embd, bool json) {
    kiln_status s;
    kiln_batch_clear(b);
    for (size_t i = i0; i < i1; i++)
        for (int32_t k = 0; k < n_ids[i]; k++)
            kiln_batch_add(b, ids[i][k], k, (int32_t)(i - i0), true);
    if ((s = kiln_ctx_decode_batch(ctx, b))) return cli_fail("embed", s, "computing the embeddings");
    for (size_t i = i0; i < i1; i++) {
        const float *e = kiln_ctx_embeddings_seq(ctx, (int32_t)(i - i0));
        if (!e) return cli_fail("embed", KILN_E_INTERNAL, "reading an embedding");
        print_vector(e, n_embd, json, i == 0);
    }
    return CLI_OK;
}

static int run(const embed_options *o, const text_list *t, int32_t **ids, int32_t *n_ids) {
    kiln_model *model = NULL;
    kiln_ctx *ctx = NULL;
    kiln_batch b = {0};
    kiln_ctx_params cp;
    kiln_status s;
    int rc = cli_model_load("embed", o->model, &o->engine, NULL, &model);
    if (rc) return rc;
    int32_t n_ctx = kiln_model_n_ctx_train(model), max = o->max_tokens ? (int32_t)o->max_tokens : n_ctx;
    if (max > n_ctx)
        rc = cli_usage_error("embed", "--max-tokens %d exceeds the model's %d positions", max, n_ctx);
    cp = cli_ctx_params(&o->engine);
    cp.embeddings = true;
    cp.pooling = o->pooling;
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_seq_max = t->n < KILN_SEQ_MAX ? (int32_t)t->n : KILN_SEQ_MAX;
    if (!rc && (s = kiln_ctx_create(model, &cp, &ctx))) rc = cli_fail("embed", s, "creating the context");
    if (!rc && (s = kiln_batch_init(n_ctx, &b))) rc = cli_fail("embed", s, "allocating the batch");
    for (size_t i = 0; !rc && i < t->n; i++)
        rc = tokenize(kiln_model_vocab(model), t->texts[i], max, &ids[i], &n_ids[i]);
    if (!rc && o->json) fputs("[", stdout);
    for (size_t i0 = 0, i1; !rc && i0 < t->n; i0 = i1) {
        int32_t used = 0;
        for (i1 = i0; i1 < t->n && i1 - i0 < KILN_SEQ_MAX && used + n_ids[i1] <= n_ctx; i1++)
            used += n_ids[i1];
        rc = embed_batch(ctx, &b, ids, n_ids, i0, i1, kiln_model_n_embd(model), o->json);
    }
    if (!rc && o->json) fputs("]\n", stdout);
    kiln_batch_free(&b);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(model);
    return rc;
}

int cmd_embed(int argc, char **argv) {
    embed_options o;
    text_list t = {0};
    int32_t **ids = NULL, *n_ids = NULL;
    int rc = parse(argc, argv, &o, &t);
    if (!rc && o.file) rc = read_lines(&o, argc, &t);
    if (!rc && t.n == 0) rc = cli_usage_error("embed", "no text to embed (give TEXT arguments or -f FILE)");
    if (!rc) {
        ids = calloc(t.n, sizeof *ids);
        n_ids = calloc(t.n, sizeof *n_ids);
        rc = ids && n_ids ? run(&o, &t, ids, n_ids) : cli_fail("embed", KILN_E_NOMEM, "tokenizing");
    }
    for (size_t i = 0; ids && i < t.n; i++)
        free(ids[i]);
    free(ids);
    free(n_ids);
    free(t.texts);
    free(t.file_buf);
    return rc < 0 ? CLI_OK : rc;
}
