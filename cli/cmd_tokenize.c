/*
 * cmd_tokenize.c - `kiln tokenize`: print the tokens of a text. Works on any GGUF with a tokenizer,
 * including vocab-only files that have no tensors.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char tokenize_help[] =
    "usage: kiln tokenize [-m FILE] [--ids] [--no-bos] (TEXT | -f FILE)\n"
    "\n"
    "Print the tokens of TEXT: one line per token with its id and piece, or with --ids the ids alone\n"
    "on one line, space-separated. The vocabulary's BOS is added when it asks for one, and its EOS when\n"
    "it ends whole sequences with one (WordPiece: [CLS] ... [SEP]).\n"
    "\n"
    "  -m, --model FILE  GGUF file with a tokenizer (default: the bundled model)\n"
    "  -f, --file FILE   tokenize the text of FILE ('-': standard input) instead of TEXT\n"
    "      --ids         print only the ids\n"
    "      --no-bos      add neither BOS nor EOS, whatever the vocabulary asks for\n"
    "  -h, --help        this text\n";

static void print_piece(kiln_str s) {
    putchar('\'');
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\'' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('\'');
}

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *text = NULL, *file = NULL;
    char *file_text = NULL;
    bool ids_only = false, bos = true;
    kiln_gguf *gguf = NULL;
    kiln_vocab *vocab = NULL;
    int32_t *ids = NULL;
    size_t n = 0, len;
    kiln_status s;
    int rc = CLI_OK;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(tokenize_help, stdout);
            return CLI_OK;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!cli_arg_str("tokenize", argc, argv, &i, &path)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "-f") || !strcmp(argv[i], "--file")) {
            if (!cli_arg_str("tokenize", argc, argv, &i, &file)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "--ids")) ids_only = true;
        else if (!strcmp(argv[i], "--no-bos")) bos = false;
        else if (argv[i][0] == '-' && argv[i][1] != '\0') return cli_usage_error("tokenize", "unknown option '%s'", argv[i]);
        else if (text) return cli_usage_error("tokenize", "more than one TEXT argument");
        else text = argv[i];
    }
    if (text && file) return cli_usage_error("tokenize", "give TEXT or -f FILE, not both");
    if (!text && !file) return cli_usage_error("tokenize", "missing TEXT (or -f FILE)");
    if (file && (rc = cli_read_text("tokenize", file, &file_text, &len))) return rc;
    if (!file) len = strlen(text);
    else text = file_text;
    if (!path) path = cli_default_model();
    if ((s = kiln_gguf_open(path, &gguf))) {
        free(file_text);
        return cli_fail("tokenize", s, "opening the file");
    }
    if ((s = kiln_vocab_create(gguf, &vocab))) {
        kiln_gguf_close(gguf);
        free(file_text);
        return cli_fail("tokenize", s, "reading the vocabulary");
    }
    /* A first guess of the size, then exactly the size the text needs; one slot more for EOS. */
    size_t cap = len + 3;
    ids = malloc(cap * sizeof *ids);
    s = ids ? kiln_tokenize(vocab, text, len, bos && kiln_vocab_add_bos(vocab), ids, cap - 1, &n) : KILN_E_NOMEM;
    if (s == KILN_E_RANGE) {
        free(ids);
        cap = n + 1;
        ids = malloc(cap * sizeof *ids);
        s = ids ? kiln_tokenize(vocab, text, len, bos && kiln_vocab_add_bos(vocab), ids, cap - 1, &n) : KILN_E_NOMEM;
    }
    if (s) rc = cli_fail("tokenize", s, "tokenizing");
    else if (bos && kiln_vocab_add_eos(vocab) && kiln_vocab_eos(vocab) >= 0) ids[n++] = kiln_vocab_eos(vocab);
    for (size_t i = 0; !rc && i < n; i++) {
        if (ids_only) {
            printf(i ? " %d" : "%d", ids[i]);
        } else {
            printf("%6d -> ", ids[i]);
            print_piece(kiln_vocab_token_text(vocab, ids[i]));
            putchar('\n');
        }
    }
    if (!rc && ids_only) putchar('\n');
    free(ids);
    free(file_text);
    kiln_vocab_destroy(vocab);
    kiln_gguf_close(gguf);
    return rc;
}
