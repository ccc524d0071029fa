/*
 * gen_corpus.c - writes the seed corpus of fuzz_gguf into a directory: tiny valid GGUF files covering
 * every value type, both versions, several alignments and tensor types, plus a few near-valid ones
 * (truncated, a nested array, a misaligned offset). Run once, by hand, when the seeds need refreshing:
 *   build-gguf-fuzz/fuzz/gguf_corpus_gen fuzz/corpus/gguf
 * The files are checked in; see fuzz/README.md.
 */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;

static void check(kiln_status s, const char *what) {
    if (s != KILN_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, kiln_status_name(s), kiln_last_error());
        failed = 1;
    }
}

static void save(const char *dir, const char *name, const void *data, size_t size) {
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size) {
        fprintf(stderr, "cannot write %s\n", path);
        failed = 1;
    }
    if (f) fclose(f);
}

/* Write w to dir/name, plus variants derived from the bytes when `mutate` is set. */
static void emit(kiln_gguf_writer *w, const char *dir, const char *name) {
    void *out = NULL;
    size_t size = 0;
    check(kiln_gguf_writer_write_memory(w, &out, &size), name);
    if (out) save(dir, name, out, size);
    kiln_free(out);
    kiln_gguf_writer_destroy(w);
}

static kiln_gguf_writer *new_writer(uint32_t version) {
    kiln_gguf_writer *w = NULL;
    check(kiln_gguf_writer_create(&w), "create");
    if (w) check(kiln_gguf_writer_set_version(w, version), "version");
    return w;
}

