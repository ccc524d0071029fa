/*
 * test_quantize_tool.c - kiln_quantize_file and the mixes, as a user meets them: every mix of the bundled
 * stories260K still tells the story the F32 model tells (Q8_0 token for token for at least 30 tokens),
 * the per-tensor type choice follows llama.cpp's rules (checked here on a TinyLlama-shaped tensor list;
 * tools/compare_llama_cpp.py checks whole files against llama.cpp itself), metadata is kept, bad input is
 * refused with the reason and leaves no file, and corrupt quantized data (a truncated tensor, NaN or
 * infinite scales) gives an error or defined output, never a crash.
 */
#include "harness.h"
#include "quant/mix.h"
#include "tensor/types.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>

#define TMP(name) KILN_TEST_TMP "/quantize_tool_" name

/* Greedy continuation of "Once upon a time": n ids into out; returns the number produced. */
static int greedy(const char *path, int32_t *out, int n) {
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    kiln_ctx_params cp = harness_ctx_params();
    kiln_model_params mp = kiln_model_params_default();
    int32_t prompt[16];
    size_t np = 0;
    int got = 0;
    const float *logits;
    cp.n_ctx = 128;
    mp.n_threads = 1;
    CHECK_OK(kiln_model_load_ex(path, &mp, &m));
    if (!m) return 0;
    CHECK_OK(kiln_ctx_create(m, &cp, &ctx));
    CHECK_OK(kiln_tokenize(kiln_model_vocab(m), "Once upon a time", 16, true, prompt, 16, &np));
    if (ctx && kiln_ctx_decode(ctx, prompt, (int32_t)np, &logits) == KILN_OK) {
        for (; got < n; got++) {
            out[got] = harness_argmax(logits, kiln_model_n_vocab(m));
            if (kiln_ctx_decode(ctx, &out[got], 1, &logits) != KILN_OK) break;
        }
    }
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
    return got;
}

static int common_prefix(const int32_t *a, const int32_t *b, int n) {
    int i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static void every_mix_of_stories260k_tells_the_f32_story(void) {
    static const struct {
        const char *mix;
        int min_same; /* greedy tokens identical to F32, at least */
    } cases[] = {{"Q8_0", 30}, {"Q6_K", 30}, {"Q5_K_M", 8}, {"Q4_K_M", 8}, {"Q4_K_S", 8},
                 {"Q3_K_M", 8}, {"Q2_K", 8},  {"Q4_0", 8}};
    int32_t ref[40], got[40];
    CHECK_EQ_INT(greedy(KILN_MODEL_PATH, ref, 40), 40);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_quantize_params p = kiln_quantize_params_default();
        CHECK_OK(kiln_quant_mix_parse(cases[i].mix, &p.mix));
        CHECK_OK(kiln_quantize_file(KILN_MODEL_PATH, TMP("mix.gguf"), &p, NULL, NULL));
        int n = greedy(TMP("mix.gguf"), got, 40), same = common_prefix(ref, got, n);
        printf("    %-6s greedy tokens identical to F32: %d of 40\n", cases[i].mix, same);
        if (same < cases[i].min_same)
            harness_fail(__FILE__, __LINE__, "%s: only %d greedy tokens match F32 (want >= %d)", cases[i].mix,
                         same, cases[i].min_same);
    }
    remove(TMP("mix.gguf"));
}

/* The type a TinyLlama-shaped tensor gets under a mix (22 layers, GQA 8, rows of 2048 or 5632). */
static kiln_type tiny(kiln_quant_mix mix, kiln__mix_state *st, const char *name, int64_t ne0) {
    const int64_t ne[4] = {ne0, 256, 1, 1};
    bool q;
    return kiln__mix_choose(mix, st, name, KILN_TYPE_F16, 2, ne, &q);
}

static void q4_k_m_gives_attn_v_and_ffn_down_q6_k_on_llama_cpp_layers(void) {
    kiln__mix_state st = {.has_output = true, .n_gqa = 8, .n_attn_v = 22, .n_ffn_down = 22};
    /* use_more_bits(i, 22): i < 2, i >= 19, or (i - 2) % 3 == 2. */
    static const int more[22] = {1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1};
    for (int i = 0; i < 22; i++) {
        CHECK_EQ_INT(tiny(KILN_MIX_Q4_K_M, &st, "blk.N.attn_q.weight", 2048), KILN_TYPE_Q4_K);
        CHECK_EQ_INT(tiny(KILN_MIX_Q4_K_M, &st, "blk.N.attn_v.weight", 2048), more[i] ? KILN_TYPE_Q6_K : KILN_TYPE_Q4_K);
        CHECK_EQ_INT(tiny(KILN_MIX_Q4_K_M, &st, "blk.N.ffn_down.weight", 5632), more[i] ? KILN_TYPE_Q6_K : KILN_TYPE_Q4_K);
    }
    CHECK_EQ_INT(tiny(KILN_MIX_Q4_K_M, &st, "output.weight", 2048), KILN_TYPE_Q6_K);
    CHECK_EQ_INT(tiny(KILN_MIX_Q4_K_M, &st, "token_embd.weight", 2048), KILN_TYPE_Q4_K);
    CHECK_EQ_INT(tiny(KILN_MIX_Q8_0, &st, "output.weight", 2048), KILN_TYPE_Q8_0);
    st.has_output = false; /* tied embeddings: token_embd is the output projection */
    CHECK_EQ_INT(tiny(KILN_MIX_Q4_0, &st, "token_embd.weight", 2048), KILN_TYPE_Q6_K);
}

