/*
 * test_gguf_read.c - reading GGUF files: the bundled stories260K model read field by field, every metadata
 * value type round-tripped through the writer, lookups, getter type rules and I/O errors.
 */
#include "gguf_craft.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

static bool str_eq(kiln_str s, const char *want) {
    return s.len == strlen(want) && memcmp(s.data, want, s.len) == 0;
}

/* ---- The bundled model. ---- */

static void opens_stories260k_with_its_header_counts(void) {
    kiln_gguf *g = NULL;
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &g));
    if (!g) return;
    CHECK_EQ_INT(kiln_gguf_version(g), 3);
    CHECK_EQ_INT(kiln_gguf_kv_count(g), 19);
    CHECK_EQ_INT(kiln_gguf_tensor_count(g), 48);
    CHECK_EQ_INT(kiln_gguf_alignment(g), 32); /* no general.alignment key: the default */
    CHECK_EQ_INT(kiln_gguf_find_key(g, "general.alignment"), -1);
    CHECK_EQ_INT(kiln_gguf_data_offset(g), 14176); /* header ends at 14152, rounded up to 32 */
    kiln_gguf_close(g);
}

static void reads_stories260k_scalar_metadata(void) {
    kiln_gguf *g = NULL;
    uint32_t u;
    float f;
    double d;
    int64_t i;
    kiln_str s;
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &g));
    if (!g) return;
    CHECK_EQ_INT(kiln_gguf_kv_type(g, kiln_gguf_find_key(g, "llama.embedding_length")), KILN_GGUF_UINT32);
    CHECK_OK(kiln_gguf_get_u32(g, "llama.embedding_length", &u));
    CHECK_EQ_INT(u, 64);
    CHECK_OK(kiln_gguf_get_int(g, "llama.block_count", &i));
    CHECK_EQ_INT(i, 5);
    CHECK_OK(kiln_gguf_get_u32(g, "tokenizer.ggml.seperator_token_id", &u));
    CHECK_EQ_INT(u, 4294967295u);
    CHECK_EQ_INT(kiln_gguf_kv_type(g, kiln_gguf_find_key(g, "llama.attention.layer_norm_rms_epsilon")),
                 KILN_GGUF_FLOAT32);
    CHECK_OK(kiln_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f));
    CHECK(f == 1e-5f);
    CHECK_OK(kiln_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &d));
    CHECK(d == (double)1e-5f);
    CHECK_OK(kiln_gguf_get_str(g, "general.architecture", &s));
    CHECK(str_eq(s, "llama"));
    CHECK_STR(kiln_gguf_kv_key(g, 0), "tokenizer.ggml.tokens");
    CHECK_STR(kiln_gguf_kv_key(g, 18), "llama.attention.layer_norm_rms_epsilon");
    CHECK(kiln_gguf_kv_key(g, 19) == NULL);
    CHECK(kiln_gguf_kv_key(g, -1) == NULL);
    kiln_gguf_close(g);
}

