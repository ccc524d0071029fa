/*
 * test_gguf_write.c - the GGUF writer: reading a canonical file and writing back every key and tensor
 * reproduces it byte for byte (the bundled model and two vocab-only files), the data section layout
 * (offsets at multiples of the alignment, zero padding), the streaming fill callback, argument checks,
 * and atomic file output that leaves nothing behind on error.
 */
#include "gguf_craft.h"
#include "harness.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A writer holding every key and tensor of g, in order, with g's version and alignment. */
static kiln_gguf_writer *writer_copying(const kiln_gguf *g) {
    kiln_gguf_writer *w = NULL;
    CHECK_OK(kiln_gguf_writer_create(&w));
    if (!w) return NULL;
    CHECK_OK(kiln_gguf_writer_set_version(w, kiln_gguf_version(g)));
    CHECK_OK(kiln_gguf_writer_set_alignment(w, kiln_gguf_alignment(g)));
    for (int64_t i = 0; i < kiln_gguf_kv_count(g); i++)
        CHECK_OK(kiln_gguf_writer_copy_kv(w, g, i));
    for (int64_t i = 0; i < kiln_gguf_tensor_count(g); i++) {
        kiln_tensor_info t;
        CHECK_OK(kiln_gguf_tensor_info(g, i, &t));
        CHECK_OK(kiln_gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.ne, t.data));
    }
    return w;
}

/* Bytes equal, or a failure naming the first difference. */
static void check_same_bytes(const char *what, const void *a, size_t na, const void *b, size_t nb) {
    size_t n = na < nb ? na : nb, i = 0;
    while (i < n && ((const uint8_t *)a)[i] == ((const uint8_t *)b)[i])
        i++;
    if (na != nb || i < n)
        harness_fail(__FILE__, __LINE__, "%s: sizes %zu and %zu, first difference at byte %zu", what, na, nb,
                     i);
}

static void check_rewrite_reproduces(const char *path) {
    size_t size = 0, out_size = 0, file_size = 0;
    char *orig = harness_read_file(path, &size);
    char *rewritten;
    const char *tmp = KILN_TEST_TMP "/write_roundtrip.gguf";
    kiln_gguf *g = NULL;
    kiln_gguf_writer *w;
    void *out = NULL;
    CHECK(orig != NULL);
    CHECK_OK(kiln_gguf_open(path, &g));
    if (!g || !orig) goto done;
    w = writer_copying(g);
    CHECK_OK(kiln_gguf_writer_write_memory(w, &out, &out_size));
    check_same_bytes(path, orig, size, out, out_size);
    CHECK_OK(kiln_gguf_writer_write_file(w, tmp));
    rewritten = harness_read_file(tmp, &file_size);
    CHECK(rewritten != NULL);
    if (rewritten) check_same_bytes(tmp, orig, size, rewritten, file_size);
    free(rewritten);
    remove(tmp);
    kiln_gguf_writer_destroy(w);
done:
    kiln_free(out);
    kiln_gguf_close(g);
    free(orig);
}

static void rewriting_stories260k_reproduces_it_byte_for_byte(void) {
    check_rewrite_reproduces(KILN_MODEL_PATH);
}

static void rewriting_the_llama_spm_vocab_reproduces_it_byte_for_byte(void) {
    check_rewrite_reproduces(harness_data_path("vocab/ggml-vocab-llama-spm.gguf"));
}

static void rewriting_the_phi3_vocab_reproduces_it_byte_for_byte(void) {
    check_rewrite_reproduces(harness_data_path("vocab/ggml-vocab-phi-3.gguf"));
}

/* ---- Layout. ---- */