static void small_mixes_raise_attention_and_ffn_down_and_keep_norms(void) {
    kiln__mix_state st = {.has_output = true, .n_gqa = 8, .n_attn_v = 22, .n_ffn_down = 22};
    const int64_t norm[4] = {2048, 1, 1, 1};
    bool q;
    CHECK_EQ_INT(tiny(KILN_MIX_Q2_K, &st, "blk.0.attn_v.weight", 2048), KILN_TYPE_Q4_K); /* GQA >= 4 */
    CHECK_EQ_INT(tiny(KILN_MIX_Q2_K, &st, "blk.0.ffn_down.weight", 5632), KILN_TYPE_Q3_K);
    CHECK_EQ_INT(tiny(KILN_MIX_Q2_K, &st, "blk.0.attn_output.weight", 2048), KILN_TYPE_Q3_K);
    CHECK_EQ_INT(tiny(KILN_MIX_Q2_K, &st, "blk.0.ffn_up.weight", 2048), KILN_TYPE_Q2_K);
    CHECK_EQ_INT(tiny(KILN_MIX_Q3_K_M, &st, "blk.1.attn_v.weight", 2048), KILN_TYPE_Q5_K); /* 2nd attn_v */
    CHECK_EQ_INT(tiny(KILN_MIX_Q3_K_M, &st, "blk.2.attn_v.weight", 2048), KILN_TYPE_Q4_K);
    CHECK_EQ_INT(tiny(KILN_MIX_Q3_K_M, &st, "blk.0.attn_output.weight", 2048), KILN_TYPE_Q4_K);
    CHECK_EQ_INT(kiln__mix_choose(KILN_MIX_Q2_K, &st, "blk.0.attn_norm.weight", KILN_TYPE_F32, 1, norm, &q),
                 KILN_TYPE_F32);
    CHECK(!q);
}

static void rows_not_a_multiple_of_256_fall_back_like_llama_cpp(void) {
    kiln__mix_state st = {.has_output = true, .n_gqa = 2, .n_attn_v = 5, .n_ffn_down = 5};
    CHECK_EQ_INT(tiny(KILN_MIX_Q4_K_S, &st, "blk.0.attn_q.weight", 64), KILN_TYPE_Q5_0);
    CHECK_EQ_INT(tiny(KILN_MIX_Q5_K_M, &st, "blk.0.attn_q.weight", 64), KILN_TYPE_Q5_1);
    CHECK_EQ_INT(tiny(KILN_MIX_Q6_K, &st, "blk.0.attn_q.weight", 64), KILN_TYPE_Q8_0);
    CHECK_EQ_INT(tiny(KILN_MIX_Q2_K, &st, "blk.0.attn_q.weight", 64), KILN_TYPE_Q4_0);
    CHECK_EQ_INT(tiny(KILN_MIX_Q4_K_M, &st, "output.weight", 64), KILN_TYPE_Q8_0);
    CHECK_EQ_INT(tiny(KILN_MIX_Q4_K_M, &st, "blk.0.ffn_down.weight", 172), KILN_TYPE_F16); /* 172 % 32 != 0 */
}