static void reads_stories260k_vocabulary_arrays(void) {
    kiln_gguf *g = NULL;
    kiln_str s;
    int64_t tokens, scores, types;
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &g));
    if (!g) return;
    tokens = kiln_gguf_find_key(g, "tokenizer.ggml.tokens");
    CHECK_EQ_INT(kiln_gguf_kv_type(g, tokens), KILN_GGUF_ARRAY);
    CHECK_EQ_INT(kiln_gguf_arr_type(g, tokens), KILN_GGUF_STRING);
    CHECK_EQ_INT(kiln_gguf_arr_len(g, tokens), 512);
    CHECK(kiln_gguf_arr_data(g, tokens) == NULL);
    CHECK_OK(kiln_gguf_arr_str(g, tokens, 0, &s));
    CHECK(str_eq(s, "<unk>"));
    CHECK_OK(kiln_gguf_arr_str(g, tokens, 1, &s));
    CHECK(str_eq(s, "<s>"));
    CHECK_OK(kiln_gguf_arr_str(g, tokens, 511, &s));
    CHECK(s.len > 0);
    CHECK_STATUS(kiln_gguf_arr_str(g, tokens, 512, &s), KILN_E_RANGE);
    scores = kiln_gguf_find_key(g, "tokenizer.ggml.scores");
    CHECK_EQ_INT(kiln_gguf_arr_type(g, scores), KILN_GGUF_FLOAT32);
    CHECK_EQ_INT(kiln_gguf_arr_len(g, scores), 512);
    CHECK((uintptr_t)kiln_gguf_arr_data(g, scores) % sizeof(float) == 0);
    types = kiln_gguf_find_key(g, "tokenizer.ggml.token_type");
    CHECK_EQ_INT(kiln_gguf_arr_type(g, types), KILN_GGUF_INT32);
    if (kiln_gguf_arr_data(g, types)) {
        const int32_t *t = kiln_gguf_arr_data(g, types);
        CHECK_EQ_INT(t[0], KILN_TOKEN_UNKNOWN);
        CHECK_EQ_INT(t[1], KILN_TOKEN_CONTROL);
    }
    CHECK_EQ_INT(kiln_gguf_arr_type(g, kiln_gguf_find_key(g, "llama.block_count")), KILN_GGUF_TYPE_COUNT);
    CHECK_EQ_INT(kiln_gguf_arr_len(g, kiln_gguf_find_key(g, "llama.block_count")), 0);
    kiln_gguf_close(g);
}

static void reads_stories260k_tensor_infos_with_data_in_the_mapping(void) {
    kiln_gguf *g = NULL, *m = NULL;
    kiln_tensor_info t, tm;
    size_t size = 0;
    char *file = harness_read_file(KILN_MODEL_PATH, &size);
    int64_t i;
    CHECK(file != NULL);
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &g));
    CHECK_OK(kiln_gguf_open_memory(file, size, &m));
    if (!g || !m || !file) goto done;
    i = kiln_gguf_find_tensor(g, "token_embd.weight");
    CHECK_EQ_INT(i, 0);
    CHECK_OK(kiln_gguf_tensor_info(g, i, &t));
    CHECK_STR(t.name, "token_embd.weight");
    CHECK_EQ_INT(t.type, KILN_TYPE_F32);
    CHECK_EQ_INT(t.n_dims, 2);
    CHECK_EQ_INT(t.ne[0], 64);
    CHECK_EQ_INT(t.ne[1], 512);
    CHECK_EQ_INT(t.ne[2], 1);
    CHECK_EQ_INT(t.ne[3], 1);
    CHECK_EQ_INT(t.offset, 0);
    CHECK_EQ_INT(t.size, 64 * 512 * 4);
    /* The same tensor opened from a buffer points exactly at data_offset + offset in it; the mapped
     * one holds the same bytes. */
    CHECK_OK(kiln_gguf_tensor_info(m, i, &tm));
    CHECK(tm.data == file + kiln_gguf_data_offset(m) + tm.offset);
    CHECK(memcmp(t.data, file + kiln_gguf_data_offset(g) + t.offset, t.size) == 0);
    i = kiln_gguf_find_tensor(g, "blk.4.ffn_norm.weight");
    CHECK_EQ_INT(i, 47);
    CHECK_OK(kiln_gguf_tensor_info(g, i, &t));
    CHECK_EQ_INT(t.n_dims, 1);
    CHECK_EQ_INT(t.ne[0], 64);
    CHECK_EQ_INT(kiln_gguf_data_offset(g) + t.offset + t.size, size); /* the last tensor ends the file */
    CHECK_EQ_INT(kiln_gguf_find_tensor(g, "no.such.tensor"), -1);
    CHECK_STATUS(kiln_gguf_tensor_info(g, 48, &t), KILN_E_INVALID_ARG);
done:
    kiln_gguf_close(g);
    kiln_gguf_close(m);
    free(file);
}

