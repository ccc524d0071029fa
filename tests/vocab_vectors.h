/*
 * vocab_vectors.h - header-only helpers for the tokenizer tests: load a vocab-only GGUF, and check
 * llama.cpp's test-tokenizer-0 vectors (X.gguf.inp / X.gguf.out in tests/data/vocab) against it.
 */
#ifndef KILN_TEST_VOCAB_VECTORS_H
#define KILN_TEST_VOCAB_VECTORS_H

#include "harness.h"

#include <stdlib.h>

static inline kiln_vocab *vv_load(const char *path) {
    kiln_gguf *g = NULL;
    kiln_vocab *v = NULL;
    CHECK_OK(kiln_gguf_open(path, &g));
    if (g) CHECK_OK(kiln_vocab_create(g, &v));
    kiln_gguf_close(g);
    return v;
}

#define VV_SEPARATOR "\n__ggml_vocab_test__\n"

/* Every input in X.inp is followed by the separator line; X.out has one line of ids per input. Checks that
 * each input tokenizes to its ids (no BOS, special tokens not parsed, as the vectors were made) and, when
 * round_trip is set, detokenizes back to itself. Returns the number of cases checked. */
static inline int vv_check(const char *name, bool round_trip) {
    char path[256];
    snprintf(path, sizeof path, "vocab/%s", name);
    kiln_vocab *v = vv_load(harness_data_path(path));
    snprintf(path, sizeof path, "vocab/%s.inp", name);
    char *inp = harness_read_file(harness_data_path(path), NULL);
    snprintf(path, sizeof path, "vocab/%s.out", name);
    char *outp = harness_read_file(harness_data_path(path), NULL);
    int cases = 0;
    CHECK(v && inp && outp);
    if (!v || !inp || !outp) goto done;
    char *in = inp, *out = outp;
    for (char *sep; (sep = strstr(in, VV_SEPARATOR)) != NULL; in = sep + strlen(VV_SEPARATOR), cases++) {
        size_t len = (size_t)(sep - in);
        char *eol = strchr(out, '\n');
        if (!eol) {
            harness_fail(__FILE__, __LINE__, "%s: .out has fewer lines than .inp has inputs", name);
            break;
        }
        int32_t expected[512], got[512];
        size_t n_expected = 0, n_got = 0, n_text = 0;
        for (char *p = out; p < eol && n_expected < 512;) {
            char *end;
            long id = strtol(p, &end, 10);
            if (end == p) break;
            expected[n_expected++] = (int32_t)id;
            p = end;
        }
        out = eol + 1;
        CHECK_OK(kiln_tokenize(v, in, len, false, got, 512, &n_got));
        bool same = n_got == n_expected && memcmp(got, expected, n_got * sizeof *got) == 0;
        if (!same)
            harness_fail(__FILE__, __LINE__, "%s case %d (\"%.*s\"): got %zu ids, expected %zu", name, cases,
                         (int)len, in, n_got, n_expected);
        if (!round_trip) continue;
        char text[4096];
        CHECK_OK(kiln_detokenize(v, got, n_got, true, text, sizeof text, &n_text));
        if (n_text != len || memcmp(text, in, len) != 0)
            harness_fail(__FILE__, __LINE__, "%s case %d: detokenized \"%s\", expected \"%.*s\"", name, cases,
                         text, (int)len, in);
    }
    CHECK_EQ_INT(*in, '\0');  /* nothing after the last separator */
    CHECK_EQ_INT(*out, '\0'); /* as many .out lines as inputs */
done:
    free(inp);
    free(outp);
    kiln_vocab_destroy(v);
    return cases;
}

#endif /* KILN_TEST_VOCAB_VECTORS_H */