static void keeps_every_key_and_sets_file_type_and_quantization_version(void) {
    kiln_quantize_params p = kiln_quantize_params_default();
    kiln_gguf *in = NULL, *out = NULL;
    uint32_t ft = 0, qv = 0;
    CHECK_OK(kiln_quantize_file(KILN_MODEL_PATH, TMP("meta.gguf"), &p, NULL, NULL));
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &in));
    CHECK_OK(kiln_gguf_open(TMP("meta.gguf"), &out));
    if (!in || !out) return;
    for (int64_t i = 0; i < kiln_gguf_kv_count(in); i++)
        if (kiln_gguf_find_key(out, kiln_gguf_kv_key(in, i)) < 0)
            harness_fail(__FILE__, __LINE__, "key '%s' was dropped", kiln_gguf_kv_key(in, i));
    CHECK_OK(kiln_gguf_get_u32(out, "general.file_type", &ft));
    CHECK_OK(kiln_gguf_get_u32(out, "general.quantization_version", &qv));
    CHECK_EQ_INT(ft, 15); /* LLAMA_FTYPE_MOSTLY_Q4_K_M */
    CHECK_EQ_INT(qv, 2);
    CHECK_EQ_INT(kiln_gguf_tensor_count(out), kiln_gguf_tensor_count(in));
    kiln_tensor_info t;
    CHECK_OK(kiln_gguf_tensor_info(out, kiln_gguf_find_tensor(out, "blk.0.attn_norm.weight"), &t));
    CHECK_EQ_INT(t.type, KILN_TYPE_F32);
    kiln_gguf_close(in);
    kiln_gguf_close(out);
    remove(TMP("meta.gguf"));
}

static bool tmp_has_leftovers(const char *prefix) {
    DIR *d = opendir(KILN_TEST_TMP);
    struct dirent *e;
    bool found = false;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) found = true;
    if (d) closedir(d);
    return found;
}

