/*
 * cmd_chat.c - `kiln chat`: an interactive conversation with a model, one reply per input line.
 *
 * Each line read from stdin is a user message (EOF or "/exit" ends the session). The conversation is
 * rendered with the model's chat template (recognized from tokenizer.chat_template, or --chat-template);
 * only the text that is new since the last turn is tokenized (special tokens parsed) and decoded, so the
 * KV cache carries the whole conversation. A reply stops at EOS, at the template's end-of-turn token, or
 * after -n tokens; its text goes to stdout followed by a newline. After a reply, the template's closing
 * text (such as "<|im_end|>\n") is fed so the cache matches the rendered conversation.
 *
 * A model without a template (such as the bundled stories260K) uses the "plain" template,
 * "User: ...\nAssistant:"; a template Kiln does not recognize is an error that asks for --chat-template.
 * Works the same with piped stdin; the "> " prompt is printed (to stderr) only on a terminal.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char chat_help[] =
    "usage: kiln chat [options]\n"
    "\n"
    "Chat with a model: each stdin line is a user message; each reply goes to stdout. EOF or /exit ends.\n"
    "\n"
    "  -m, --model FILE         GGUF model (default: the bundled stories260K.gguf, or $KILN_MODEL)\n"
    "      --chat-template NAME chatml, llama3, phi3, mistral or plain (default: recognized from the\n"
    "                           model's tokenizer.chat_template; plain when it has none)\n"
    "      --system TEXT        a system message that opens the conversation\n"
    "  -f, --system-file FILE   read the system message from FILE (not '-': stdin carries the chat)\n"
    "  -n, --n-predict N        at most N tokens per reply (default 256)\n"
    "  -c, --ctx-size N         KV-cache size in tokens (default: the model's context length)\n"
    "  -t, --threads N          worker threads (default: the physical cores)\n"
    "      --devices LIST       backends in priority order, e.g. cpu-restricted:matmul+linear@8,cpu; the\n"
    "                           CPU is always last (default: cpu)\n"
    "      --device D           where to run: auto (a discrete or integrated GPU through Vulkan, else\n"
    "                           the CPU), cpu, or vulkan[:N] (Vulkan device N of `kiln devices`,\n"
    "                           lavapipe included); default $KILN_DEVICE, else cpu. The CPU runs\n"
    "                           whatever the device cannot\n"
    "      --device D           where to run: auto (a discrete or integrated GPU through Vulkan, else\n"
    "                           the CPU), cpu, or vulkan[:N] (Vulkan device N of `kiln devices`,\n"
    "                           lavapipe included); default $KILN_DEVICE, else cpu. The CPU runs\n"
    "                           whatever the device cannot\n"
    "      --gpu-layers N       with --device: the device runs the last N layers and the output head,\n"
    "                           the CPU the rest (0: none; all, the default; auto: as many as fit)\n"
    "      --cpu LEVEL          CPU kernel level: ref, avx2, avx512, amx or neon (default: the best, or\n"
    "                           $KILN_CPU)\n"
    "      --temp T             temperature; 0 = greedy (default 0.8)\n"
    "      --top-k K            keep the K most likely tokens; 0 = off (default 40)\n"
    "      --top-p P            nucleus sampling; 1 = off (default 0.95)\n"
    "      --min-p P            drop tokens below P x the top probability; 0 = off (default 0.05)\n"
    "      --repeat-penalty R   penalize the last --repeat-last-n tokens; 1 = off (default 1.0)\n"
    "      --repeat-last-n N    history length for the repeat penalty (default 64)\n"
    "      --seed S             random seed (default: from the clock)\n"
    "  -v, --verbose            per turn, print the tokens fed and generated and the context use, and the\n"
    "                           runtime's log, to stderr\n"
    "  -h, --help               this text\n";

typedef struct chat_options {
    const char *model, *template_name, *system;
    const char *system_file; /* -f: the system message's file, read into system_buf */
    char *system_buf;
    long n_predict, n_ctx;
    cli_engine engine;
    kiln_sampler_params sampling;
    bool seed_given;
} chat_options;

