/*
 * test_gguf_malformed.c - the malformed-GGUF corpus. Every case starts from the small valid file of
 * gguf_craft.h (written by the writer), patches or truncates it, and pins the exact status and the part of
 * the message that names the field. Then: every prefix of the valid file is rejected without crashing,
 * and failing each allocation in turn yields KILN_E_NOMEM (LeakSanitizer checks nothing leaks).
 */
#include "gguf_craft.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

static uint8_t *base;
static size_t base_size;

/* A private copy of the valid craft file to patch. */
static uint8_t *copy_base(void) {
    uint8_t *p = malloc(base_size);
    memcpy(p, base, base_size);
    return p;
}

/* Open the first `size` bytes of img (copied into a buffer of exactly that size, so any overread is an
 * ASan error) and expect `want` with a message containing `fragment`. Frees img. */
static void expect_rejected_at(uint8_t *img, size_t size, kiln_status want, const char *fragment, int line) {
    uint8_t *exact = malloc(size ? size : 1);
    kiln_gguf *g = (kiln_gguf *)1;
    kiln_status s;
    if (size) memcpy(exact, img, size);
    s = kiln_gguf_open_memory(exact, size, &g);
    if (s != want)
        harness_fail(__FILE__, line, "status %s, expected %s (%s)", kiln_status_name(s),
                     kiln_status_name(want), kiln_last_error());
    else if (!strstr(kiln_last_error(), fragment))
        harness_fail(__FILE__, line, "error \"%s\" does not mention \"%s\"", kiln_last_error(), fragment);
    if (g != NULL) harness_fail(__FILE__, line, "a rejected open must set *out to NULL");
    if (s == KILN_OK) kiln_gguf_close(g);
    free(exact);
    free(img);
}

#define EXPECT_REJECTED(img, size, want, fragment) expect_rejected_at(img, size, want, fragment, __LINE__)

/* Positions of fields, found by key or tensor name. */
static size_t kv_type(const char *key) {
    return craft_kv_type_at(base, base_size, key);
}
static size_t kv_value(const char *key) {
    return kv_type(key) + 4;
}
static size_t key_length(const char *key) {
    return craft_find(base, base_size, key);
}
static size_t tensor_ndims(const char *name) {
    return craft_tensor_at(base, base_size, name);
}
static size_t tensor_dim(const char *name, int d) {
    return tensor_ndims(name) + 4 + 8 * (size_t)d;
}
static size_t tensor_type(const char *name, int n_dims) {
    return tensor_dim(name, n_dims);
}
static size_t tensor_offset(const char *name, int n_dims) {
    return tensor_type(name, n_dims) + 4;
}

#define LAST_TENSOR "blk.0.ffn_out.weight"

/* ---- The valid file itself. ---- */

static void the_craft_file_is_valid(void) {
    kiln_gguf *g = NULL;
    CHECK_OK(kiln_gguf_open_memory(base, base_size, &g));
    CHECK_EQ_INT(kiln_gguf_kv_count(g), CRAFT_N_KV);
    CHECK_EQ_INT(kiln_gguf_tensor_count(g), CRAFT_N_TENSORS);
    kiln_gguf_close(g);
}

/* ---- Truncation in every section. ---- */

static void rejects_truncation_inside_the_magic(void) {
    EXPECT_REJECTED(copy_base(), 0, KILN_E_FORMAT,
                    "truncated file: the magic at byte offset 0 needs 4 bytes, 0");
    EXPECT_REJECTED(copy_base(), 2, KILN_E_FORMAT, "truncated file: the magic");
}

static void rejects_truncation_inside_the_version(void) {
    EXPECT_REJECTED(copy_base(), 6, KILN_E_FORMAT, "truncated file: the version at byte offset 4");
}

static void rejects_truncation_inside_the_counts(void) {
    EXPECT_REJECTED(copy_base(), 12, KILN_E_FORMAT, "truncated file: the tensor count at byte offset 8");
    EXPECT_REJECTED(copy_base(), 20, KILN_E_FORMAT, "truncated file: the kv count at byte offset 16");
}