static void opens_vocab_only_files_without_tensors(void) {
    kiln_gguf *g = NULL;
    kiln_str s;
    CHECK_OK(kiln_gguf_open(harness_data_path("vocab/ggml-vocab-phi-3.gguf"), &g));
    if (!g) return;
    CHECK_EQ_INT(kiln_gguf_tensor_count(g), 0);
    CHECK_EQ_INT(kiln_gguf_kv_count(g), 26);
    CHECK_EQ_INT(kiln_gguf_arr_len(g, kiln_gguf_find_key(g, "tokenizer.ggml.tokens")), 32064);
    CHECK_OK(kiln_gguf_get_str(g, "tokenizer.chat_template", &s));
    CHECK(s.len > 0);
    kiln_gguf_close(g);
}

/* ---- Errors of opening and of getters. ---- */

static void open_of_a_missing_file_is_an_io_error_naming_the_path(void) {
    kiln_gguf *g = (kiln_gguf *)1;
    CHECK_STATUS(kiln_gguf_open(KILN_TEST_TMP "/does-not-exist.gguf", &g), KILN_E_IO);
    CHECK_ERROR_MENTIONS("does-not-exist.gguf");
    CHECK_ERROR_MENTIONS("No such file");
    CHECK(g == NULL);
    CHECK_STATUS(kiln_gguf_open(KILN_TEST_TMP, &g), KILN_E_IO);
    CHECK_ERROR_MENTIONS("is not a regular file");
}

static void open_errors_of_a_malformed_file_name_the_path(void) {
    const char *path = KILN_TEST_TMP "/read_empty.gguf";
    kiln_gguf *g = NULL;
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) fclose(f);
    CHECK_STATUS(kiln_gguf_open(path, &g), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("read_empty.gguf");
    CHECK_ERROR_MENTIONS("truncated file: the magic");
    remove(path);
}

static void getters_report_a_missing_key_as_not_found(void) {
    kiln_gguf *g = NULL;
    uint32_t u;
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &g));
    CHECK_EQ_INT(kiln_gguf_find_key(g, "llama.rope.freq_base"), -1);
    CHECK_STATUS(kiln_gguf_get_u32(g, "llama.rope.freq_base", &u), KILN_E_NOT_FOUND);
    CHECK_ERROR_MENTIONS("key 'llama.rope.freq_base' not found");
    kiln_gguf_close(g);
}

static void getters_reject_a_type_mismatch_naming_key_and_types(void) {
    kiln_gguf *g = NULL;
    uint32_t u;
    float f;
    bool b;
    kiln_str s;
    int64_t i;
    double d;
    CHECK_OK(kiln_gguf_open(KILN_MODEL_PATH, &g));
    CHECK_STATUS(kiln_gguf_get_u32(g, "general.architecture", &u), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("key 'general.architecture' has type STRING, not UINT32");
    CHECK_STATUS(kiln_gguf_get_f32(g, "llama.embedding_length", &f), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("key 'llama.embedding_length' has type UINT32, not FLOAT32");
    CHECK_STATUS(kiln_gguf_get_bool(g, "llama.embedding_length", &b), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("has type UINT32, not BOOL");
    CHECK_STATUS(kiln_gguf_get_str(g, "tokenizer.ggml.tokens", &s), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("key 'tokenizer.ggml.tokens' has type ARRAY of STRING, not STRING");
    CHECK_STATUS(kiln_gguf_get_int(g, "llama.attention.layer_norm_rms_epsilon", &i), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("has type FLOAT32, not an integer type");
    CHECK_STATUS(kiln_gguf_get_float(g, "llama.context_length", &d), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("key 'llama.context_length' has type UINT32, not FLOAT32 or FLOAT64");
    kiln_gguf_close(g);
}

/* ---- Every value type through the writer and back. ---- */

/* Write w to memory, open the result; the image is returned for freeing with kiln_free. */
static kiln_gguf *write_and_open(kiln_gguf_writer *w, void **image) {
    size_t size = 0;
    kiln_gguf *g = NULL;
    *image = NULL;
    CHECK_OK(kiln_gguf_writer_write_memory(w, image, &size));
    if (*image) CHECK_OK(kiln_gguf_open_memory(*image, size, &g));
    return g;
}

/* A file with one key of every scalar type (the extremes of each), written and reopened. */
static kiln_gguf *open_every_scalar_type(void **image) {
    kiln_gguf_writer *w = NULL;
    kiln_gguf *g;
    uint8_t u8 = 255, bt = 1, bf = 0;
    int8_t i8 = -128;
    uint16_t u16 = 65535;
    int16_t i16 = -32768;
    uint32_t u32 = 4000000000u;
    int32_t i32 = INT32_MIN;
    float f32 = -2.75f;
    uint64_t u64 = UINT64_MAX, u64s = (uint64_t)INT64_MAX;
    int64_t i64 = INT64_MIN;
    double f64 = 1.0 / 3.0;
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "u8", KILN_GGUF_UINT8, &u8));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "i8", KILN_GGUF_INT8, &i8));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "u16", KILN_GGUF_UINT16, &u16));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "i16", KILN_GGUF_INT16, &i16));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "u32", KILN_GGUF_UINT32, &u32));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "i32", KILN_GGUF_INT32, &i32));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "f32", KILN_GGUF_FLOAT32, &f32));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "true", KILN_GGUF_BOOL, &bt));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "false", KILN_GGUF_BOOL, &bf));
    CHECK_OK(kiln_gguf_writer_add_str(w, "str", "héllo", strlen("héllo")));
    CHECK_OK(kiln_gguf_writer_add_str(w, "empty", NULL, 0));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "u64", KILN_GGUF_UINT64, &u64));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "u64s", KILN_GGUF_UINT64, &u64s));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "i64", KILN_GGUF_INT64, &i64));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "f64", KILN_GGUF_FLOAT64, &f64));
    g = write_and_open(w, image);
    kiln_gguf_writer_destroy(w);
    return g;
}

