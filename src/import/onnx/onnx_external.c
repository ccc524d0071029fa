/*
 * onnx_external.c - initializer bytes kept in external data files beside the model (TensorProto's
 * data_location = EXTERNAL). A location must be a relative path without ".." components, backslashes or
 * a leading '/', and must resolve (symbolic links followed) to a regular file inside the model's own
 * folder; [offset, offset + length) must lie inside the file. Each distinct file is mapped read-only once
 * and stays mapped until kiln_onnx_destroy; at most KILN_MAX_ONNX_EXTERNAL_FILES files per model.
 */
#include "import/onnx/onnx_internal.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ext_file {
    kiln__onnx_map map; /* first: the model's list links these */
    char real[PATH_MAX];
} ext_file;

static kiln_status check_location(const char *tensor, const char *loc) {
    const char *p = loc;
    if (!*loc) return kiln__error(KILN_E_FORMAT, "tensor '%.128s': empty external data location", tensor);
    if (loc[0] == '/' || strchr(loc, '\\'))
        return kiln__error(
            KILN_E_FORMAT,
            "tensor '%.128s': external data location '%.128s' must be a relative path inside the "
            "model's folder",
            tensor, loc);
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return kiln__error(
                KILN_E_FORMAT,
                "tensor '%.128s': external data location '%.128s' leaves the model's folder (\"..\")", tensor,
                loc);
        p += n;
        if (*p == '/') p++;
    }
    return KILN_OK;
}

/* Map the file at real path `real` (or find it mapped already). */
static kiln_status map_file(kiln_onnx *m, const char *tensor, const char *real, const ext_file **out) {
    struct stat st;
    int fd, count = 0;
    ext_file *e;
    for (kiln__onnx_map *x = m->ext_maps; x; x = x->next, count++)
        if (!strcmp(((ext_file *)x)->real, real)) {
            *out = (ext_file *)x;
            return KILN_OK;
        }
    if (count >= (int)KILN_MAX_ONNX_EXTERNAL_FILES)
        return kiln__error(KILN_E_FORMAT,
                           "tensor '%.128s': more than %u external data files (KILN_MAX_ONNX_EXTERNAL_FILES)",
                           tensor, KILN_MAX_ONNX_EXTERNAL_FILES);
    fd = open(real, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kiln__error(KILN_E_IO, "tensor '%.128s': cannot open external data file '%s': %s", tensor,
                           real, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kiln__error(KILN_E_IO, "tensor '%.128s': external data '%s' is not a regular file", tensor,
                           real);
    }
    e = kiln__calloc(1, sizeof *e);
    if (!e) {
        close(fd);
        return kiln__nomem("an external data mapping");
    }
    snprintf(e->real, sizeof e->real, "%s", real);
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            kiln__dealloc(e);
            return kiln__error(KILN_E_IO, "tensor '%.128s': cannot map external data '%s': %s", tensor, real,
                               strerror(err));
        }
        e->map.base = p;
        e->map.size = (size_t)st.st_size;
    }
    close(fd);
    e->map.next = m->ext_maps;
    m->ext_maps = &e->map;
    *out = e;
    return KILN_OK;
}

kiln_status kiln__onnx_external(kiln_onnx *m, const char *tensor, const char *location, uint64_t offset,
                                uint64_t length, const uint8_t **data, uint64_t *size) {
    char path[PATH_MAX], real[PATH_MAX], dir[PATH_MAX];
    const ext_file *e = NULL;
    size_t n;
    kiln_status s = check_location(tensor, location);
    if (s) return s;
    if (!m->dir)
        return kiln__error(
            KILN_E_INVALID_ARG,
            "tensor '%.128s': refers to external data '%.128s', but the model was loaded from memory "
            "without a folder",
            tensor, location);
    if (!realpath(m->dir, dir))
        return kiln__error(KILN_E_IO, "tensor '%.128s': the model's folder '%s': %s", tensor, m->dir,
                           strerror(errno));
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, location) >= sizeof path)
        return kiln__error(KILN_E_FORMAT, "tensor '%.128s': external data path '%.128s' is too long", tensor,
                           location);
    if (!realpath(path, real))
        return kiln__error(KILN_E_IO, "tensor '%.128s': external data file '%.128s': %s", tensor, location,
                           strerror(errno));
    n = strlen(dir);
    if (strncmp(real, dir, n) != 0 || (real[n] != '/' && !(n == 1 && dir[0] == '/')))
        return kiln__error(KILN_E_FORMAT,
                           "tensor '%.128s': external data '%.128s' resolves outside the model's folder",
                           tensor, location);
    if ((s = map_file(m, tensor, real, &e))) return s;
    if (offset > e->map.size)
        return kiln__error(
            KILN_E_FORMAT,
            "tensor '%.128s': external data offset %llu is past the end of '%.128s' (%zu bytes)", tensor,
            (unsigned long long)offset, location, e->map.size);
    if (length == UINT64_MAX) length = e->map.size - offset;
    if (length > e->map.size - offset)
        return kiln__error(
            KILN_E_FORMAT,
            "tensor '%.128s': external data offset %llu + length %llu exceeds the size of '%.128s' "
            "(%zu bytes)",
            tensor, (unsigned long long)offset, (unsigned long long)length, location, e->map.size);
    *data = e->map.base ? (const uint8_t *)e->map.base + offset : (const uint8_t *)"";
    *size = length;
    return KILN_OK;
}

void kiln__onnx_release_pages(const kiln_onnx *m) {
#if defined(MADV_DONTNEED)
    if (m->map) (void)madvise(m->map, m->map_size, MADV_DONTNEED);
    for (const kiln__onnx_map *x = m->ext_maps; x; x = x->next)
        if (x->base) (void)madvise(x->base, x->size, MADV_DONTNEED);
#else
    (void)m;
#endif
}

void kiln__onnx_external_free(kiln_onnx *m) {
    kiln__onnx_map *x = m->ext_maps;
    while (x) {
        kiln__onnx_map *next = x->next;
        if (x->base) munmap(x->base, x->size);
        kiln__dealloc(x);
        x = next;
    }
    m->ext_maps = NULL;
}
