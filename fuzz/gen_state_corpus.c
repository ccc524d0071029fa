/*
 * gen_state_corpus.c - writes the seed corpus of fuzz_state (corpus/state): valid KV states of
 * models/stories260K.gguf (the bundled model) for each cache type, of 0, 1 and 2 cells, each prefixed with
 * fuzz_state's control byte (the cache type, checksum kept). Run by hand: gen_state_corpus OUT_DIR.
 */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    static const kiln_type types[3] = {KILN_TYPE_F32, KILN_TYPE_F16, KILN_TYPE_Q8_0};
    static const int32_t toks[5] = {1, 7, 3, 9, 4};
    static const int32_t counts[3] = {0, 1, 2};
    kiln_model *m = NULL;
    if (argc != 2 || kiln_model_load(KILN_FUZZ_BUNDLED_MODEL, &m) != KILN_OK) {
        fprintf(stderr, "usage: gen_state_corpus OUT_DIR (%s)\n", kiln_last_error());
        return 1;
    }
    for (int t = 0; t < 3; t++)
        for (int k = 0; k < 3; k++) {
            kiln_ctx_params p = kiln_ctx_params_default();
            kiln_ctx *c = NULL;
            const float *logits;
            size_t size = 0;
            char path[512];
            FILE *f;
            uint8_t *buf;
            p.n_ctx = 16;
            p.n_seq_max = 2;
            p.kv_type = types[t];
            if (kiln_ctx_create(m, &p, &c) != KILN_OK ||
                (counts[k] && kiln_ctx_decode(c, toks, counts[k], &logits) != KILN_OK) ||
                kiln_ctx_state_size(c, 0, counts[k], &size) != KILN_OK || !(buf = malloc(size + 1)))
                return fprintf(stderr, "%s\n", kiln_last_error()), 1;
            buf[0] = (uint8_t)t;
            if (kiln_ctx_state_get(c, 0, toks, counts[k], buf + 1, size) != KILN_OK)
                return fprintf(stderr, "%s\n", kiln_last_error()), 1;
            snprintf(path, sizeof path, "%s/%s_%d_cells", argv[1],
                     t == 0   ? "f32"
                     : t == 1 ? "f16"
                              : "q8_0",
                     counts[k]);
            if (!(f = fopen(path, "wb")) || fwrite(buf, 1, size + 1, f) != size + 1 || fclose(f) != 0)
                return perror(path), 1;
            free(buf);
            kiln_ctx_destroy(c);
        }
    kiln_model_destroy(m);
    return 0;
}