static void rejects_truncation_inside_a_key_length(void) {
    EXPECT_REJECTED(copy_base(), key_length("test.str") + 3, KILN_E_FORMAT,
                    "truncated file: the key length of kv 11");
}

static void rejects_truncation_inside_key_bytes(void) {
    EXPECT_REJECTED(copy_base(), key_length("test.str") + 8 + 2, KILN_E_FORMAT, "kv 11 at byte offset");
    EXPECT_REJECTED(copy_base(), key_length("test.str") + 8 + 2, KILN_E_FORMAT,
                    "key length 8 exceeds the 2 bytes remaining");
}

static void rejects_truncation_inside_a_value_type(void) {
    EXPECT_REJECTED(copy_base(), kv_type("test.str") + 1, KILN_E_FORMAT,
                    "truncated file: the value type of key 'test.str'");
}

static void rejects_truncation_inside_a_scalar_value(void) {
    EXPECT_REJECTED(copy_base(), kv_value("test.f64") + 7, KILN_E_FORMAT,
                    "truncated file: the FLOAT64 value of key 'test.f64'");
}

static void rejects_truncation_inside_a_string_length(void) {
    EXPECT_REJECTED(copy_base(), kv_value("test.str") + 4, KILN_E_FORMAT,
                    "truncated file: the string length of key 'test.str'");
}

static void rejects_truncation_inside_string_bytes(void) {
    EXPECT_REJECTED(copy_base(), kv_value("test.str") + 8 + 3, KILN_E_FORMAT,
                    "key 'test.str': string length 5 at byte offset");
}

static void rejects_truncation_inside_an_array_element_type(void) {
    EXPECT_REJECTED(copy_base(), kv_value("test.arr_i32") + 2, KILN_E_FORMAT,
                    "truncated file: the array element type of key 'test.arr_i32'");
}

static void rejects_truncation_inside_an_array_length(void) {
    EXPECT_REJECTED(copy_base(), kv_value("test.arr_i32") + 4 + 5, KILN_E_FORMAT,
                    "truncated file: the array length of key 'test.arr_i32'");
}

static void rejects_truncation_inside_numeric_array_elements(void) {
    EXPECT_REJECTED(copy_base(), kv_value("test.arr_i32") + 12 + 10, KILN_E_FORMAT,
                    "key 'test.arr_i32': array of 3 INT32 elements");
}

static void rejects_truncation_inside_string_array_elements(void) {
    size_t elems = kv_value("test.arr_str") + 12;
    /* "abcdefghijklmnop" takes 8 + 16 bytes, "" takes 8; cut inside the length of "xyz", then its bytes. */
    EXPECT_REJECTED(copy_base(), elems + 24 + 8 + 4, KILN_E_FORMAT,
                    "truncated file: the length of string 2 of key 'test.arr_str'");
    EXPECT_REJECTED(copy_base(), elems + 24 + 8 + 8 + 1, KILN_E_FORMAT,
                    "key 'test.arr_str': string 2 has length 3");
}

static void rejects_truncation_inside_a_tensor_name(void) {
    size_t at = craft_find(base, base_size, LAST_TENSOR);
    EXPECT_REJECTED(copy_base(), at + 5, KILN_E_FORMAT, "truncated file: the name length of tensor 3");
    EXPECT_REJECTED(copy_base(), at + 8 + 4, KILN_E_FORMAT, "tensor 3 at byte offset");
}

static void rejects_truncation_inside_n_dims(void) {
    EXPECT_REJECTED(copy_base(), tensor_ndims(LAST_TENSOR) + 1, KILN_E_FORMAT,
                    "truncated file: n_dims of tensor 'blk.0.ffn_out.weight'");
}

static void rejects_truncation_inside_dims(void) {
    EXPECT_REJECTED(copy_base(), tensor_dim(LAST_TENSOR, 0) + 7, KILN_E_FORMAT,
                    "truncated file: dimension ne[0] of tensor 'blk.0.ffn_out.weight'");
}

static void rejects_truncation_inside_a_tensor_type(void) {
    EXPECT_REJECTED(copy_base(), tensor_type(LAST_TENSOR, 1) + 3, KILN_E_FORMAT,
                    "truncated file: the type of tensor 'blk.0.ffn_out.weight'");
}