static void places_tensors_at_multiples_of_the_alignment_with_zero_padding(void) {
    static const size_t alignments[] = {1, 8, 32, 64, 4096};
    for (size_t a = 0; a < sizeof alignments / sizeof alignments[0]; a++) {
        kiln_gguf_writer *w = NULL;
        kiln_gguf *g = NULL;
        uint32_t align = (uint32_t)alignments[a];
        uint8_t ten[10], three[3];
        const int64_t ne10[1] = {10}, ne3[1] = {3};
        void *image = NULL;
        size_t size = 0;
        /* Header: 24 + the kv (8 + 17 + 4 + 4) + three tensor infos (8 + 1 + 4 + 8 + 4 + 8 each). */
        const size_t header_end = 24 + 33 + 3 * 33;
        memset(ten, 0xaa, sizeof ten);
        memset(three, 0xbb, sizeof three);
        CHECK_OK(kiln_gguf_writer_create(&w));
        CHECK_OK(kiln_gguf_writer_set_alignment(w, alignments[a]));
        CHECK_OK(kiln_gguf_writer_add_scalar(w, "general.alignment", KILN_GGUF_UINT32, &align));
        CHECK_OK(kiln_gguf_writer_add_tensor(w, "a", KILN_TYPE_I8, 1, ne10, ten));
        CHECK_OK(kiln_gguf_writer_add_tensor(w, "b", KILN_TYPE_I8, 1, ne3, three));
        CHECK_OK(kiln_gguf_writer_add_tensor(w, "c", KILN_TYPE_I8, 1, ne10, ten));
        CHECK_OK(kiln_gguf_writer_write_memory(w, &image, &size));
        kiln_gguf_writer_destroy(w);
        if (image) CHECK_OK(kiln_gguf_open_memory(image, size, &g));
        if (!g) {
            kiln_free(image);
            continue;
        }
        const uint8_t *bytes = image;
        size_t data = kiln_gguf_data_offset(g);
        CHECK_EQ_INT(kiln_gguf_alignment(g), alignments[a]);
        CHECK_EQ_INT(data % alignments[a], 0);
        CHECK_EQ_INT(data, (header_end + alignments[a] - 1) / alignments[a] * alignments[a]);
        for (size_t i = header_end; i < data; i++)
            if (bytes[i] != 0) harness_fail(__FILE__, __LINE__, "non-zero header padding byte %zu", i);
        for (int64_t i = 0; i < 3; i++) {
            kiln_tensor_info t;
            CHECK_OK(kiln_gguf_tensor_info(g, i, &t));
            CHECK_EQ_INT(t.offset % alignments[a], 0);
            CHECK(memcmp(t.data, i == 1 ? three : ten, t.size) == 0);
            /* Zero padding runs from the end of the tensor to the next multiple of the alignment. */
            size_t stop = (size_t)((t.offset + t.size + alignments[a] - 1) / alignments[a] * alignments[a]);
            for (size_t j = data + (size_t)t.offset + t.size; j < data + stop; j++)
                if (bytes[j] != 0) harness_fail(__FILE__, __LINE__, "non-zero padding byte %zu", j);
            if (i == 2) CHECK_EQ_INT(size, data + stop); /* the last tensor is padded too */
        }
        kiln_gguf_close(g);
        kiln_free(image);
    }
}

static void a_file_without_tensors_ends_after_the_header(void) {
    kiln_gguf_writer *w = NULL;
    void *image = NULL;
    size_t size = 0;
    uint8_t v = 1;
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "k", KILN_GGUF_UINT8, &v));
    CHECK_OK(kiln_gguf_writer_write_memory(w, &image, &size));
    CHECK_EQ_INT(size, 24 + 8 + 1 + 4 + 1); /* header, key length, key, type, value: no padding */
    kiln_gguf_writer_destroy(w);
    kiln_free(image);
}

static void writes_version_2_when_asked(void) {
    kiln_gguf_writer *w = NULL;
    void *image = NULL;
    size_t size = 0;
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_set_version(w, 2));
    CHECK_OK(kiln_gguf_writer_write_memory(w, &image, &size));
    CHECK_EQ_INT(size, 24);
    if (image) CHECK(memcmp(image, "GGUF\x02\0\0\0", 8) == 0);
    kiln_gguf_writer_destroy(w);
    kiln_free(image);
}

/* ---- The fill callback. ---- */

typedef struct fill_log {
    int calls;
    int64_t order[8];
    int fail_on; /* tensor index whose fill fails, or -1 */
} fill_log;

static kiln_status fill_craft(void *user, int64_t i, void *dst, size_t size) {
    fill_log *log = user;
    if (log->calls < 8) log->order[log->calls] = i;
    log->calls++;
    if (i == log->fail_on) return KILN_E_IO;
    craft_tensor_bytes(i, dst, size);
    return KILN_OK;
}