static int parse(int argc, char **argv, chat_options *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = 256;
    o->sampling = kiln_sampler_params_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(chat_help, stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            ok = cli_arg_str("chat", argc, argv, &i, &o->model);
        else if (!strcmp(a, "--chat-template"))
            ok = cli_arg_str("chat", argc, argv, &i, &o->template_name);
        else if (!strcmp(a, "--system"))
            ok = cli_arg_str("chat", argc, argv, &i, &o->system);
        else if (!strcmp(a, "-f") || !strcmp(a, "--system-file"))
            ok = cli_arg_str("chat", argc, argv, &i, &o->system_file);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            ok = cli_arg_int("chat", argc, argv, &i, 1, 1L << 30, &o->n_predict);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            ok = cli_arg_int("chat", argc, argv, &i, 0, 1L << 24, &o->n_ctx);
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose"))
            o->engine.verbose = true;
        else if (!cli_arg_engine("chat", argc, argv, &i, &o->engine, &ok) &&
                 !cli_arg_sampling("chat", argc, argv, &i, &o->sampling, &o->seed_given, &ok))
            return cli_usage_error("chat", "unknown option '%s'", a);
        if (!ok) return CLI_USAGE;
    }
    if (o->system_file && o->system)
        return cli_usage_error("chat", "give the system message with --system or -f, not both");
    if (o->system_file && !strcmp(o->system_file, "-"))
        return cli_usage_error("chat", "-f -: standard input carries the conversation; name a file");
    if (o->template_name && !kiln_chat_template_by_name(o->template_name))
        return cli_usage_error("chat", "unknown chat template '%s' (known: %s)", o->template_name,
                               kiln_chat_template_names());
    if (!o->model) o->model = cli_default_model();
    if (!o->seed_given) o->sampling.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return 0;
}

typedef struct chat_session {
    kiln_model *model;
    kiln_ctx *ctx;
    kiln_sampler *sampler;
    const kiln_chat_template *tmpl;
    int32_t eos, eot;
    kiln_chat_message *msgs; /* contents are malloc'd */
    size_t n_msgs;
    size_t fed_len; /* bytes of the rendered conversation already in the KV cache */
    int turn;
} chat_session;

static void session_free(chat_session *s) {
    for (size_t i = 0; i < s->n_msgs; i++)
        free((char *)s->msgs[i].content);
    free(s->msgs);
    kiln_sampler_destroy(s->sampler);
    kiln_ctx_destroy(s->ctx);
    kiln_model_destroy(s->model);
}

static int add_message(chat_session *s, const char *role, const char *content, size_t len) {
    kiln_chat_message *m = realloc(s->msgs, (s->n_msgs + 1) * sizeof *m);
    char *copy = malloc(len + 1);
    if (m) s->msgs = m;
    if (!m || !copy) {
        free(copy);
        return cli_fail("chat", KILN_E_NOMEM, "storing the conversation");
    }
    memcpy(copy, content, len);
    copy[len] = '\0';
    s->msgs[s->n_msgs++] = (kiln_chat_message){role, copy};
    return CLI_OK;
}

/* Render the conversation (malloc'd, *len bytes). */
static char *render(const chat_session *s, bool generation_prompt, size_t *len) {
    kiln_chat_render(s->tmpl, s->msgs, s->n_msgs, generation_prompt, NULL, 0, len);
    char *text = malloc(*len + 1);
    if (text && kiln_chat_render(s->tmpl, s->msgs, s->n_msgs, generation_prompt, text, *len + 1, len)) {
        free(text);
        return NULL;
    }
    return text;
}