static void every_value_type(const char *dir) {
    kiln_gguf_writer *w = new_writer(3);
    uint8_t u8 = 7, b = 1, u8s[3] = {1, 2, 3};
    int8_t i8 = -7;
    uint16_t u16 = 700;
    int16_t i16 = -700;
    uint32_t u32 = 70000;
    int32_t i32 = -70000, i32s[2] = {-1, 1};
    float f32 = 0.5f, f32s[2] = {1.5f, -2.0f};
    uint64_t u64 = 1ull << 40;
    int64_t i64 = -(1ll << 40);
    double f64 = 0.125, f64s[1] = {3.0};
    kiln_str strs[3] = {{"<s>", 3},
                        {"", 0},
                        {"\xe2\x96\x81"
                         "hi",
                         5}};
    static const float t0[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int64_t ne[2] = {4, 2};
    if (!w) return;
    check(kiln_gguf_writer_add_str(w, "general.architecture", "llama", 5), "arch");
    check(kiln_gguf_writer_add_scalar(w, "u8", KILN_GGUF_UINT8, &u8), "u8");
    check(kiln_gguf_writer_add_scalar(w, "i8", KILN_GGUF_INT8, &i8), "i8");
    check(kiln_gguf_writer_add_scalar(w, "u16", KILN_GGUF_UINT16, &u16), "u16");
    check(kiln_gguf_writer_add_scalar(w, "i16", KILN_GGUF_INT16, &i16), "i16");
    check(kiln_gguf_writer_add_scalar(w, "u32", KILN_GGUF_UINT32, &u32), "u32");
    check(kiln_gguf_writer_add_scalar(w, "i32", KILN_GGUF_INT32, &i32), "i32");
    check(kiln_gguf_writer_add_scalar(w, "f32", KILN_GGUF_FLOAT32, &f32), "f32");
    check(kiln_gguf_writer_add_scalar(w, "bool", KILN_GGUF_BOOL, &b), "bool");
    check(kiln_gguf_writer_add_str(w, "str", "", 0), "str");
    check(kiln_gguf_writer_add_scalar(w, "u64", KILN_GGUF_UINT64, &u64), "u64");
    check(kiln_gguf_writer_add_scalar(w, "i64", KILN_GGUF_INT64, &i64), "i64");
    check(kiln_gguf_writer_add_scalar(w, "f64", KILN_GGUF_FLOAT64, &f64), "f64");
    check(kiln_gguf_writer_add_array(w, "a.u8", KILN_GGUF_UINT8, u8s, 3), "a.u8");
    check(kiln_gguf_writer_add_array(w, "a.i32", KILN_GGUF_INT32, i32s, 2), "a.i32");
    check(kiln_gguf_writer_add_array(w, "a.f32", KILN_GGUF_FLOAT32, f32s, 2), "a.f32");
    check(kiln_gguf_writer_add_array(w, "a.f64", KILN_GGUF_FLOAT64, f64s, 1), "a.f64");
    check(kiln_gguf_writer_add_array(w, "a.empty", KILN_GGUF_BOOL, NULL, 0), "a.empty");
    check(kiln_gguf_writer_add_str_array(w, "a.str", strs, 3), "a.str");
    check(kiln_gguf_writer_add_tensor(w, "t", KILN_TYPE_F32, 2, ne, t0), "t");
    emit(w, dir, "every_value_type.gguf");
}

static void header_only(const char *dir) {
    emit(new_writer(3), dir, "header_only_v3.gguf");
    emit(new_writer(2), dir, "header_only_v2.gguf");
}

static void quantized_tensors_aligned_64(const char *dir) {
    kiln_gguf_writer *w = new_writer(2);
    uint32_t align = 64;
    static uint8_t q4[2 * 18], q8[34], h[6], bf[4];
    const int64_t ne_q4[2] = {32, 2}, ne_q8[1] = {32}, ne_h[3] = {1, 3, 1}, ne_bf[4] = {1, 1, 1, 2};
    if (!w) return;
    for (size_t i = 0; i < sizeof q4; i++)
        q4[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof q8; i++)
        q8[i] = (uint8_t)(i * 3);
    check(kiln_gguf_writer_set_alignment(w, 64), "align");
    check(kiln_gguf_writer_add_scalar(w, "general.alignment", KILN_GGUF_UINT32, &align), "general.alignment");
    check(kiln_gguf_writer_add_tensor(w, "blk.0.q4", KILN_TYPE_Q4_0, 2, ne_q4, q4), "q4");
    check(kiln_gguf_writer_add_tensor(w, "blk.0.q8", KILN_TYPE_Q8_0, 1, ne_q8, q8), "q8");
    check(kiln_gguf_writer_add_tensor(w, "blk.0.h", KILN_TYPE_F16, 3, ne_h, h), "f16");
    check(kiln_gguf_writer_add_tensor(w, "blk.0.bf", KILN_TYPE_BF16, 4, ne_bf, bf), "bf16");
    emit(w, dir, "quantized_aligned_64_v2.gguf");
}

static void vocab_only(const char *dir) {
    kiln_gguf_writer *w = new_writer(3);
    kiln_str tokens[6] = {{"<unk>", 5},
                          {"<s>", 3},
                          {"</s>", 4},
                          {"<0x0A>", 6},
                          {"\xe2\x96\x81"
                           "a",
                           4},
                          {"b", 1}};
    float scores[6] = {0, 0, 0, 0, -1.5f, -2.5f};
    int32_t types[6] = {2, 3, 3, 6, 1, 1};
    uint32_t bos = 1, eos = 2;
    if (!w) return;
    check(kiln_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", 5), "model");
    check(kiln_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, 6), "tokens");
    check(kiln_gguf_writer_add_array(w, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, scores, 6), "scores");
    check(kiln_gguf_writer_add_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types, 6), "types");
    check(kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.bos_token_id", KILN_GGUF_UINT32, &bos), "bos");
    check(kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.eos_token_id", KILN_GGUF_UINT32, &eos), "eos");
    emit(w, dir, "vocab_only.gguf");
}

/* Near-valid inputs: a valid small file, then one damaged field. */
static void near_valid(const char *dir) {
    kiln_gguf_writer *w = new_writer(3);
    int32_t arr[2] = {5, 6};
    static const float t[8];
    const int64_t ne[1] = {8};
    void *out = NULL;
    size_t size = 0;
    uint8_t *p;
    if (!w) return;
    check(kiln_gguf_writer_add_array(w, "k", KILN_GGUF_INT32, arr, 2), "k");
    check(kiln_gguf_writer_add_tensor(w, "t", KILN_TYPE_F32, 1, ne, t), "t");
    check(kiln_gguf_writer_write_memory(w, &out, &size), "near_valid");
    kiln_gguf_writer_destroy(w);
    if (!out) return;
    p = out;
    save(dir, "near_truncated.gguf", p, size - 5);
    p[24 + 8 + 1 + 4] = 9; /* the array's element type becomes ARRAY */
    save(dir, "near_nested_array.gguf", p, size);
    p[24 + 8 + 1 + 4] = 5;
    p[24 + 33 + 33 - 8] = 1; /* the tensor's offset, the last header field (header: 24 + kv 33 + info 33) */
    save(dir, "near_misaligned_offset.gguf", p, size);
    kiln_free(out);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
        return 2;
    }
    every_value_type(argv[1]);
    header_only(argv[1]);
    quantized_tensors_aligned_64(argv[1]);
    vocab_only(argv[1]);
    near_valid(argv[1]);
    return failed;
}