static void rejects_truncation_inside_a_tensor_offset(void) {
    EXPECT_REJECTED(copy_base(), tensor_offset(LAST_TENSOR, 1) + 6, KILN_E_FORMAT,
                    "truncated file: the data offset of tensor 'blk.0.ffn_out.weight'");
}

static void rejects_truncation_inside_the_header_padding(void) {
    size_t header_end = tensor_offset(LAST_TENSOR, 1) + 8;
    CHECK(header_end % 32 != 0); /* there is padding to cut into */
    EXPECT_REJECTED(copy_base(), header_end + 1, KILN_E_FORMAT,
                    "tensor 'blk.0.attn_q.weight': data offset 0 + 32 bytes exceeds data section size 0");
}

static void rejects_truncation_inside_the_data_section(void) {
    EXPECT_REJECTED(
        copy_base(), base_size - 1, KILN_E_FORMAT,
        "tensor 'blk.0.ffn_out.weight': data offset 160 + 32 bytes exceeds data section size 191");
}

/* ---- Counts and lengths larger than the file. ---- */

static void rejects_a_huge_kv_count_before_allocating(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, 16, (uint64_t)1 << 60);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "kv count 1152921504606846976 at byte offset 16 cannot fit");
    p = copy_base();
    craft_put_u64(p, 16, UINT64_MAX);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "kv count 18446744073709551615");
}

static void rejects_a_huge_tensor_count_before_allocating(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, 8, UINT64_MAX / 2);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT,
                    "tensor count 9223372036854775807 at byte offset 8 cannot fit");
}

static void rejects_a_tensor_count_the_bytes_after_the_metadata_cannot_hold(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, 8, 20); /* 20 * 33 fits the file but not what remains after the kvs */
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "tensor count 20 cannot fit in the");
}

static void rejects_a_huge_string_length(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, kv_value("test.str"), (uint64_t)1 << 63);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "key 'test.str': string length 9223372036854775808");
}

static void rejects_a_huge_numeric_array_length(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, kv_value("test.arr_i32") + 4, (uint64_t)1 << 62); /* * 4 bytes overflows */
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "array of 4611686018427387904 INT32 elements");
}

static void rejects_a_huge_string_array_length(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, kv_value("test.arr_str") + 4, UINT64_MAX);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "array of 18446744073709551615 strings");
}

static void rejects_a_key_longer_than_64_kib(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, key_length("test.u8"), 65537);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "key length 65537 exceeds the limit of 65536 bytes");
}

static void rejects_an_empty_key(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, key_length("test.u8"), 0);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "kv 3 at byte offset");
    p = copy_base();
    craft_put_u64(p, key_length("test.u8"), 0);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "has an empty key");
}

static void rejects_a_key_containing_a_nul_byte(void) {
    uint8_t *p = copy_base();
    p[key_length("test.u8") + 8 + 4] = 0;
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "kv 3 at byte offset 341: the key contains a NUL byte");
}

static void rejects_an_empty_tensor_name(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, craft_find(base, base_size, "blk.0.attn_k.weight"), 0);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "tensor 1 at byte offset");
}

/* ---- Types. ---- */

static void rejects_an_unknown_value_type(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, kv_type("test.u8"), 13);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "key 'test.u8': unknown value type 13 at byte offset");
}

static void rejects_an_unknown_array_element_type(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, kv_value("test.arr_i32"), 0xffffffffu);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "key 'test.arr_i32': unknown array element type 4294967295");
}

static void rejects_nested_arrays_as_unsupported(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, kv_value("test.arr_i32"), KILN_GGUF_ARRAY);
    EXPECT_REJECTED(p, base_size, KILN_E_UNSUPPORTED, "key 'test.arr_i32': nested arrays (ARRAY of ARRAY");
}

static void rejects_a_bool_that_is_neither_0_nor_1(void) {
    uint8_t *p = copy_base();
    p[kv_value("test.bool")] = 2;
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "key 'test.bool': BOOL value 2");
}