/* Tokenize text (special tokens parsed) and run it through the model; *logits gets the last token's. */
static int feed(chat_session *s, const char *text, size_t len, bool bos, const float **logits,
                size_t *n_fed) {
    const kiln_vocab *vocab = kiln_model_vocab(s->model);
    size_t n = 0;
    kiln_status st = kiln_tokenize_special(vocab, text, len, bos, true, NULL, 0, &n);
    if (st != KILN_OK && st != KILN_E_RANGE) return cli_fail("chat", st, "tokenizing");
    *n_fed = n;
    if (n == 0) return CLI_OK;
    if ((int64_t)kiln_ctx_n_past(s->ctx) + (int64_t)n > kiln_ctx_n_ctx(s->ctx)) {
        fprintf(stderr, "kiln chat: the conversation no longer fits in the context (%d tokens)\n",
                kiln_ctx_n_ctx(s->ctx));
        return CLI_FAIL;
    }
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) return cli_fail("chat", KILN_E_NOMEM, "tokenizing");
    st = kiln_tokenize_special(vocab, text, len, bos, true, ids, n, &n);
    if (!st) st = kiln_ctx_decode(s->ctx, ids, (int32_t)n, logits);
    for (size_t i = 0; !st && i < n; i++)
        kiln_sampler_accept(s->sampler, ids[i]);
    free(ids);
    return st ? cli_fail("chat", st, "evaluating the turn") : CLI_OK;
}

typedef struct reply_buf {
    char *data;
    size_t len, cap;
} reply_buf;

static bool reply_append(reply_buf *r, kiln_str piece) {
    if (r->len + piece.len + 1 > r->cap) {
        size_t cap = (r->len + piece.len + 1) * 2;
        char *p = realloc(r->data, cap);
        if (!p) return false;
        r->data = p;
        r->cap = cap;
    }
    memcpy(r->data + r->len, piece.data, piece.len);
    r->len += piece.len;
    r->data[r->len] = '\0';
    fwrite(piece.data, 1, piece.len, stdout);
    fflush(stdout);
    return true;
}

/* Sample a reply from logits until EOS, end of turn, -n tokens or a full context. */
static int generate(chat_session *s, const chat_options *o, const float *logits, reply_buf *r, long *n_gen) {
    kiln_detok *detok = NULL;
    kiln_str piece;
    kiln_status st = kiln_detok_create(kiln_model_vocab(s->model), false, &detok);
    int rc = st ? cli_fail("chat", st, "creating the detokenizer") : CLI_OK;
    for (*n_gen = 0; !rc && *n_gen < o->n_predict;) {
        int32_t next;
        if ((st = kiln_sampler_sample(s->sampler, logits, &next))) rc = cli_fail("chat", st, "sampling");
        if (rc || next == s->eos || next == s->eot) break;
        kiln_sampler_accept(s->sampler, next);
        ++*n_gen;
        if ((st = kiln_detok_push(detok, next, &piece)))
            rc = cli_fail("chat", st, "detokenizing");
        else if (!reply_append(r, piece))
            rc = cli_fail("chat", KILN_E_NOMEM, "storing the reply");
        if (rc || kiln_ctx_n_past(s->ctx) >= kiln_ctx_n_ctx(s->ctx)) break;
        if ((st = kiln_ctx_decode(s->ctx, &next, 1, &logits))) rc = cli_fail("chat", st, "decoding");
    }
    if (!rc && (st = kiln_detok_flush(detok, &piece))) rc = cli_fail("chat", st, "detokenizing");
    if (!rc && !reply_append(r, piece)) rc = cli_fail("chat", KILN_E_NOMEM, "storing the reply");
    kiln_detok_destroy(detok);
    fputc('\n', stdout);
    fflush(stdout);
    return rc;
}