/* The craft file's tensors, added with data == NULL. */
static kiln_gguf_writer *craft_writer_with_fill(fill_log *log) {
    kiln_gguf_writer *w = NULL;
    uint8_t *full;
    size_t full_size;
    kiln_gguf *g = NULL;
    full = craft_build(&full_size);
    CHECK_OK(kiln_gguf_open_memory(full, full_size, &g));
    CHECK_OK(kiln_gguf_writer_create(&w));
    for (int64_t i = 0; g && i < kiln_gguf_kv_count(g); i++)
        CHECK_OK(kiln_gguf_writer_copy_kv(w, g, i));
    for (int64_t i = 0; g && i < kiln_gguf_tensor_count(g); i++) {
        kiln_tensor_info t;
        CHECK_OK(kiln_gguf_tensor_info(g, i, &t));
        CHECK_OK(kiln_gguf_writer_add_tensor(w, t.name, t.type, t.n_dims, t.ne, NULL));
    }
    kiln_gguf_close(g);
    free(full);
    kiln_gguf_writer_set_fill(w, fill_craft, log);
    return w;
}

static void the_fill_callback_produces_tensors_without_data_in_order(void) {
    fill_log log = {0, {0}, -1};
    kiln_gguf_writer *w = craft_writer_with_fill(&log);
    const char *path = KILN_TEST_TMP "/write_fill.gguf";
    size_t want_size, size = 0, file_size = 0;
    uint8_t *want = craft_build(&want_size);
    void *image = NULL;
    char *file;
    CHECK_OK(kiln_gguf_writer_write_memory(w, &image, &size));
    CHECK_EQ_INT(log.calls, CRAFT_N_TENSORS);
    for (int i = 0; i < CRAFT_N_TENSORS; i++)
        CHECK_EQ_INT(log.order[i], i);
    check_same_bytes("fill to memory", want, want_size, image, size);
    log.calls = 0;
    CHECK_OK(kiln_gguf_writer_write_file(w, path));
    CHECK_EQ_INT(log.calls, CRAFT_N_TENSORS);
    file = harness_read_file(path, &file_size);
    if (file) check_same_bytes("fill to file", want, want_size, file, file_size);
    free(file);
    remove(path);
    kiln_free(image);
    free(want);
    kiln_gguf_writer_destroy(w);
}

/* No entry of dir starts with prefix. */
static bool no_file_starts_with(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    struct dirent *e;
    bool none = true;
    if (!d) return true;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) none = false;
    closedir(d);
    return none;
}

static void a_failing_fill_callback_leaves_no_file(void) {
    fill_log log = {0, {0}, 2};
    kiln_gguf_writer *w = craft_writer_with_fill(&log);
    const char *path = KILN_TEST_TMP "/write_fill_fails.gguf";
    void *image = NULL;
    size_t size = 0;
    remove(path);
    CHECK_STATUS(kiln_gguf_writer_write_file(w, path), KILN_E_IO);
    CHECK_ERROR_MENTIONS("fill callback for tensor 'blk.0.attn_v.weight'");
    CHECK(access(path, F_OK) != 0);
    CHECK(no_file_starts_with(KILN_TEST_TMP, "write_fill_fails.gguf"));
    CHECK_STATUS(kiln_gguf_writer_write_memory(w, &image, &size), KILN_E_IO);
    CHECK(image == NULL);
    kiln_gguf_writer_destroy(w);
}

static void a_tensor_without_data_needs_a_fill_callback(void) {
    kiln_gguf_writer *w = NULL;
    const int64_t ne[1] = {4};
    void *image = NULL;
    size_t size = 0;
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_add_tensor(w, "t", KILN_TYPE_F32, 1, ne, NULL));
    CHECK_STATUS(kiln_gguf_writer_write_memory(w, &image, &size), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("tensor 't' has no data and no fill callback is set");
    kiln_gguf_writer_destroy(w);
}

/* ---- Argument checks. ---- */

