/*
 * test_model_load.c - the model loader's contract on crafted variants of stories260K (written with the
 * GGUF writer): required keys present with integer types, documented defaults for optional keys, every
 * weight present with its exact shape and a usable type, a clear error for an unknown architecture, and
 * the tied-embedding fallback when output.weight is absent.
 */
#include "harness.h"

#include <stdlib.h>

typedef struct variant {
    const char *drop_key;        /* a key to leave out */
    const char *str_key;         /* a key to replace by a string value */
    const char *drop_tensor;     /* a tensor to leave out */
    const char *shrink_tensor;   /* a tensor whose ne[1] is reduced by one */
    const char *arch;            /* replacement general.architecture */
    bool tie;                    /* write output.weight's bytes as token_embd.weight */
} variant;

static const char *write_variant(const variant *v, const char *name) {
    static char path[512];
    kiln_gguf *src;
    kiln_gguf_writer *w;
    snprintf(path, sizeof path, "%s/%s.gguf", KILN_TEST_TMP, name);
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &src));
    CHECK_OK(kiln_gguf_writer_create(&w));
    if (!src || !w) return path;
    for (int64_t i = 0; i < kiln_gguf_kv_count(src); i++) {
        const char *key = kiln_gguf_kv_key(src, i);
        if (v->drop_key && !strcmp(key, v->drop_key)) continue;
        if (v->str_key && !strcmp(key, v->str_key)) CHECK_OK(kiln_gguf_writer_add_str(w, key, "64", 2));
        else if (v->arch && !strcmp(key, "general.architecture"))
            CHECK_OK(kiln_gguf_writer_add_str(w, key, v->arch, strlen(v->arch)));
        else CHECK_OK(kiln_gguf_writer_copy_kv(w, src, i));
    }
    int64_t out_idx = kiln_gguf_find_tensor(src, "output.weight");
    kiln_tensor_info out_info;
    CHECK_OK(kiln_gguf_tensor_info(src, out_idx, &out_info));
    for (int64_t i = 0; i < kiln_gguf_tensor_count(src); i++) {
        kiln_tensor_info t;
        CHECK_OK(kiln_gguf_tensor_info(src, i, &t));
        if (v->drop_tensor && !strcmp(t.name, v->drop_tensor)) continue;
        if (v->shrink_tensor && !strcmp(t.name, v->shrink_tensor)) t.ne[1]--;
        if (v->tie && !strcmp(t.name, "token_embd.weight")) t.data = out_info.data;
        CHECK_OK(kiln_gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.ne, t.data));
    }
    CHECK_OK(kiln_gguf_writer_write_file(w, path));
    kiln_gguf_writer_destroy(w);
    kiln_gguf_close(src);
    return path;
}

static void expect_load_error(const variant *v, const char *name, kiln_status status, const char *fragment) {
    kiln_model *m = NULL;
    CHECK_STATUS(kiln_model_load(write_variant(v, name), &m), status);
    CHECK(m == NULL);
    CHECK_ERROR_MENTIONS(fragment);
    kiln_model_destroy(m);
}

static void a_missing_required_key_is_named(void) {
    variant v = {.drop_key = "llama.block_count"};
    expect_load_error(&v, "no_block_count", KILN_E_FORMAT, "required key 'llama.block_count' is missing");
}

static void a_required_key_of_the_wrong_type_is_named(void) {
    variant v = {.str_key = "llama.embedding_length"};
    expect_load_error(&v, "str_embd", KILN_E_FORMAT, "llama.embedding_length");
}

static void a_missing_weight_is_named(void) {
    variant v = {.drop_tensor = "blk.3.ffn_down.weight"};
    expect_load_error(&v, "no_ffn_down", KILN_E_FORMAT, "tensor 'blk.3.ffn_down.weight' is missing");
}

static void a_weight_of_the_wrong_shape_is_named_with_both_shapes(void) {
    variant v = {.shrink_tensor = "blk.1.attn_k.weight"};
    expect_load_error(&v, "short_attn_k", KILN_E_FORMAT,
                      "tensor 'blk.1.attn_k.weight' has shape [64, 31, 1, 1], expected dim 1 = 32");
}

static void an_unknown_architecture_is_unsupported(void) {
    variant v = {.arch = "mamba"};
    expect_load_error(&v, "mamba", KILN_E_UNSUPPORTED, "architecture 'mamba' is not supported");
}

static void optional_keys_take_their_documented_defaults(void) {
    /* stories260K has no rope.freq_base (default 10000); dropping head_count_kv would change the model,
     * so check that dropping the rms epsilon (default 1e-5, the file's own value) changes nothing. */
    variant v = {.drop_key = "llama.attention.layer_norm_rms_epsilon"};
    kiln_model *a = NULL, *b = NULL;
    kiln_ctx *ca = NULL, *cb = NULL;
    const float *la = NULL, *lb = NULL;
    int32_t bos = 1;
    CHECK_OK(kiln_model_load(write_variant(&v, "no_eps"), &a));
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &b));
    if (!a || !b) return;
    CHECK_OK(kiln_ctx_create(a, NULL, &ca));
    CHECK_OK(kiln_ctx_create(b, NULL, &cb));
    CHECK_OK(kiln_ctx_decode(ca, &bos, 1, &la));
    CHECK_OK(kiln_ctx_decode(cb, &bos, 1, &lb));
    CHECK(la && lb && memcmp(la, lb, 512 * sizeof(float)) == 0);
    kiln_ctx_destroy(ca);
    kiln_ctx_destroy(cb);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
}

static void without_output_weight_the_token_embedding_is_the_output_projection(void) {
    /* Both files use output.weight's values as the embedding table; one also keeps output.weight, the other
     * drops it and must fall back to the (identical) embedding. Their logits must be identical. */
    variant with = {.tie = true}, without = {.tie = true, .drop_tensor = "output.weight"};
    kiln_model *a = NULL, *b = NULL;
    kiln_ctx *ca = NULL, *cb = NULL;
    const float *la = NULL, *lb = NULL;
    int32_t toks[3] = {1, 403, 407};
    char path_a[512];
    snprintf(path_a, sizeof path_a, "%s", write_variant(&with, "tied_explicit"));
    CHECK_OK(kiln_model_load(path_a, &a));
    CHECK_OK(kiln_model_load(write_variant(&without, "tied_fallback"), &b));
    if (!a || !b) return;
    CHECK_EQ_INT(kiln_model_weight_bytes(a), kiln_model_weight_bytes(b) + 64 * 512 * 4);
    CHECK_OK(kiln_ctx_create(a, NULL, &ca));
    CHECK_OK(kiln_ctx_create(b, NULL, &cb));
    CHECK_OK(kiln_ctx_decode(ca, toks, 3, &la));
    CHECK_OK(kiln_ctx_decode(cb, toks, 3, &lb));
    CHECK(la && lb && memcmp(la, lb, 512 * sizeof(float)) == 0);
    kiln_ctx_destroy(ca);
    kiln_ctx_destroy(cb);
    kiln_model_destroy(a);
    kiln_model_destroy(b);
}

int main(void) {
    RUN(a_missing_required_key_is_named);
    RUN(a_required_key_of_the_wrong_type_is_named);
    RUN(a_missing_weight_is_named);
    RUN(a_weight_of_the_wrong_shape_is_named_with_both_shapes);
    RUN(an_unknown_architecture_is_unsupported);
    RUN(optional_keys_take_their_documented_defaults);
    RUN(without_output_weight_the_token_embedding_is_the_output_projection);
    return harness_finish();
}
