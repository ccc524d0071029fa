/*
 * gguf_write_out.c - laying out and emitting a GGUF file from a writer.
 *
 * Layout: magic, version, tensor count, kv count, the kv section, the tensor infos; then, when there is
 * at least one tensor, zero padding up to the alignment and the data section, where each tensor starts
 * at the next multiple of the alignment and is followed by zero padding to the next multiple (the last
 * one too). A file without tensors ends right after the header, as the llama.cpp tools write it.
 *
 * write_memory fills one buffer of the exact size. write_file streams to a temporary file in the target
 * directory and renames it into place only when everything was written and synced, so an error never
 * leaves a partial file; tensors without data are produced one at a time by the fill callback.
 */
#include "gguf/gguf_writer.h"

#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where bytes go: a file descriptor or a buffer of the exact total size. */
typedef struct sink {
    int fd; /* -1 for memory */
    uint8_t *mem;
    size_t pos;
    const char *path; /* for messages */
} sink;

static kiln_status sink_write(sink *k, const void *p, size_t n) {
    const uint8_t *b = p;
    if (!k->mem) {
        while (n > 0) {
            ssize_t r = write(k->fd, b, n);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0)
                return kiln__error(KILN_E_IO, "writing '%s': %s", k->path,
                                   r < 0 ? strerror(errno) : "no progress");
            b += r;
            n -= (size_t)r;
            k->pos += (size_t)r;
        }
        return KILN_OK;
    }
    if (n) memcpy(k->mem + k->pos, b, n);
    k->pos += n;
    return KILN_OK;
}

static kiln_status sink_zeros(sink *k, size_t n) {
    static const uint8_t zeros[4096];
    while (n > 0) {
        size_t m = KILN__MIN(n, sizeof zeros);
        kiln_status s = sink_write(k, zeros, m);
        if (s) return s;
        n -= m;
    }
    return KILN_OK;
}

/* The checks that need the whole writer: the layout alignment matches what readers will use, and every
 * tensor has a source for its bytes. */
static kiln_status check_writer(const kiln_gguf_writer *w) {
    uint32_t declared = w->has_alignment_key ? w->alignment_key : KILN__GGUF_DEFAULT_ALIGNMENT;
    if (declared != w->alignment)
        return kiln__error(
            KILN_E_INVALID_ARG,
            "GGUF writer: layout alignment %zu differs from the %u readers will use (%s); add a "
            "matching general.alignment key",
            w->alignment, declared, w->has_alignment_key ? "general.alignment" : "the default");
    for (int64_t i = 0; i < w->n_tensors; i++)
        if (!w->tensors[i].data && !w->fill)
            return kiln__error(KILN_E_INVALID_ARG,
                               "GGUF writer: tensor '%s' has no data and no fill callback is set",
                               w->tensors[i].name);
    return KILN_OK;
}

/* Serialize the header (without its padding) into h; report where the data section starts and the
 * total file size. */
static kiln_status build_header(const kiln_gguf_writer *w, kiln__gguf_bytes *h, uint64_t *data_start,
                                uint64_t *total) {
    uint64_t offset = 0;
    kiln_status s = kiln__gguf_bytes_append(h, "GGUF", 4);
    if (!s) s = kiln__gguf_bytes_u32(h, w->version);
    if (!s) s = kiln__gguf_bytes_u64(h, (uint64_t)w->n_tensors);
    if (!s) s = kiln__gguf_bytes_u64(h, (uint64_t)w->n_kv);
    if (!s) s = kiln__gguf_bytes_append(h, w->kv_bytes.data, w->kv_bytes.len);
    for (int64_t i = 0; i < w->n_tensors && !s; i++) {
        const kiln__gguf_wtensor *t = &w->tensors[i];
        s = kiln__gguf_bytes_u64(h, t->name_len);
        if (!s) s = kiln__gguf_bytes_append(h, t->name, t->name_len);
        if (!s) s = kiln__gguf_bytes_u32(h, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims && !s; d++)
            s = kiln__gguf_bytes_u64(h, (uint64_t)t->ne[d]);
        if (!s) s = kiln__gguf_bytes_u32(h, (uint32_t)t->type);
        if (!s) s = kiln__gguf_bytes_u64(h, offset);
        if (!s && (kiln__add_overflow_u64(offset, t->size, &offset) ||
                   kiln__align_up(offset, w->alignment, &offset)))
            return kiln__error(KILN_E_RANGE, "GGUF writer: the data section size overflows");
    }
    if (s) return s;
    *data_start = h->len;
    if (w->n_tensors > 0 && kiln__align_up(h->len, w->alignment, data_start))
        return kiln__error(KILN_E_RANGE, "GGUF writer: the header size overflows");
    if (kiln__add_overflow_u64(*data_start, offset, total))
        return kiln__error(KILN_E_RANGE, "GGUF writer: the file size overflows");
    return KILN_OK;
}

/* Emit the header, its padding and every tensor with its padding. scratch (for file sinks) holds the
 * largest fill-produced tensor. */