static void set_alignment_rejects_non_powers_of_two(void) {
    kiln_gguf_writer *w = NULL;
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_STATUS(kiln_gguf_writer_set_alignment(w, 0), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_gguf_writer_set_alignment(w, 48), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("alignment 48 is not a power of two");
    CHECK_STATUS(kiln_gguf_writer_set_alignment(w, (size_t)1 << 32), KILN_E_INVALID_ARG);
    CHECK_OK(kiln_gguf_writer_set_alignment(w, 1));
    CHECK_OK(kiln_gguf_writer_set_alignment(w, 64));
    CHECK_STATUS(kiln_gguf_writer_set_version(w, 1), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_gguf_writer_set_version(w, 4), KILN_E_INVALID_ARG);
    kiln_gguf_writer_destroy(w);
}

static void an_alignment_readers_would_not_see_is_rejected(void) {
    kiln_gguf_writer *w = NULL;
    void *image = NULL;
    size_t size = 0;
    uint32_t a = 16;
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_set_alignment(w, 64));
    CHECK_STATUS(kiln_gguf_writer_write_memory(w, &image, &size), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("layout alignment 64 differs from the 32 readers will use");
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "general.alignment", KILN_GGUF_UINT32, &a));
    CHECK_STATUS(kiln_gguf_writer_write_memory(w, &image, &size), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("differs from the 16");
    kiln_gguf_writer_destroy(w);
}