static void every_scalar_type_round_trips(void) {
    void *image;
    kiln_gguf *g = open_every_scalar_type(&image);
    uint32_t u;
    float f;
    int64_t i;
    double d;
    bool b;
    kiln_str s;
    if (!g) {
        kiln_free(image);
        return;
    }
    CHECK_EQ_INT(kiln_gguf_kv_count(g), 15);
    CHECK_EQ_INT(kiln_gguf_tensor_count(g), 0);
    static const kiln_gguf_type types[] = {
        KILN_GGUF_UINT8,  KILN_GGUF_INT8,    KILN_GGUF_UINT16, KILN_GGUF_INT16, KILN_GGUF_UINT32,
        KILN_GGUF_INT32,  KILN_GGUF_FLOAT32, KILN_GGUF_BOOL,   KILN_GGUF_BOOL,  KILN_GGUF_STRING,
        KILN_GGUF_STRING, KILN_GGUF_UINT64,  KILN_GGUF_UINT64, KILN_GGUF_INT64, KILN_GGUF_FLOAT64};
    for (int k = 0; k < 15; k++)
        CHECK_EQ_INT(kiln_gguf_kv_type(g, k), types[k]);
    CHECK_OK(kiln_gguf_get_int(g, "u8", &i));
    CHECK_EQ_INT(i, 255);
    CHECK_OK(kiln_gguf_get_int(g, "i8", &i));
    CHECK_EQ_INT(i, -128);
    CHECK_OK(kiln_gguf_get_int(g, "u16", &i));
    CHECK_EQ_INT(i, 65535);
    CHECK_OK(kiln_gguf_get_int(g, "i16", &i));
    CHECK_EQ_INT(i, -32768);
    CHECK_OK(kiln_gguf_get_u32(g, "u32", &u));
    CHECK_EQ_INT(u, 4000000000u);
    CHECK_OK(kiln_gguf_get_int(g, "u32", &i));
    CHECK_EQ_INT(i, 4000000000LL);
    CHECK_OK(kiln_gguf_get_int(g, "i32", &i));
    CHECK_EQ_INT(i, INT32_MIN);
    CHECK_OK(kiln_gguf_get_f32(g, "f32", &f));
    CHECK(f == -2.75f);
    CHECK_OK(kiln_gguf_get_bool(g, "true", &b));
    CHECK(b);
    CHECK_OK(kiln_gguf_get_bool(g, "false", &b));
    CHECK(!b);
    CHECK_OK(kiln_gguf_get_str(g, "str", &s));
    CHECK(str_eq(s, "héllo"));
    CHECK_OK(kiln_gguf_get_str(g, "empty", &s));
    CHECK_EQ_INT(s.len, 0);
    CHECK_STATUS(kiln_gguf_get_int(g, "u64", &i), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("key 'u64': UINT64 value 18446744073709551615 does not fit in int64");
    CHECK_OK(kiln_gguf_get_int(g, "u64s", &i));
    CHECK_EQ_INT(i, INT64_MAX);
    CHECK_OK(kiln_gguf_get_int(g, "i64", &i));
    CHECK(i == INT64_MIN);
    CHECK_OK(kiln_gguf_get_float(g, "f64", &d));
    CHECK(d == 1.0 / 3.0);
    CHECK_OK(kiln_gguf_get_float(g, "f32", &d));
    CHECK(d == -2.75);
    kiln_gguf_close(g);
    kiln_free(image);
}

static void every_numeric_array_type_round_trips(void) {
    static const kiln_gguf_type types[] = {KILN_GGUF_UINT8,   KILN_GGUF_INT8,   KILN_GGUF_UINT16,
                                           KILN_GGUF_INT16,   KILN_GGUF_UINT32, KILN_GGUF_INT32,
                                           KILN_GGUF_FLOAT32, KILN_GGUF_BOOL,   KILN_GGUF_UINT64,
                                           KILN_GGUF_INT64,   KILN_GGUF_FLOAT64};
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 8, 8};
    uint8_t elems[5 * 8];
    char key[32];
    kiln_gguf_writer *w = NULL;
    kiln_gguf *g;
    void *image;
    const int n_types = (int)(sizeof types / sizeof types[0]);
    CHECK_OK(kiln_gguf_writer_create(&w));
    for (int k = 0; k < n_types; k++) {
        for (size_t j = 0; j < sizeof elems; j++)
            elems[j] = (uint8_t)(types[k] == KILN_GGUF_BOOL ? j % 2 : 31 * j + k);
        snprintf(key, sizeof key, "arr.%d", k);
        CHECK_OK(kiln_gguf_writer_add_array(w, key, types[k], elems, 5));
        snprintf(key, sizeof key, "empty.%d", k);
        CHECK_OK(kiln_gguf_writer_add_array(w, key, types[k], NULL, 0));
    }
    g = write_and_open(w, &image);
    kiln_gguf_writer_destroy(w);
    for (int k = 0; g && k < n_types; k++) {
        int64_t i;
        const uint8_t *data;
        for (size_t j = 0; j < sizeof elems; j++)
            elems[j] = (uint8_t)(types[k] == KILN_GGUF_BOOL ? j % 2 : 31 * j + k);
        snprintf(key, sizeof key, "arr.%d", k);
        i = kiln_gguf_find_key(g, key);
        CHECK_EQ_INT(kiln_gguf_kv_type(g, i), KILN_GGUF_ARRAY);
        CHECK_EQ_INT(kiln_gguf_arr_type(g, i), types[k]);
        CHECK_EQ_INT(kiln_gguf_arr_len(g, i), 5);
        data = kiln_gguf_arr_data(g, i);
        CHECK(data != NULL);
        CHECK((uintptr_t)data % sizes[k] == 0);
        if (data) CHECK(memcmp(data, elems, 5 * sizes[k]) == 0);
        snprintf(key, sizeof key, "empty.%d", k);
        i = kiln_gguf_find_key(g, key);
        CHECK_EQ_INT(kiln_gguf_arr_type(g, i), types[k]);
        CHECK_EQ_INT(kiln_gguf_arr_len(g, i), 0);
    }
    kiln_gguf_close(g);
    kiln_free(image);
}

