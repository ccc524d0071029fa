/*
 * test_limits.c - the resource limits of kiln.h (KILN_MAX_*), one test per limit: a file or a caller one
 * past the limit is refused with the named status and a message that names the limit, and where it is
 * cheap, a file exactly at the limit is accepted. Then the memory a hostile file can make Kiln allocate:
 * files of the smallest possible entries, as many as the limits allow, are opened through the counting
 * allocator, and the peak of live bytes must stay under the multiple of the file's size that
 * docs/security.md states. (The name-length limit is pinned by test_gguf_malformed.c, the server's request
 * limits by test_server_api.c and tests/server/test_malformed_requests.py.)
 *
 * Images are built byte by byte (little-endian, as the GGUF specification lays them out) so that a count
 * or length can say anything; large zero-filled regions come from calloc or, for the 256 MiB metadata
 * file, from a sparse file that is mapped and never touched.
 */
#include "harness.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- A little-endian image under construction. ---- */

typedef struct image {
    uint8_t *p;
    size_t len, cap;
} image;

static void put(image *im, const void *src, size_t n) {
    if (im->len + n > im->cap) {
        size_t cap = im->cap ? im->cap : 4096;
        while (cap < im->len + n)
            cap *= 2;
        im->p = realloc(im->p, cap);
        im->cap = cap;
    }
    memcpy(im->p + im->len, src, n);
    im->len += n;
}

static void put_u32(image *im, uint32_t v) {
    uint8_t b[4];
    for (int k = 0; k < 4; k++)
        b[k] = (uint8_t)(v >> (8 * k));
    put(im, b, 4);
}

static void put_u64(image *im, uint64_t v) {
    uint8_t b[8];
    for (int k = 0; k < 8; k++)
        b[k] = (uint8_t)(v >> (8 * k));
    put(im, b, 8);
}

static void put_str(image *im, const char *s) {
    put_u64(im, strlen(s));
    put(im, s, strlen(s));
}

static void put_header(image *im, uint64_t n_tensors, uint64_t n_kv) {
    put(im, "GGUF", 4);
    put_u32(im, 3);
    put_u64(im, n_tensors);
    put_u64(im, n_kv);
}

/* The image followed by `extra` zero bytes, as one calloc'd buffer. */
static uint8_t *with_zeros(const image *im, size_t extra, size_t *size) {
    uint8_t *p = calloc(1, im->len + extra);
    if (p) memcpy(p, im->p, im->len);
    *size = im->len + extra;
    return p;
}

