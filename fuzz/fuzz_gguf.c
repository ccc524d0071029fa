/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader (and, on accepted inputs, the writer).
 *
 * Each input is parsed with kiln_gguf_open_memory. When it is accepted, every kv is walked through every
 * accessor and getter (each string array element included) and every tensor info is read, touching the
 * first and last byte of its data; lookups by name must find the same index. Then the file is written
 * back with the writer (every key copied, every tensor added) and the result must be accepted again with
 * the same counts: whatever the reader accepts, the writer can reproduce. Any crash, sanitizer report,
 * leak or trap is a bug. See fuzz/README.md for the seed corpus and how to run it.
 */
#include "kiln.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static volatile uint8_t sink;

static void touch(const void *p, size_t n) {
    if (n == 0) return;
    sink ^= ((const volatile uint8_t *)p)[0];
    sink ^= ((const volatile uint8_t *)p)[n - 1];
}

static void walk_kv(const kiln_gguf *g, int64_t i) {
    const char *key = kiln_gguf_kv_key(g, i);
    uint32_t u;
    float f;
    bool b;
    kiln_str s;
    int64_t n;
    double d;
    if (!key || kiln_gguf_find_key(g, key) != i) __builtin_trap();
    (void)kiln_gguf_kv_type(g, i);
    if (kiln_gguf_get_u32(g, key, &u) == KILN_OK) sink ^= (uint8_t)u;
    if (kiln_gguf_get_f32(g, key, &f) == KILN_OK) sink ^= (uint8_t)(f == f);
    if (kiln_gguf_get_bool(g, key, &b) == KILN_OK) sink ^= (uint8_t)b;
    if (kiln_gguf_get_str(g, key, &s) == KILN_OK) touch(s.data, s.len);
    if (kiln_gguf_get_int(g, key, &n) == KILN_OK) sink ^= (uint8_t)n;
    if (kiln_gguf_get_float(g, key, &d) == KILN_OK) sink ^= (uint8_t)(d == d);
    if (kiln_gguf_kv_type(g, i) != KILN_GGUF_ARRAY) return;
    uint64_t len = kiln_gguf_arr_len(g, i);
    if (kiln_gguf_arr_type(g, i) == KILN_GGUF_STRING) {
        for (uint64_t j = 0; j < len; j++) {
            if (kiln_gguf_arr_str(g, i, j, &s) != KILN_OK) __builtin_trap();
            touch(s.data, s.len);
        }
        if (kiln_gguf_arr_str(g, i, len, &s) == KILN_OK) __builtin_trap();
    } else {
        static const size_t sizes[KILN_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        const void *data = kiln_gguf_arr_data(g, i);
        size_t elem = sizes[kiln_gguf_arr_type(g, i)];
        if (!data || (uintptr_t)data % elem != 0) __builtin_trap();
        touch(data, (size_t)len * elem);
    }
}

static void walk_tensor(const kiln_gguf *g, int64_t i) {
    kiln_tensor_info t;
    if (kiln_gguf_tensor_info(g, i, &t) != KILN_OK) __builtin_trap();
    if (kiln_gguf_find_tensor(g, t.name) != i) __builtin_trap();
    touch(t.data, t.size);
}

/* Write g back and check that the result is accepted with the same counts. */
static void rewrite(const kiln_gguf *g) {
    kiln_gguf_writer *w = NULL;
    kiln_gguf *again = NULL;
    void *out = NULL;
    size_t size = 0;
    if (kiln_gguf_writer_create(&w) != KILN_OK) return;
    if (kiln_gguf_writer_set_version(w, kiln_gguf_version(g)) != KILN_OK) __builtin_trap();
    if (kiln_gguf_writer_set_alignment(w, kiln_gguf_alignment(g)) != KILN_OK) __builtin_trap();
    for (int64_t i = 0; i < kiln_gguf_kv_count(g); i++)
        if (kiln_gguf_writer_copy_kv(w, g, i) != KILN_OK) __builtin_trap();
    for (int64_t i = 0; i < kiln_gguf_tensor_count(g); i++) {
        kiln_tensor_info t;
        kiln_gguf_tensor_info(g, i, &t);
        if (kiln_gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.ne, t.data) != KILN_OK)
            __builtin_trap();
    }
    if (kiln_gguf_writer_write_memory(w, &out, &size) == KILN_OK) {
        if (kiln_gguf_open_memory(out, size, &again) != KILN_OK) __builtin_trap();
        if (kiln_gguf_kv_count(again) != kiln_gguf_kv_count(g)) __builtin_trap();
        if (kiln_gguf_tensor_count(again) != kiln_gguf_tensor_count(g)) __builtin_trap();
        kiln_gguf_close(again);
    }
    kiln_free(out);
    kiln_gguf_writer_destroy(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_gguf *g = NULL;
    if (kiln_gguf_open_memory(data, size, &g) != KILN_OK) {
        if (g != NULL || kiln_last_error()[0] == '\0') __builtin_trap(); /* failures say why */
        return 0;
    }
    for (int64_t i = 0; i < kiln_gguf_kv_count(g); i++)
        walk_kv(g, i);
    for (int64_t i = 0; i < kiln_gguf_tensor_count(g); i++)
        walk_tensor(g, i);
    rewrite(g);
    kiln_gguf_close(g);
    return 0;
}