static void string_arrays_round_trip_including_empty_ones(void) {
    kiln_str in[4] = {{"alpha", 5}, {"", 0}, {"with\0nul", 8}, {"▁the", strlen("▁the")}};
    kiln_gguf_writer *w = NULL;
    kiln_gguf *g;
    void *image;
    kiln_str s;
    int64_t i;
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_add_str_array(w, "strs", in, 4));
    CHECK_OK(kiln_gguf_writer_add_str_array(w, "none", NULL, 0));
    g = write_and_open(w, &image);
    kiln_gguf_writer_destroy(w);
    if (g) {
        i = kiln_gguf_find_key(g, "strs");
        CHECK_EQ_INT(kiln_gguf_arr_type(g, i), KILN_GGUF_STRING);
        CHECK_EQ_INT(kiln_gguf_arr_len(g, i), 4);
        for (uint64_t j = 0; j < 4; j++) {
            CHECK_OK(kiln_gguf_arr_str(g, i, j, &s));
            CHECK_EQ_INT(s.len, in[j].len);
            if (s.len == in[j].len && s.len) CHECK(memcmp(s.data, in[j].data, s.len) == 0);
        }
        i = kiln_gguf_find_key(g, "none");
        CHECK_EQ_INT(kiln_gguf_arr_type(g, i), KILN_GGUF_STRING);
        CHECK_EQ_INT(kiln_gguf_arr_len(g, i), 0);
        CHECK_STATUS(kiln_gguf_arr_str(g, i, 0, &s), KILN_E_RANGE);
    }
    kiln_gguf_close(g);
    kiln_free(image);
}