static void rejects_an_unknown_tensor_type(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, tensor_type("blk.0.attn_q.weight", 2), 4); /* the retired Q4_2 */
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "tensor 'blk.0.attn_q.weight': unknown tensor type 4");
    p = copy_base();
    craft_put_u32(p, tensor_type("blk.0.attn_q.weight", 2), 0x80000000u);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "unknown tensor type 2147483648");
}

static void rejects_a_row_length_not_divisible_by_the_block_size(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, tensor_dim("blk.0.attn_k.weight", 0), 33);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT,
                    "tensor 'blk.0.attn_k.weight': row length ne[0] = 33 is not a multiple of the q8_0 block "
                    "size 32");
}

/* ---- Shapes. ---- */

static void rejects_n_dims_0_and_5(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, tensor_ndims("blk.0.attn_q.weight"), 0);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "tensor 'blk.0.attn_q.weight': n_dims 0 at byte offset");
    p = copy_base();
    craft_put_u32(p, tensor_ndims("blk.0.attn_q.weight"), 5);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "n_dims 5 at byte offset");
}

static void rejects_a_zero_dimension(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, tensor_dim("blk.0.attn_q.weight", 1), 0);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT,
                    "tensor 'blk.0.attn_q.weight': dimension ne[1] at byte offset");
}

static void rejects_a_dimension_above_int64_max(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, tensor_dim("blk.0.attn_q.weight", 0), (uint64_t)1 << 63);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "dimension ne[0] = 9223372036854775808 exceeds INT64_MAX");
}

static void rejects_dims_whose_product_overflows_int64(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, tensor_dim("blk.0.attn_q.weight", 0), (uint64_t)1 << 40);
    craft_put_u64(p, tensor_dim("blk.0.attn_q.weight", 1), (uint64_t)1 << 40);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT,
                    "element count of shape [1099511627776, 1099511627776, 1, 1] "
                    "overflows int64");
}

static void rejects_a_byte_size_that_overflows(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, tensor_dim("blk.0.attn_q.weight", 0), (uint64_t)1 << 61);
    craft_put_u64(p, tensor_dim("blk.0.attn_q.weight", 1), 2); /* 2^62 elements of 4 bytes */
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT,
                    "byte size of f32 shape [2305843009213693952, 2, 1, 1] overflows");
}

/* ---- Offsets. ---- */

static void rejects_a_misaligned_offset(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, tensor_offset("blk.0.attn_k.weight", 2), 33);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT,
                    "tensor 'blk.0.attn_k.weight': data offset 33 is not a multiple of the alignment 32");
}

static void rejects_an_offset_outside_the_data_section(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, tensor_offset("blk.0.attn_k.weight", 2), 4096);
    EXPECT_REJECTED(
        p, base_size, KILN_E_FORMAT,
        "tensor 'blk.0.attn_k.weight': data offset 4096 + 68 bytes exceeds data section size 192");
}

static void rejects_an_offset_plus_size_that_overflows(void) {
    uint8_t *p = copy_base();
    craft_put_u64(p, tensor_offset("blk.0.attn_k.weight", 2), UINT64_MAX - 31);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT,
                    "tensor 'blk.0.attn_k.weight': data offset 18446744073709551584 + 68 bytes overflows");
}

/* ---- Duplicates. ---- */

static void rejects_a_duplicate_key(void) {
    uint8_t *p = copy_base();
    p[key_length("test.i32") + 8 + 5] = 'f'; /* test.i32 becomes test.f32, which follows it */
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "duplicate key 'test.f32' (kv 5 at byte offset");
}

static void rejects_a_duplicate_tensor_name(void) {
    uint8_t *p = copy_base();
    p[craft_find(base, base_size, "blk.0.attn_k.weight") + 8 + 11] = 'q';
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT,
                    "duplicate tensor name 'blk.0.attn_q.weight' (tensor 1 at byte offset");
}

/* ---- general.alignment. ---- */

static void rejects_general_alignment_of_the_wrong_type(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, kv_type("general.alignment"), KILN_GGUF_INT32);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "general.alignment must be UINT32, found INT32");
}

static void rejects_general_alignment_zero(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, kv_value("general.alignment"), 0);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "general.alignment is 0");
}

static void rejects_general_alignment_not_a_power_of_two(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, kv_value("general.alignment"), 48);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "general.alignment 48 is not a power of two");
}