static void rejects_invalid_keys_and_values(void) {
    kiln_gguf_writer *w = NULL;
    uint32_t v = 1, bad_align = 3;
    uint8_t two = 2;
    int32_t i = 1;
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "k", KILN_GGUF_UINT32, &v));
    CHECK_STATUS(kiln_gguf_writer_add_scalar(w, "k", KILN_GGUF_UINT32, &v), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("duplicate key 'k'");
    CHECK_STATUS(kiln_gguf_writer_add_str(w, "", "x", 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("empty key");
    CHECK_STATUS(kiln_gguf_writer_add_scalar(w, "s", KILN_GGUF_STRING, "x"), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_gguf_writer_add_scalar(w, "b", KILN_GGUF_BOOL, &two), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("BOOL value 2");
    CHECK_STATUS(kiln_gguf_writer_add_array(w, "a", KILN_GGUF_ARRAY, &v, 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("nested arrays are not supported");
    CHECK_STATUS(kiln_gguf_writer_add_array(w, "a", KILN_GGUF_STRING, &v, 1), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_gguf_writer_add_scalar(w, "general.alignment", KILN_GGUF_INT32, &i),
                 KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_gguf_writer_add_scalar(w, "general.alignment", KILN_GGUF_UINT32, &bad_align),
                 KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("general.alignment must be a UINT32 power of two");
    kiln_gguf_writer_destroy(w);
}

static void rejects_invalid_tensors(void) {
    kiln_gguf_writer *w = NULL;
    const int64_t ok[2] = {32, 2}, zero[2] = {32, 0}, ragged[1] = {33};
    float data[64] = {0};
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_add_tensor(w, "t", KILN_TYPE_F32, 2, ok, data));
    CHECK_STATUS(kiln_gguf_writer_add_tensor(w, "t", KILN_TYPE_F32, 2, ok, data), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("duplicate tensor name 't'");
    CHECK_STATUS(kiln_gguf_writer_add_tensor(w, "", KILN_TYPE_F32, 2, ok, data), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_gguf_writer_add_tensor(w, "z", KILN_TYPE_F32, 2, zero, data), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("ne[1] = 0 is not positive");
    CHECK_STATUS(kiln_gguf_writer_add_tensor(w, "d", KILN_TYPE_F32, 5, ok, data), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_gguf_writer_add_tensor(w, "u", (kiln_type)4, 2, ok, data), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("unknown type 4");
    CHECK_STATUS(kiln_gguf_writer_add_tensor(w, "q", KILN_TYPE_Q8_0, 1, ragged, data), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("tensor 'q': row of 33 elements is not a multiple of the q8_0 block size 32");
    kiln_gguf_writer_destroy(w);
    kiln_gguf_writer_destroy(NULL);
}

/* ---- Output files. ---- */

static void write_file_to_an_unwritable_path_is_an_io_error_leaving_no_temp_file(void) {
    kiln_gguf_writer *w = NULL;
    const char *dir = KILN_TEST_TMP "/write_target_is_a_dir";
    CHECK_OK(kiln_gguf_writer_create(&w));
    craft_fill_writer(w);
    CHECK_STATUS(kiln_gguf_writer_write_file(w, KILN_TEST_TMP "/no-such-dir/out.gguf"), KILN_E_IO);
    CHECK_ERROR_MENTIONS("no-such-dir/out.gguf");
    /* A directory in the way: the temporary file is written, then the rename fails and it is removed. */
    mkdir(dir, 0755);
    CHECK_STATUS(kiln_gguf_writer_write_file(w, dir), KILN_E_IO);
    CHECK_ERROR_MENTIONS("cannot rename");
    CHECK(no_file_starts_with(KILN_TEST_TMP, "write_target_is_a_dir.tmp"));
    rmdir(dir);
    kiln_gguf_writer_destroy(w);
}

static void write_file_replaces_an_existing_file(void) {
    kiln_gguf_writer *w = NULL;
    const char *path = KILN_TEST_TMP "/write_replace.gguf";
    FILE *f = fopen(path, "wb");
    size_t size = 0, want_size;
    uint8_t *want = craft_build(&want_size);
    char *got;
    if (f) {
        fputs("old contents that are longer than nothing", f);
        fclose(f);
    }
    CHECK_OK(kiln_gguf_writer_create(&w));
    craft_fill_writer(w);
    CHECK_OK(kiln_gguf_writer_write_file(w, path));
    got = harness_read_file(path, &size);
    if (got) check_same_bytes("replaced file", want, want_size, got, size);
    free(got);
    free(want);
    remove(path);
    kiln_gguf_writer_destroy(w);
}

static kiln_gguf_writer *swept_writer;
static void *swept_image;

/* Adds may fail (each failure must leave the writer usable); the write reports the rest. */
static kiln_status create_add_and_write(void *user) {
    uint32_t v = 32;
    kiln_str strs[2] = {{"a", 1}, {"bc", 2}};
    const int64_t ne[1] = {8};
    static const float data[8];
    size_t size = 0;
    kiln_status s = kiln_gguf_writer_create(&swept_writer), a1, a2, a3;
    (void)user;
    if (s) return s;
    a1 = kiln_gguf_writer_add_scalar(swept_writer, "general.alignment", KILN_GGUF_UINT32, &v);
    a2 = kiln_gguf_writer_add_str_array(swept_writer, "strs", strs, 2);
    a3 = kiln_gguf_writer_add_tensor(swept_writer, "t", KILN_TYPE_F32, 1, ne, data);
    s = a1 ? a1 : a2 ? a2 : a3;
    return s ? s : kiln_gguf_writer_write_memory(swept_writer, &swept_image, &size);
}

static void destroy_writer(void *user) {
    (void)user;
    kiln_gguf_writer_destroy(swept_writer);
    kiln_free(swept_image);
    swept_writer = NULL;
    swept_image = NULL;
}

static void every_allocation_failure_while_writing_is_reported_as_nomem(void) {
    harness_sweep sw = {"the GGUF writer", NULL, create_add_and_write, destroy_writer, NULL};
    CHECK(harness_alloc_sweep(&sw) > 3);
}

int main(void) {
    RUN(rewriting_stories260k_reproduces_it_byte_for_byte);
    RUN(rewriting_the_llama_spm_vocab_reproduces_it_byte_for_byte);
    RUN(rewriting_the_phi3_vocab_reproduces_it_byte_for_byte);
    RUN(places_tensors_at_multiples_of_the_alignment_with_zero_padding);
    RUN(a_file_without_tensors_ends_after_the_header);
    RUN(writes_version_2_when_asked);
    RUN(the_fill_callback_produces_tensors_without_data_in_order);
    RUN(a_failing_fill_callback_leaves_no_file);
    RUN(a_tensor_without_data_needs_a_fill_callback);
    RUN(set_alignment_rejects_non_powers_of_two);
    RUN(an_alignment_readers_would_not_see_is_rejected);
    RUN(rejects_invalid_keys_and_values);
    RUN(rejects_invalid_tensors);
    RUN(write_file_to_an_unwritable_path_is_an_io_error_leaving_no_temp_file);
    RUN(write_file_replaces_an_existing_file);
    RUN(every_allocation_failure_while_writing_is_reported_as_nomem);
    return harness_finish();
}