static kiln_status emit(const kiln_gguf_writer *w, const kiln__gguf_bytes *h, uint64_t data_start, sink *k,
                        uint8_t *scratch) {
    kiln_status s = sink_write(k, h->data, h->len);
    if (!s) s = sink_zeros(k, (size_t)(data_start - h->len));
    for (int64_t i = 0; i < w->n_tensors && !s; i++) {
        const kiln__gguf_wtensor *t = &w->tensors[i];
        uint64_t end = k->pos;
        if (t->data) {
            s = sink_write(k, t->data, t->size);
        } else {
            uint8_t *dst = k->mem ? k->mem + k->pos : scratch;
            s = w->fill(w->fill_user, i, dst, t->size);
            if (s) return kiln__error_prefix(s, "GGUF writer: fill callback for tensor '%s': ", t->name);
            if (k->mem)
                k->pos += t->size;
            else
                s = sink_write(k, scratch, t->size);
        }
        kiln__align_up(k->pos, w->alignment, &end);
        if (!s) s = sink_zeros(k, (size_t)(end - k->pos));
    }
    return s;
}

kiln_status kiln_gguf_writer_write_memory(kiln_gguf_writer *w, void **out, size_t *size) {
    kiln__gguf_bytes h = {0};
    uint64_t data_start, total;
    sink k = {-1, NULL, 0, "memory"};
    kiln_status s;
    if (!w || !out || !size)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_writer_write_memory: NULL argument");
    *out = NULL;
    *size = 0;
    s = check_writer(w);
    if (!s) s = build_header(w, &h, &data_start, &total);
    if (!s && total > SIZE_MAX)
        s = kiln__error(KILN_E_RANGE, "GGUF writer: %llu bytes do not fit in memory",
                        (unsigned long long)total);
    if (!s) {
        k.mem = kiln__alloc((size_t)total);
        if (!k.mem) s = kiln__nomem("the GGUF output buffer");
    }
    if (!s) s = emit(w, &h, data_start, &k, NULL);
    kiln__dealloc(h.data);
    if (s) {
        kiln__dealloc(k.mem);
        return s;
    }
    *out = k.mem;
    *size = (size_t)total;
    return KILN_OK;
}

/* Scratch space for the largest tensor the fill callback produces (NULL when there is none). */
static kiln_status alloc_scratch(const kiln_gguf_writer *w, uint8_t **scratch) {
    size_t most = 0;
    *scratch = NULL;
    for (int64_t i = 0; i < w->n_tensors; i++)
        if (!w->tensors[i].data) most = KILN__MAX(most, w->tensors[i].size);
    if (most == 0) return KILN_OK;
    *scratch = kiln__alloc(most);
    return *scratch ? KILN_OK : kiln__nomem("the GGUF fill buffer");
}

/* Write everything to the temporary file tmp (already open as fd), sync and close it. */
static kiln_status write_temp(const kiln_gguf_writer *w, int fd, const char *tmp) {
    kiln__gguf_bytes h = {0};
    uint64_t data_start, total;
    uint8_t *scratch = NULL;
    sink k = {fd, NULL, 0, tmp};
    kiln_status s = build_header(w, &h, &data_start, &total);
    if (!s) s = alloc_scratch(w, &scratch);
    if (!s) s = emit(w, &h, data_start, &k, scratch);
    if (!s && fchmod(fd, 0644) != 0) s = kiln__error(KILN_E_IO, "chmod '%s': %s", tmp, strerror(errno));
    if (!s && fsync(fd) != 0) s = kiln__error(KILN_E_IO, "syncing '%s': %s", tmp, strerror(errno));
    kiln__dealloc(scratch);
    kiln__dealloc(h.data);
    return s;
}

kiln_status kiln_gguf_writer_write_file(kiln_gguf_writer *w, const char *path) {
    static const char suffix[] = ".tmp-XXXXXX";
    char *tmp;
    size_t len;
    int fd;
    kiln_status s;
    if (!w || !path) return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_writer_write_file: NULL argument");
    s = check_writer(w);
    if (s) return s;
    len = strlen(path);
    tmp = kiln__alloc(len + sizeof suffix);
    if (!tmp) return kiln__nomem("a temporary file name");
    memcpy(tmp, path, len);
    memcpy(tmp + len, suffix, sizeof suffix);
    fd = mkstemp(tmp);
    if (fd < 0) {
        s = kiln__error(KILN_E_IO, "cannot create a temporary file for '%s': %s", path, strerror(errno));
        kiln__dealloc(tmp);
        return s;
    }
    s = write_temp(w, fd, tmp);
    if (close(fd) != 0 && !s) s = kiln__error(KILN_E_IO, "closing '%s': %s", tmp, strerror(errno));
    if (!s && rename(tmp, path) != 0)
        s = kiln__error(KILN_E_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (s) unlink(tmp);
    kiln__dealloc(tmp);
    return s;
}