static void numeric_arrays_are_aligned_even_when_the_file_copy_is_not(void) {
    uint64_t v[3] = {1, (uint64_t)1 << 63, 42};
    kiln_gguf_writer *w = NULL;
    kiln_gguf *g;
    void *image;
    CHECK_OK(kiln_gguf_writer_create(&w));
    /* 24 + 8 + strlen("k") + 4 + 4 + 8 = byte 49: the elements start at an odd offset. */
    CHECK_OK(kiln_gguf_writer_add_array(w, "k", KILN_GGUF_UINT64, v, 3));
    g = write_and_open(w, &image);
    kiln_gguf_writer_destroy(w);
    if (g) {
        const uint64_t *data = kiln_gguf_arr_data(g, 0);
        CHECK((uintptr_t)data % 8 == 0);
        CHECK(data[0] == 1 && data[1] == (uint64_t)1 << 63 && data[2] == 42);
    }
    kiln_gguf_close(g);
    kiln_free(image);
}

static void version_2_files_read_like_version_3(void) {
    kiln_gguf_writer *w = NULL;
    kiln_gguf *g;
    void *image;
    uint32_t u;
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_set_version(w, 2));
    craft_fill_writer(w);
    g = write_and_open(w, &image);
    kiln_gguf_writer_destroy(w);
    if (g) {
        CHECK_EQ_INT(kiln_gguf_version(g), 2);
        CHECK_EQ_INT(kiln_gguf_kv_count(g), CRAFT_N_KV);
        CHECK_EQ_INT(kiln_gguf_tensor_count(g), CRAFT_N_TENSORS);
        CHECK_OK(kiln_gguf_get_u32(g, "general.alignment", &u));
        CHECK_EQ_INT(u, 32);
    }
    kiln_gguf_close(g);
    kiln_free(image);
}

static void close_accepts_null(void) {
    kiln_gguf_close(NULL);
}

int main(void) {
    RUN(opens_stories260k_with_its_header_counts);
    RUN(reads_stories260k_scalar_metadata);
    RUN(reads_stories260k_vocabulary_arrays);
    RUN(reads_stories260k_tensor_infos_with_data_in_the_mapping);
    RUN(opens_vocab_only_files_without_tensors);
    RUN(open_of_a_missing_file_is_an_io_error_naming_the_path);
    RUN(open_errors_of_a_malformed_file_name_the_path);
    RUN(getters_report_a_missing_key_as_not_found);
    RUN(getters_reject_a_type_mismatch_naming_key_and_types);
    RUN(every_scalar_type_round_trips);
    RUN(every_numeric_array_type_round_trips);
    RUN(string_arrays_round_trip_including_empty_ones);
    RUN(numeric_arrays_are_aligned_even_when_the_file_copy_is_not);
    RUN(version_2_files_read_like_version_3);
    RUN(close_accepts_null);
    return harness_finish();
}