static void refuses_unreadable_input_with_the_reason_and_leaves_no_file(void) {
    kiln_quantize_params p = kiln_quantize_params_default();
    CHECK_STATUS(kiln_quantize_file(TMP("missing.gguf"), TMP("refused.gguf"), &p, NULL, NULL), KILN_E_IO);
    CHECK_ERROR_MENTIONS("missing.gguf");
    FILE *f = fopen(TMP("garbage.gguf"), "wb");
    fputs("this is not a model file", f);
    fclose(f);
    CHECK_STATUS(kiln_quantize_file(TMP("garbage.gguf"), TMP("refused.gguf"), &p, NULL, NULL), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("garbage.gguf");
    CHECK(!tmp_has_leftovers("quantize_tool_refused.gguf"));
    p.mix = (kiln_quant_mix)99;
    CHECK_STATUS(kiln_quantize_file(KILN_MODEL_PATH, TMP("refused.gguf"), &p, NULL, NULL), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_quant_mix_parse("Q4_K_XL", &p.mix), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("Q4_K_M");
    remove(TMP("garbage.gguf"));
}

static void refuses_already_quantized_input_unless_allowed_and_then_requantizes(void) {
    kiln_quantize_params p = kiln_quantize_params_default();
    p.mix = KILN_MIX_Q8_0;
    CHECK_OK(kiln_quantize_file(KILN_MODEL_PATH, TMP("q8.gguf"), &p, NULL, NULL));
    p.mix = KILN_MIX_Q4_0;
    CHECK_STATUS(kiln_quantize_file(TMP("q8.gguf"), TMP("re.gguf"), &p, NULL, NULL), KILN_E_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("already quantized");
    CHECK(!tmp_has_leftovers("quantize_tool_re.gguf"));
    p.allow_requantize = true;
    CHECK_OK(kiln_quantize_file(TMP("q8.gguf"), TMP("re.gguf"), &p, NULL, NULL));
    int32_t ids[8];
    CHECK_EQ_INT(greedy(TMP("re.gguf"), ids, 8), 8);
    remove(TMP("q8.gguf"));
    remove(TMP("re.gguf"));
}

/* Copy a file into memory, let `edit` change it, write it to path. */
static bool write_edited(const char *src, const char *path, size_t keep, void (*edit)(char *, size_t)) {
    size_t size;
    char *data = harness_read_file(src, &size);
    if (!data) return false;
    if (edit) edit(data, size);
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, keep && keep < size ? keep : size, f);
    fclose(f);
    free(data);
    return true;
}

static void truncated_quantized_tensor_is_an_error_at_load(void) {
    kiln_quantize_params p = kiln_quantize_params_default();
    kiln_model *m = NULL;
    size_t size;
    CHECK_OK(kiln_quantize_file(KILN_MODEL_PATH, TMP("trunc_src.gguf"), &p, NULL, NULL));
    char *data = harness_read_file(TMP("trunc_src.gguf"), &size);
    free(data);
    CHECK(write_edited(TMP("trunc_src.gguf"), TMP("trunc.gguf"), size - 1000, NULL));
    CHECK_STATUS(kiln_model_load(TMP("trunc.gguf"), &m), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("exceeds");
    CHECK(m == NULL);
    remove(TMP("trunc_src.gguf"));
    remove(TMP("trunc.gguf"));
}

/* Set every Q8_0 block scale of the first quantized tensor to NaN, +inf or -inf in turn. */
static size_t scales_from, scales_to;
static void poison_scales(char *data, size_t size) {
    static const uint16_t bad[3] = {0x7e00, 0x7c00, 0xfc00};
    for (size_t off = scales_from, k = 0; off + 34 <= scales_to && off + 34 <= size; off += 34, k++)
        memcpy(data + off, &bad[k % 3], 2);
}

static void nan_and_infinite_scales_give_defined_output_not_a_crash(void) {
    kiln_quantize_params p = kiln_quantize_params_default();
    kiln_gguf *g = NULL;
    kiln_tensor_info t;
    p.mix = KILN_MIX_Q8_0;
    CHECK_OK(kiln_quantize_file(KILN_MODEL_PATH, TMP("nan_src.gguf"), &p, NULL, NULL));
    CHECK_OK(kiln_gguf_open(TMP("nan_src.gguf"), &g));
    if (!g) return;
    CHECK_OK(kiln_gguf_tensor_info(g, kiln_gguf_find_tensor(g, "blk.0.attn_q.weight"), &t));
    CHECK_EQ_INT(t.type, KILN_TYPE_Q8_0);
    scales_from = kiln_gguf_data_offset(g) + t.offset;
    scales_to = scales_from + t.size;
    kiln_gguf_close(g);
    CHECK(write_edited(TMP("nan_src.gguf"), TMP("nan.gguf"), 0, poison_scales));
    int32_t ids[8];
    CHECK_EQ_INT(greedy(TMP("nan.gguf"), ids, 8), 8); /* NaN logits: greedy still picks valid ids */
    for (int i = 0; i < 8; i++) CHECK(ids[i] >= 0 && ids[i] < 512);
    remove(TMP("nan_src.gguf"));
    remove(TMP("nan.gguf"));
}

/* kiln_quant_mix_types (what `kiln synth` writes a mix with) chooses what the quantizer's own loop chooses,
 * tensor by tensor, for a whole model; bad arguments are named errors. */
static void the_public_mix_types_follow_the_quantizers_choices(void) {
    static const kiln_quant_mix all[] = {KILN_MIX_Q4_0,   KILN_MIX_Q8_0,   KILN_MIX_Q2_K,   KILN_MIX_Q3_K_M,
                                         KILN_MIX_Q4_K_S, KILN_MIX_Q4_K_M, KILN_MIX_Q5_K_M, KILN_MIX_Q6_K};
    kiln_gguf *g = NULL;
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &g));
    if (!g) return;
    int64_t n = kiln_gguf_tensor_count(g);
    kiln_tensor_info *t = calloc((size_t)n, sizeof *t);
    kiln_type *types = calloc((size_t)n, sizeof *types);
    for (int64_t i = 0; i < n; i++)
        CHECK_OK(kiln_gguf_tensor_info(g, i, &t[i]));
    for (size_t m = 0; m < sizeof all / sizeof all[0]; m++) {
        kiln__mix_state st;
        kiln__mix_state_init(&st, g);
        CHECK_OK(kiln_quant_mix_types(all[m], t, n, st.n_gqa, types));
        for (int64_t i = 0; i < n; i++) {
            bool q;
            CHECK_EQ_INT(types[i],
                         kiln__mix_choose(all[m], &st, t[i].name, t[i].type, t[i].n_dims, t[i].ne, &q));
        }
    }
    CHECK_EQ_INT(kiln_quant_mix_types(KILN_MIX_Q4_0, NULL, n, 1, types), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("NULL");
    CHECK_EQ_INT(kiln_quant_mix_types((kiln_quant_mix)99, t, n, 1, types), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("unknown quantization mix 99");
    t[1].n_dims = 0;
    CHECK_EQ_INT(kiln_quant_mix_types(KILN_MIX_Q4_0, t, n, 1, types), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("tensor 1");
    CHECK_OK(kiln_quant_mix_types(KILN_MIX_Q4_0, NULL, 0, 1, NULL));
    free(t);
    free(types);
    kiln_gguf_close(g);
}

int main(void) {
    RUN(every_mix_of_stories260k_tells_the_f32_story);
    RUN(q4_k_m_gives_attn_v_and_ffn_down_q6_k_on_llama_cpp_layers);
    RUN(small_mixes_raise_attention_and_ffn_down_and_keep_norms);
    RUN(rows_not_a_multiple_of_256_fall_back_like_llama_cpp);
    RUN(keeps_every_key_and_sets_file_type_and_quantization_version);
    RUN(refuses_unreadable_input_with_the_reason_and_leaves_no_file);
    RUN(refuses_already_quantized_input_unless_allowed_and_then_requantizes);
    RUN(truncated_quantized_tensor_is_an_error_at_load);
    RUN(nan_and_infinite_scales_give_defined_output_not_a_crash);
    RUN(the_public_mix_types_follow_the_quantizers_choices);
    return harness_finish();
}