static void checks_offsets_against_a_larger_declared_alignment(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, kv_value("general.alignment"), 64);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT,
                    "tensor 'blk.0.attn_k.weight': data offset 32 is not a multiple of the alignment 64");
}

/* ---- Magic and version. ---- */

static void rejects_a_wrong_magic(void) {
    uint8_t *p = copy_base();
    memcpy(p, "GGML", 4);
    EXPECT_REJECTED(p, base_size, KILN_E_FORMAT, "bad magic 47 47 4d 4c at byte offset 0");
}

static void rejects_version_1_as_unsupported(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, 4, 1);
    EXPECT_REJECTED(p, base_size, KILN_E_UNSUPPORTED, "GGUF version 1 is not supported");
}

static void rejects_version_99_as_unsupported(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, 4, 99);
    EXPECT_REJECTED(p, base_size, KILN_E_UNSUPPORTED, "GGUF version 99 is not supported");
    p = copy_base();
    craft_put_u32(p, 4, 0);
    EXPECT_REJECTED(p, base_size, KILN_E_UNSUPPORTED, "GGUF version 0 is not supported");
}

static void rejects_a_big_endian_file_as_unsupported(void) {
    uint8_t *p = copy_base();
    craft_put_u32(p, 4, 0x03000000u);
    EXPECT_REJECTED(p, base_size, KILN_E_UNSUPPORTED, "looks like a big-endian file");
}

/* ---- Typed access to values of another type. ---- */