static void expect_refused(const void *data, size_t size, const char *fragment) {
    kiln_gguf *g = NULL;
    CHECK_STATUS(kiln_gguf_open_memory(data, size, &g), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS(fragment);
    CHECK(g == NULL);
    kiln_gguf_close(g);
}

/* ---- GGUF file limits ---- */

static void a_tensor_count_one_past_kiln_max_tensors_is_refused(void) {
    image im = {0};
    size_t size;
    uint8_t *p;
    put_header(&im, KILN_MAX_TENSORS + 1ull, 0);
    p = with_zeros(&im, (KILN_MAX_TENSORS + 1ull) * 40, &size); /* room enough for every tensor info */
    expect_refused(p, size,
                   "tensor count 65537 at byte offset 8 exceeds the limit of 65536 (KILN_MAX_TENSORS)");
    free(p);
    free(im.p);
}

static void a_kv_count_one_past_kiln_max_kvs_is_refused(void) {
    image im = {0};
    size_t size;
    uint8_t *p;
    put_header(&im, 0, KILN_MAX_KVS + 1ull);
    p = with_zeros(&im, (KILN_MAX_KVS + 1ull) * 20, &size);
    expect_refused(p, size, "kv count 65537 at byte offset 16 exceeds the limit of 65536 (KILN_MAX_KVS)");
    free(p);
    free(im.p);
}

static void a_string_one_byte_past_kiln_max_string_bytes_is_refused(void) {
    image im = {0};
    size_t size;
    uint8_t *p;
    put_header(&im, 0, 1);
    put_str(&im, "general.description");
    put_u32(&im, KILN_GGUF_STRING);
    put_u64(&im, KILN_MAX_STRING_BYTES + 1ull);
    p = with_zeros(&im, KILN_MAX_STRING_BYTES + 1ull, &size);
    expect_refused(p, size,
                   "string length 16777217 at byte offset 55 exceeds the limit of 16777216 bytes "
                   "(KILN_MAX_STRING_BYTES)");
    free(p);
    free(im.p);
}

static void a_string_array_element_past_kiln_max_string_bytes_is_refused(void) {
    image im = {0};
    size_t size;
    uint8_t *p;
    put_header(&im, 0, 1);
    put_str(&im, "tokenizer.ggml.tokens");
    put_u32(&im, KILN_GGUF_ARRAY);
    put_u32(&im, KILN_GGUF_STRING);
    put_u64(&im, 2);
    put_str(&im, "a");
    put_u64(&im, KILN_MAX_STRING_BYTES + 1ull);
    p = with_zeros(&im, KILN_MAX_STRING_BYTES + 1ull, &size);
    expect_refused(p, size,
                   "string 1 has length 16777217 at byte offset 78, over the limit of 16777216 bytes");
    free(p);
    free(im.p);
}

static void an_array_one_past_kiln_max_array_len_is_refused(void) {
    image im = {0};
    size_t size;
    uint8_t *p;
    put_header(&im, 0, 1);
    put_str(&im, "test.bytes");
    put_u32(&im, KILN_GGUF_ARRAY);
    put_u32(&im, KILN_GGUF_UINT8);
    put_u64(&im, KILN_MAX_ARRAY_LEN + 1ull);
    p = with_zeros(&im, KILN_MAX_ARRAY_LEN + 1ull, &size);
    expect_refused(p, size,
                   "array length 16777217 at byte offset 50 exceeds the limit of 16777216 elements "
                   "(KILN_MAX_ARRAY_LEN)");
    free(p);
    free(im.p);
}

/* Two UINT64 arrays of KILN_MAX_ARRAY_LEN elements (128 MiB each, their data 8-byte aligned so that the
 * reader keeps them in place) take the metadata past 256 MiB. The file is sparse and only its headers are
 * ever read. */
static void metadata_past_kiln_max_metadata_bytes_is_refused(void) {
    const char *path = KILN_TEST_TMP "/limits_metadata.gguf";
    const uint64_t data_bytes = (uint64_t)KILN_MAX_ARRAY_LEN * 8;
    image head = {0}, kv = {0};
    kiln_gguf *g = NULL;
    int fd;
    bool written;
    put_header(&head, 0, 2);
    put_str(&kv, "big.arr0");
    put_u32(&kv, KILN_GGUF_ARRAY);
    put_u32(&kv, KILN_GGUF_UINT64);
    put_u64(&kv, KILN_MAX_ARRAY_LEN);
    CHECK_EQ_INT((head.len + kv.len) % 8, 0);
    fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    CHECK(fd >= 0);
    if (fd < 0) return;
    written = pwrite(fd, head.p, head.len, 0) == (ssize_t)head.len &&
              pwrite(fd, kv.p, kv.len, (off_t)head.len) == (ssize_t)kv.len;
    kv.p[8 + 7] = '1'; /* "big.arr1" */
    written = written &&
              pwrite(fd, kv.p, kv.len, (off_t)(head.len + kv.len + data_bytes)) == (ssize_t)kv.len &&
              ftruncate(fd, (off_t)(head.len + 2 * (kv.len + data_bytes))) == 0;
    close(fd);
    CHECK(written);
    CHECK_STATUS(kiln_gguf_open(path, &g), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS(
        "kv 1 ends at byte offset 268435544, past the limit of 268435456 bytes for the header, "
        "metadata and tensor infos (KILN_MAX_METADATA_BYTES)");
    kiln_gguf_close(g);
    remove(path);
    free(head.p);
    free(kv.p);
}

/* ---- Files exactly at the count limits: opened, and the peak memory of opening them. ---- */

/* Open img through the counting allocator; the peak of live bytes, or 0 when the open failed. */
static size_t peak_while_opening(const uint8_t *img, size_t size) {
    kiln_gguf *g = NULL;
    size_t peak;
    harness_count_allocations();
    CHECK_OK(kiln_gguf_open_memory(img, size, &g));
    peak = harness_peak_bytes();
    kiln_gguf_close(g);
    CHECK_EQ_INT(harness_live_blocks(), 0);
    kiln_set_allocator(NULL);
    return g ? peak : 0;
}

/* The multiple docs/security.md states: opening a GGUF file allocates at most this many times the file's
 * size, plus a constant for the tables' first chunks. */
#define OPEN_MULTIPLE 16
#define OPEN_CONSTANT (64 * 1024)

static void check_multiple(const char *what, size_t peak, size_t size) {
    printf("     %s: file %zu bytes, peak allocated %zu bytes (%.2fx)\n", what, size, peak,
           (double)peak / (double)size);
    if (peak > OPEN_MULTIPLE * size + OPEN_CONSTANT)
        harness_fail(__FILE__, __LINE__, "%s: %zu bytes allocated for a %zu-byte file, over %dx + %d", what,
                     peak, size, OPEN_MULTIPLE, OPEN_CONSTANT);
}

/* KILN_MAX_KVS keys, each the smallest kv there is with a unique key: a 3-byte key and a UINT8. */
static void kiln_max_kvs_smallest_kvs_are_opened_within_the_stated_memory(void) {
    image im = {0};
    put_header(&im, 0, KILN_MAX_KVS);
    for (uint32_t i = 0; i < KILN_MAX_KVS; i++) {
        char key[4] = {(char)('A' + i % 64), (char)('A' + i / 64 % 64), (char)('A' + i / 4096), 0};
        uint8_t v = 1;
        put_str(&im, key);
        put_u32(&im, KILN_GGUF_UINT8);
        put(&im, &v, 1);
    }
    check_multiple("65536 one-byte kvs", peak_while_opening(im.p, im.len), im.len);
    free(im.p);
}

/* KILN_MAX_TENSORS tensor infos of one I8 element each, all at data offset 0 (overlapping data is not an
 * error), with 3-byte names: the smallest tensor info there is. */
static void kiln_max_tensors_smallest_tensor_infos_are_opened_within_the_stated_memory(void) {
    image im = {0};
    uint8_t pad[32] = {0};
    put_header(&im, KILN_MAX_TENSORS, 0);
    for (uint32_t i = 0; i < KILN_MAX_TENSORS; i++) {
        char name[4] = {(char)('A' + i % 64), (char)('A' + i / 64 % 64), (char)('A' + i / 4096), 0};
        put_str(&im, name);
        put_u32(&im, 1);
        put_u64(&im, 1);
        put_u32(&im, KILN_TYPE_I8);
        put_u64(&im, 0);
    }
    if (im.len % 32) put(&im, pad, 32 - im.len % 32); /* up to the alignment */
    put(&im, pad, 32);                                /* the data section */
    check_multiple("65536 one-byte tensors", peak_while_opening(im.p, im.len), im.len);
    free(im.p);
}

/* A string array of 2^20 empty strings, the smallest string there is, and a misaligned UINT32 array
 * (which the reader copies to align). */
static void arrays_of_the_smallest_elements_are_opened_within_the_stated_memory(void) {
    image im = {0};
    const uint64_t n = 1u << 20;
    put_header(&im, 0, 2);
    put_str(&im, "a");
    put_u32(&im, KILN_GGUF_ARRAY);
    put_u32(&im, KILN_GGUF_STRING);
    put_u64(&im, n);
    for (uint64_t j = 0; j < n; j++)
        put_u64(&im, 0);
    put_str(&im, "b");
    put_u32(&im, KILN_GGUF_ARRAY);
    put_u32(&im, KILN_GGUF_UINT32);
    put_u64(&im, n);
    CHECK(im.len % 4 != 0); /* the buffer is malloc-aligned, so the elements are misaligned */
    for (uint64_t j = 0; j < n; j++)
        put_u32(&im, (uint32_t)j);
    check_multiple("2^20 empty strings and 2^20 UINT32", peak_while_opening(im.p, im.len), im.len);
    free(im.p);
}

/* ---- The vocabulary ---- */

/* A GGUF image holding a llama (SPM) vocabulary of n one-byte tokens. */
static void put_vocab(image *im, uint64_t n) {
    put_header(im, 0, 2);
    put_str(im, "tokenizer.ggml.model");
    put_u32(im, KILN_GGUF_STRING);
    put_str(im, "llama");
    put_str(im, "tokenizer.ggml.tokens");
    put_u32(im, KILN_GGUF_ARRAY);
    put_u32(im, KILN_GGUF_STRING);
    put_u64(im, n);
    for (uint64_t j = 0; j < n; j++) {
        char t[2] = {(char)(1 + j % 255), 0};
        put_str(im, t);
    }
}

static void a_vocabulary_one_past_kiln_max_vocab_is_refused(void) {
    image im = {0};
    kiln_gguf *g = NULL;
    kiln_vocab *v = NULL;
    put_vocab(&im, KILN_MAX_VOCAB + 1ull);
    CHECK_OK(kiln_gguf_open_memory(im.p, im.len, &g));
    if (g) CHECK_STATUS(kiln_vocab_create(g, &v), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS(
        "'tokenizer.ggml.tokens' has 1048577 entries, over the limit of 1048576 (KILN_MAX_VOCAB)");
    CHECK(v == NULL);
    kiln_gguf_close(g);
    free(im.p);
}

/* The vocabulary's tables (texts, scores, types, the hash index, byte tokens) for KILN_MAX_VOCAB of the
 * smallest tokens; the stated multiple covers opening the file and building the vocabulary together. */
#define VOCAB_MULTIPLE 16

static void a_vocabulary_at_kiln_max_vocab_is_built_within_the_stated_memory(void) {
    image im = {0};
    kiln_gguf *g = NULL;
    kiln_vocab *v = NULL;
    size_t peak;
    put_vocab(&im, KILN_MAX_VOCAB);
    harness_count_allocations();
    CHECK_OK(kiln_gguf_open_memory(im.p, im.len, &g));
    if (g) CHECK_OK(kiln_vocab_create(g, &v));
    peak = harness_peak_bytes();
    if (v) CHECK_EQ_INT(kiln_vocab_n_tokens(v), KILN_MAX_VOCAB);
    kiln_vocab_destroy(v);
    kiln_gguf_close(g);
    CHECK_EQ_INT(harness_live_blocks(), 0);
    kiln_set_allocator(NULL);
    printf("     a vocabulary of 2^20 one-byte tokens: file %zu bytes, peak allocated %zu bytes (%.2fx)\n",
           im.len, peak, (double)peak / (double)im.len);
    if (peak > VOCAB_MULTIPLE * im.len + OPEN_CONSTANT)
        harness_fail(__FILE__, __LINE__, "%zu bytes allocated for a %zu-byte vocabulary, over %dx", peak,
                     im.len, VOCAB_MULTIPLE);
    free(im.p);
}

/* ---- The context: a model's context_length, and what a caller asks for ---- */

/* stories260K with llama.context_length replaced, written to path. */
static kiln_status write_model_with_context_length(const char *path, uint32_t n_ctx) {
    kiln_gguf *src = NULL;
    kiln_gguf_writer *w = NULL;
    kiln_status s = kiln_gguf_open(KILN_MODEL_PATH, &src);
    if (!s) s = kiln_gguf_writer_create(&w);
    if (!s) s = kiln_gguf_writer_set_alignment(w, kiln_gguf_alignment(src));
    for (int64_t i = 0; !s && i < kiln_gguf_kv_count(src); i++) {
        if (strcmp(kiln_gguf_kv_key(src, i), "llama.context_length") == 0)
            s = kiln_gguf_writer_add_scalar(w, "llama.context_length", KILN_GGUF_UINT32, &n_ctx);
        else
            s = kiln_gguf_writer_copy_kv(w, src, i);
    }
    for (int64_t i = 0; !s && i < kiln_gguf_tensor_count(src); i++) {
        kiln_tensor_info t;
        s = kiln_gguf_tensor_info(src, i, &t);
        if (!s) s = kiln_gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.ne, t.data);
    }
    if (!s) s = kiln_gguf_writer_write_file(w, path);
    kiln_gguf_writer_destroy(w);
    kiln_gguf_close(src);
    return s;
}

static void a_context_length_one_past_kiln_max_ctx_is_refused(void) {
    const char *path = KILN_TEST_TMP "/limits_ctx.gguf";
    kiln_model *m = NULL;
    CHECK_OK(write_model_with_context_length(path, KILN_MAX_CTX + 1u));
    CHECK_STATUS(kiln_model_load(path, &m), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("key 'llama.context_length' = 16777217 is outside 1..16777216");
    kiln_model_destroy(m);
    remove(path);
}

/* A caller's n_ctx and n_batch past their limits, and a batch past KILN_MAX_BATCH. */
static void a_context_or_batch_past_its_limit_is_refused(void) {
    kiln_model *m = NULL;
    kiln_ctx *c = NULL;
    kiln_batch b;
    kiln_ctx_params p = kiln_ctx_params_default();
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    p.n_ctx = KILN_MAX_CTX + 1;
    CHECK_STATUS(kiln_ctx_create(m, &p, &c), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("n_ctx 16777217 or n_batch 0 is over its limit (KILN_MAX_CTX 16777216");
    p = kiln_ctx_params_default();
    p.n_ctx = 64;
    p.n_batch = KILN_MAX_BATCH + 1;
    CHECK_STATUS(kiln_ctx_create(m, &p, &c), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("KILN_MAX_BATCH 16777216");
    CHECK(c == NULL);
    CHECK_STATUS(kiln_batch_init(KILN_MAX_BATCH + 1, &b), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("capacity 16777217 is not in 1..16777216 (KILN_MAX_BATCH)");
    kiln_model_destroy(m);
}

int main(void) {
    RUN(a_tensor_count_one_past_kiln_max_tensors_is_refused);
    RUN(a_kv_count_one_past_kiln_max_kvs_is_refused);
    RUN(a_string_one_byte_past_kiln_max_string_bytes_is_refused);
    RUN(a_string_array_element_past_kiln_max_string_bytes_is_refused);
    RUN(an_array_one_past_kiln_max_array_len_is_refused);
    RUN(metadata_past_kiln_max_metadata_bytes_is_refused);
    RUN(kiln_max_kvs_smallest_kvs_are_opened_within_the_stated_memory);
    RUN(kiln_max_tensors_smallest_tensor_infos_are_opened_within_the_stated_memory);
    RUN(arrays_of_the_smallest_elements_are_opened_within_the_stated_memory);
    RUN(a_vocabulary_one_past_kiln_max_vocab_is_refused);
    RUN(a_vocabulary_at_kiln_max_vocab_is_built_within_the_stated_memory);
    RUN(a_context_length_one_past_kiln_max_ctx_is_refused);
    RUN(a_context_or_batch_past_its_limit_is_refused);
    return harness_finish();
}