/* One exchange: feed the user's turn, generate, then feed the template's closing text. */
static int chat_turn(chat_session *s, const chat_options *o, const char *line, size_t len) {
    const float *logits = NULL;
    size_t full_len = 0, n_fed = 0, n_close = 0;
    long n_gen = 0;
    reply_buf r = {0};
    int rc = add_message(s, "user", line, len);
    char *full = rc ? NULL : render(s, true, &full_len);
    if (!rc && !full) rc = cli_fail("chat", KILN_E_NOMEM, "rendering the conversation");
    if (!rc)
        rc = feed(s, full + s->fed_len, full_len - s->fed_len,
                  s->turn == 0 && kiln_vocab_add_bos(kiln_model_vocab(s->model)), &logits, &n_fed);
    if (!rc && !logits) rc = cli_usage_error("chat", "the turn added no tokens");
    s->fed_len = full_len;
    if (!rc) rc = generate(s, o, logits, &r, &n_gen);
    free(full);
    if (!rc) rc = add_message(s, "assistant", r.data ? r.data : "", r.len);
    full = rc ? NULL : render(s, false, &full_len);
    if (!rc && !full) rc = cli_fail("chat", KILN_E_NOMEM, "rendering the conversation");
    if (!rc) { /* the closing text follows the reply in the rendering */
        size_t at = s->fed_len + r.len;
        rc = feed(s, full + at, full_len - at, false, &logits, &n_close);
        s->fed_len = full_len;
    }
    if (!rc && o->engine.verbose)
        fprintf(stderr, "kiln chat: turn %d: fed %zu tokens, generated %ld, closed with %zu; context %d/%d\n",
                s->turn + 1, n_fed, n_gen, n_close, kiln_ctx_n_past(s->ctx), kiln_ctx_n_ctx(s->ctx));
    free(full);
    free(r.data);
    s->turn++;
    return rc;
}

static int choose_template(chat_session *s, const chat_options *o) {
    const kiln_vocab *vocab = kiln_model_vocab(s->model);
    kiln_status st = KILN_OK;
    if (o->template_name)
        s->tmpl = kiln_chat_template_by_name(o->template_name);
    else
        st = kiln_chat_template_detect(kiln_model_gguf(s->model), &s->tmpl);
    if (st == KILN_E_NOT_FOUND) {
        s->tmpl = kiln_chat_template_by_name("plain");
        fprintf(stderr,
                "kiln chat: the model has no chat template; using 'plain' (User:/Assistant: lines)\n");
    } else if (st) {
        return cli_fail("chat", st, NULL);
    }
    const char *eot = kiln_chat_template_end_of_turn(s->tmpl);
    s->eos = kiln_vocab_eos(vocab);
    s->eot = eot ? kiln_vocab_find_token(vocab, eot, strlen(eot)) : -1;
    return CLI_OK;
}

static int session_start(chat_session *s, const chat_options *o) {
    kiln_ctx_params cp = cli_ctx_params(&o->engine);
    kiln_status st;
    int rc = cli_model_load("chat", o->model, &o->engine, NULL, &s->model);
    if (rc) return rc;
    cp.n_ctx = (int32_t)o->n_ctx;
    if ((st = kiln_ctx_create(s->model, &cp, &s->ctx))) return cli_fail("chat", st, "creating the context");
    if ((st = kiln_sampler_create(kiln_model_n_vocab(s->model), &o->sampling, &s->sampler)))
        return cli_fail("chat", st, "creating the sampler");
    rc = choose_template(s, o);
    if (!rc && o->system) rc = add_message(s, "system", o->system, strlen(o->system));
    return rc;
}

int cmd_chat(int argc, char **argv) {
    chat_options o;
    chat_session s = {0};
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    if (o.system_file) {
        size_t len;
        if ((rc = cli_read_text("chat", o.system_file, &o.system_buf, &len))) return rc;
        o.system = o.system_buf;
    }
    rc = session_start(&s, &o);
    bool tty = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t line_cap = 0;
    while (!rc) {
        if (tty) fputs("> ", stderr);
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (!strcmp(line, "/exit")) break;
        if (n == 0) continue;
        rc = chat_turn(&s, &o, line, (size_t)n);
    }
    free(line);
    session_free(&s);
    free(o.system_buf);
    return rc;
}
