/*
 * gguf_craft.h - header-only helpers for the GGUF tests: build the small valid GGUF that the malformed
 * corpus is derived from (with the writer), locate its fields by their key or tensor name, patch
 * little-endian fields. (Allocation failures are swept with harness_alloc_sweep, tests/harness.h.)
 *
 * The small file ("craft file") holds every kind of field the reader validates.
 *   kvs: general.architecture = "llama"; general.description = 200 x 'd' (it places the later kvs past
 *     the bytes the kv count needs, so truncations there reach the field being cut); general.alignment =
 *     32; test.u8 = 200; test.i32 = -5; test.f32 = 1.5; test.bool = true; test.u64 = 2^40; test.f64 =
 *     0.25; test.arr_i32 = [1, 2, 3]; test.arr_str = ["abcdefghijklmnop", "", "xyz"]; test.str = "hello".
 *   tensors: blk.0.attn_q.weight f32 [4, 2]; blk.0.attn_k.weight q8_0 [32, 2]; blk.0.attn_v.weight f16
 *     [3]; blk.0.ffn_out.weight f32 [8] (32 bytes, so the file ends exactly at its last byte).
 */
#ifndef KILN_TEST_GGUF_CRAFT_H
#define KILN_TEST_GGUF_CRAFT_H

#include "harness.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CRAFT_N_KV 12
#define CRAFT_N_TENSORS 4

/* Tensor data of the craft file: deterministic bytes, tensor i byte j = 17 * i + j. */
static inline void craft_tensor_bytes(int64_t i, uint8_t *dst, size_t size) {
    for (size_t j = 0; j < size; j++)
        dst[j] = (uint8_t)(17 * i + (int64_t)j);
}

static uint8_t craft_data[4][68];

/* Add the craft file's keys and tensors to w (tensor data from craft_data). */
static inline void craft_fill_writer(kiln_gguf_writer *w) {
    char desc[201];
    uint8_t u8 = 200, b = 1;
    int32_t i32 = -5, arr[3] = {1, 2, 3};
    uint32_t align = 32;
    uint64_t u64 = (uint64_t)1 << 40;
    float f32 = 1.5f;
    double f64 = 0.25;
    kiln_str strs[3] = {{"abcdefghijklmnop", 16}, {"", 0}, {"xyz", 3}};
    static const int64_t ne_q[2] = {4, 2}, ne_k[2] = {32, 2}, ne_v[1] = {3}, ne_o[1] = {8};
    memset(desc, 'd', 200);
    desc[200] = '\0';
    CHECK_OK(kiln_gguf_writer_add_str(w, "general.architecture", "llama", 5));
    CHECK_OK(kiln_gguf_writer_add_str(w, "general.description", desc, 200));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "general.alignment", KILN_GGUF_UINT32, &align));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "test.u8", KILN_GGUF_UINT8, &u8));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "test.i32", KILN_GGUF_INT32, &i32));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "test.f32", KILN_GGUF_FLOAT32, &f32));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "test.bool", KILN_GGUF_BOOL, &b));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "test.u64", KILN_GGUF_UINT64, &u64));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "test.f64", KILN_GGUF_FLOAT64, &f64));
    CHECK_OK(kiln_gguf_writer_add_array(w, "test.arr_i32", KILN_GGUF_INT32, arr, 3));
    CHECK_OK(kiln_gguf_writer_add_str_array(w, "test.arr_str", strs, 3));
    CHECK_OK(kiln_gguf_writer_add_str(w, "test.str", "hello", 5));
    for (int i = 0; i < 4; i++)
        craft_tensor_bytes(i, craft_data[i], sizeof craft_data[i]);
    CHECK_OK(kiln_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", KILN_TYPE_F32, 2, ne_q, craft_data[0]));
    CHECK_OK(kiln_gguf_writer_add_tensor(w, "blk.0.attn_k.weight", KILN_TYPE_Q8_0, 2, ne_k, craft_data[1]));
    CHECK_OK(kiln_gguf_writer_add_tensor(w, "blk.0.attn_v.weight", KILN_TYPE_F16, 1, ne_v, craft_data[2]));
    CHECK_OK(kiln_gguf_writer_add_tensor(w, "blk.0.ffn_out.weight", KILN_TYPE_F32, 1, ne_o, craft_data[3]));
}

/* The craft file as a malloc'd buffer (free with free()). Returns NULL on failure (a CHECK fails). */
static inline uint8_t *craft_build(size_t *size) {
    kiln_gguf_writer *w = NULL;
    void *mem = NULL;
    uint8_t *copy = NULL;
    CHECK_OK(kiln_gguf_writer_create(&w));
    if (!w) return NULL;
    craft_fill_writer(w);
    CHECK_OK(kiln_gguf_writer_write_memory(w, &mem, size));
    kiln_gguf_writer_destroy(w);
    if (!mem) return NULL;
    copy = malloc(*size);
    if (copy) memcpy(copy, mem, *size);
    kiln_free(mem);
    return copy;
}

/* Offset of the length field that precedes the key or tensor name `name` in buf (the u64 length followed
 * by the characters), or 0 if absent (a CHECK fails). */
static inline size_t craft_find(const uint8_t *buf, size_t size, const char *name) {
    size_t len = strlen(name);
    for (size_t i = 0; i + 8 + len <= size; i++) {
        uint64_t n = 0;
        for (int k = 7; k >= 0; k--)
            n = (n << 8) | buf[i + (size_t)k];
        if (n == len && memcmp(buf + i + 8, name, len) == 0) return i;
    }
    harness_fail(__FILE__, __LINE__, "name '%s' not found in the crafted file", name);
    return 0;
}

/* Offset of the value type of key `key` (just after the key characters). */
static inline size_t craft_kv_type_at(const uint8_t *buf, size_t size, const char *key) {
    return craft_find(buf, size, key) + 8 + strlen(key);
}

/* Offset of the n_dims field of tensor `name`. */
static inline size_t craft_tensor_at(const uint8_t *buf, size_t size, const char *name) {
    return craft_find(buf, size, name) + 8 + strlen(name);
}

static inline void craft_put_u32(uint8_t *buf, size_t at, uint32_t v) {
    for (int k = 0; k < 4; k++)
        buf[at + (size_t)k] = (uint8_t)(v >> (8 * k));
}

static inline void craft_put_u64(uint8_t *buf, size_t at, uint64_t v) {
    for (int k = 0; k < 8; k++)
        buf[at + (size_t)k] = (uint8_t)(v >> (8 * k));
}

static inline uint64_t craft_get_u64(const uint8_t *buf, size_t at) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = (v << 8) | buf[at + (size_t)k];
    return v;
}

#endif