static void typed_getters_reject_a_wrong_array_element_type(void) {
    kiln_gguf *g = NULL;
    kiln_str s;
    uint32_t u;
    CHECK_OK(kiln_gguf_open_memory(base, base_size, &g));
    CHECK_STATUS(kiln_gguf_arr_str(g, kiln_gguf_find_key(g, "test.arr_i32"), 0, &s), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("key 'test.arr_i32' has type ARRAY of INT32, not ARRAY of STRING");
    CHECK_STATUS(kiln_gguf_get_u32(g, "test.arr_str", &u), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("key 'test.arr_str' has type ARRAY of STRING, not UINT32");
    CHECK_STATUS(kiln_gguf_get_str(g, "test.arr_str", &s), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("ARRAY of STRING, not STRING");
    CHECK(kiln_gguf_arr_data(g, kiln_gguf_find_key(g, "test.arr_str")) == NULL);
    CHECK_STATUS(kiln_gguf_arr_str(g, kiln_gguf_find_key(g, "test.arr_str"), 3, &s), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("string index 3 is out of range");
    kiln_gguf_close(g);
}

/* ---- Sweeps. ---- */

static void every_truncation_of_a_valid_file_is_rejected(void) {
    int accepted = 0;
    for (size_t n = 0; n < base_size; n++) {
        uint8_t *exact = malloc(n ? n : 1);
        kiln_gguf *g = NULL;
        memcpy(exact, base, n);
        kiln_status s = kiln_gguf_open_memory(exact, n, &g);
        if (s == KILN_OK) {
            accepted++;
            harness_fail(__FILE__, __LINE__, "prefix of %zu bytes was accepted", n);
            kiln_gguf_close(g);
        } else if (s != KILN_E_FORMAT) {
            harness_fail(__FILE__, __LINE__, "prefix of %zu bytes: %s (%s)", n, kiln_status_name(s),
                         kiln_last_error());
        }
        free(exact);
    }
    CHECK_EQ_INT(accepted, 0);
}

static kiln_gguf *swept;
static const char *swept_path;

static kiln_status open_base_from_memory(void *user) {
    (void)user;
    return kiln_gguf_open_memory(base, base_size, &swept);
}

static kiln_status open_base_from_file(void *user) {
    (void)user;
    return kiln_gguf_open(swept_path, &swept);
}

static void close_swept(void *user) {
    (void)user;
    kiln_gguf_close(swept);
    swept = NULL;
}

static void every_allocation_failure_while_opening_is_reported_as_nomem(void) {
    harness_sweep sw = {"kiln_gguf_open_memory", NULL, open_base_from_memory, close_swept, NULL};
    CHECK(harness_alloc_sweep(&sw) > 3);
}

static void every_allocation_failure_while_opening_a_file_is_reported_as_nomem(void) {
    harness_sweep sw = {"kiln_gguf_open", NULL, open_base_from_file, close_swept, NULL};
    FILE *f;
    swept_path = KILN_TEST_TMP "/malformed_alloc.gguf";
    f = fopen(swept_path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fwrite(base, 1, base_size, f);
    fclose(f);
    CHECK(harness_alloc_sweep(&sw) > 3);
    remove(swept_path);
}

int main(void) {
    base = craft_build(&base_size);
    if (!base) return 1;
    RUN(the_craft_file_is_valid);
    RUN(rejects_truncation_inside_the_magic);
    RUN(rejects_truncation_inside_the_version);
    RUN(rejects_truncation_inside_the_counts);
    RUN(rejects_truncation_inside_a_key_length);
    RUN(rejects_truncation_inside_key_bytes);
    RUN(rejects_truncation_inside_a_value_type);
    RUN(rejects_truncation_inside_a_scalar_value);
    RUN(rejects_truncation_inside_a_string_length);
    RUN(rejects_truncation_inside_string_bytes);
    RUN(rejects_truncation_inside_an_array_element_type);
    RUN(rejects_truncation_inside_an_array_length);
    RUN(rejects_truncation_inside_numeric_array_elements);
    RUN(rejects_truncation_inside_string_array_elements);
    RUN(rejects_truncation_inside_a_tensor_name);
    RUN(rejects_truncation_inside_n_dims);
    RUN(rejects_truncation_inside_dims);
    RUN(rejects_truncation_inside_a_tensor_type);
    RUN(rejects_truncation_inside_a_tensor_offset);
    RUN(rejects_truncation_inside_the_header_padding);
    RUN(rejects_truncation_inside_the_data_section);
    RUN(rejects_a_huge_kv_count_before_allocating);
    RUN(rejects_a_huge_tensor_count_before_allocating);
    RUN(rejects_a_tensor_count_the_bytes_after_the_metadata_cannot_hold);
    RUN(rejects_a_huge_string_length);
    RUN(rejects_a_huge_numeric_array_length);
    RUN(rejects_a_huge_string_array_length);
    RUN(rejects_a_key_longer_than_64_kib);
    RUN(rejects_an_empty_key);
    RUN(rejects_a_key_containing_a_nul_byte);
    RUN(rejects_an_empty_tensor_name);
    RUN(rejects_an_unknown_value_type);
    RUN(rejects_an_unknown_array_element_type);
    RUN(rejects_nested_arrays_as_unsupported);
    RUN(rejects_a_bool_that_is_neither_0_nor_1);
    RUN(rejects_an_unknown_tensor_type);
    RUN(rejects_a_row_length_not_divisible_by_the_block_size);
    RUN(rejects_n_dims_0_and_5);
    RUN(rejects_a_zero_dimension);
    RUN(rejects_a_dimension_above_int64_max);
    RUN(rejects_dims_whose_product_overflows_int64);
    RUN(rejects_a_byte_size_that_overflows);
    RUN(rejects_a_misaligned_offset);
    RUN(rejects_an_offset_outside_the_data_section);
    RUN(rejects_an_offset_plus_size_that_overflows);
    RUN(rejects_a_duplicate_key);
    RUN(rejects_a_duplicate_tensor_name);
    RUN(rejects_general_alignment_of_the_wrong_type);
    RUN(rejects_general_alignment_zero);
    RUN(rejects_general_alignment_not_a_power_of_two);
    RUN(checks_offsets_against_a_larger_declared_alignment);
    RUN(rejects_a_wrong_magic);
    RUN(rejects_version_1_as_unsupported);
    RUN(rejects_version_99_as_unsupported);
    RUN(rejects_a_big_endian_file_as_unsupported);
    RUN(typed_getters_reject_a_wrong_array_element_type);
    RUN(every_truncation_of_a_valid_file_is_rejected);
    RUN(every_allocation_failure_while_opening_is_reported_as_nomem);
    RUN(every_allocation_failure_while_opening_a_file_is_reported_as_nomem);
    free(base);
    return harness_finish();
}
