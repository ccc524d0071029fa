/*
 * gguf_open.c - opening and closing GGUF files: kiln_gguf_open maps the file read-only (open, fstat,
 * mmap) so tensor data is used in place; kiln_gguf_open_memory parses a borrowed buffer. Both hand the
 * image to the validating parser (gguf_parse.c) and return a handle only when every check passed.
 */
#include "gguf/gguf_internal.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static kiln_status parse_image(kiln_gguf *g, kiln_gguf **out) {
    kiln_status s = kiln__gguf_parse(g);
    if (s) {
        kiln_gguf_close(g);
        return s;
    }
    *out = g;
    return KILN_OK;
}

kiln_status kiln_gguf_open_memory(const void *data, size_t size, kiln_gguf **out) {
    static const uint8_t empty[1];
    kiln_gguf *g;
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_open_memory: NULL buffer of %zu bytes", size);
    g = kiln__calloc(1, sizeof *g);
    if (!g) return kiln__nomem("a GGUF handle");
    g->base = data ? data : empty;
    g->size = size;
    return parse_image(g, out);
}

/* Map path read-only into g. An empty file gets no mapping (the parser then reports the missing magic). */
static kiln_status map_file(kiln_gguf *g, const char *path) {
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln__error(KILN_E_IO, "cannot open GGUF file '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kiln__error(KILN_E_IO, "cannot stat GGUF file '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kiln__error(KILN_E_IO, "GGUF file '%s' is not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return kiln__error(KILN_E_IO, "GGUF file '%s' is too large to map (%lld bytes)", path,
                           (long long)st.st_size);
    }
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return kiln__error(KILN_E_IO, "cannot map GGUF file '%s' (%lld bytes): %s", path,
                               (long long)st.st_size, strerror(e));
        }
        g->map = m;
        g->map_size = (size_t)st.st_size;
        g->base = m;
        g->size = (size_t)st.st_size;
    }
    close(fd);
    return KILN_OK;
}

kiln_status kiln_gguf_open(const char *path, kiln_gguf **out) {
    static const uint8_t empty[1];
    kiln_gguf *g;
    kiln_status s;
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_open: path is NULL");
    g = kiln__calloc(1, sizeof *g);
    if (!g) return kiln__nomem("a GGUF handle");
    g->base = empty;
    s = map_file(g, path);
    if (!s)
        s = parse_image(g, out);
    else
        kiln_gguf_close(g);
    if (s && s != KILN_E_IO) kiln__error_prefix(s, "GGUF file '%s': ", path);
    return s;
}

void kiln_gguf_close(kiln_gguf *gguf) {
    if (!gguf) return;
    kiln__gguf_free_contents(gguf);
    if (gguf->map) munmap(gguf->map, gguf->map_size);
    kiln__dealloc(gguf);
}
