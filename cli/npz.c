/*
 * npz.c - the .npz reader and writer of `kiln onnx run` (npz.h says what is accepted), over libzip.
 */
#include "npz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#define DEFLATE_RATIO 1032u /* deflate's largest expansion: 258 bytes from a 2-bit code, roughly */

bool npz_is_zip(const uint8_t *buf, size_t len) {
    return len >= 4 && buf[0] == 'P' && buf[1] == 'K' &&
           ((buf[2] == 3 && buf[3] == 4) || (buf[2] == 5 && buf[3] == 6));
}

void npz_free(npz *z) {
    for (int32_t i = 0; z && i < z->n; i++) {
        free(z->members[i].name);
        free(z->members[i].image);
    }
    if (z) {
        free(z->members);
        z->members = NULL;
        z->n = 0;
    }
}

/* Member i of za, whole, into m (its name checked against the members before it). */
static int read_member(zip_t *za, zip_uint64_t i, const npz *z, uint64_t *budget, npz_member *m, char *err,
                       size_t cap) {
    zip_stat_t st;
    zip_file_t *f;
    size_t nlen;
    char perr[256], probe;
    zip_stat_init(&st);
    if (zip_stat_index(za, i, 0, &st) || !(st.valid & ZIP_STAT_NAME) || !(st.valid & ZIP_STAT_SIZE))
        return npy_fail(err, cap, "member %llu: %s", (unsigned long long)i, zip_strerror(za));
    nlen = strlen(st.name);
    if (nlen <= 4 || memcmp(st.name + nlen - 4, ".npy", 4))
        return npy_fail(err, cap, "member '%.200s' is not NAME.npy", st.name);
    for (int32_t j = 0; j < z->n; j++)
        if (strlen(z->members[j].name) == nlen - 4 && !memcmp(z->members[j].name, st.name, nlen - 4))
            return npy_fail(err, cap, "member '%.200s' appears twice", st.name);
    if (st.size > *budget)
        return npy_fail(err, cap, "member '%.200s' holds %llu bytes, over the %llu left to read", st.name,
                        (unsigned long long)st.size, (unsigned long long)*budget);
    *budget -= st.size;
    if (!(m->name = malloc(nlen - 3)) || !(m->image = malloc(st.size ? (size_t)st.size : 1)))
        return npy_fail(err, cap, "member '%.200s': out of memory", st.name);
    memcpy(m->name, st.name, nlen - 4);
    m->name[nlen - 4] = '\0';
    if (!(f = zip_fopen_index(za, i, 0)))
        return npy_fail(err, cap, "member '%.200s': %s", st.name, zip_strerror(za));
    /* The whole member, then one more read: libzip checks the CRC when it reaches the end. */
    zip_int64_t got = st.size ? zip_fread(f, m->image, st.size) : 0;
    zip_int64_t more = got == (zip_int64_t)st.size ? zip_fread(f, &probe, 1) : 0;
    if (got != (zip_int64_t)st.size || more != 0) {
        int rc =
            npy_fail(err, cap, "member '%.200s': %s", st.name,
                     got < 0 || more < 0 ? zip_file_strerror(f) : "its size differs from the directory's");
        zip_fclose(f);
        return rc;
    }
    zip_fclose(f);
    if (npy_parse(m->image, (size_t)st.size, &m->a, perr, sizeof perr))
        return npy_fail(err, cap, "member '%.200s': %s", st.name, perr);
    return 0;
}

int npz_parse(const uint8_t *buf, size_t len, uint64_t max_bytes, npz *out, char *err, size_t cap) {
    zip_error_t ze;
    zip_source_t *src;
    zip_t *za;
    zip_int64_t n;
    uint64_t budget = (uint64_t)len > UINT64_MAX / DEFLATE_RATIO ? UINT64_MAX : (uint64_t)len * DEFLATE_RATIO;
    int rc = 0;
    memset(out, 0, sizeof *out);
    if (budget > max_bytes) budget = max_bytes;
    zip_error_init(&ze);
    if (!(src = zip_source_buffer_create(len ? (const void *)buf : "", len, 0, &ze))) {
        rc = npy_fail(err, cap, "%s", zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return rc;
    }
    if (!(za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze))) {
        rc = npy_fail(err, cap, "not a .npz (ZIP) archive: %s", zip_error_strerror(&ze));
        zip_source_free(src);
        zip_error_fini(&ze);
        return rc;
    }
    zip_error_fini(&ze);
    n = zip_get_num_entries(za, 0);
    if (n < 0 || n > NPZ_MAX_MEMBERS) {
        rc = npy_fail(err, cap, "%lld members (at most %d are read)", (long long)n, NPZ_MAX_MEMBERS);
    } else if (n && !(out->members = calloc((size_t)n, sizeof *out->members))) {
        rc = npy_fail(err, cap, "out of memory");
    }
    for (zip_int64_t i = 0; !rc && i < n; i++) {
        rc = read_member(za, (zip_uint64_t)i, out, &budget, &out->members[i], err, cap);
        out->n = (int32_t)i + 1; /* what read_member allocated is freed below on failure */
    }
    zip_discard(za); /* read-only: nothing to write back; frees the source */
    if (rc) npz_free(out);
    return rc;
}

int npz_write(const char *path, int32_t n, const char *const *names, uint8_t *const *images,
              const size_t *lens, char *err, size_t cap) {
    int zerr = 0;
    zip_t *za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &zerr);
    char member[1024];
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        int rc = npy_fail(err, cap, "cannot create %s: %s", path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return rc;
    }
    for (int32_t i = 0; i < n; i++) {
        zip_source_t *src;
        zip_int64_t at;
        if (snprintf(member, sizeof member, "%s.npy", names[i]) >= (int)sizeof member) {
            zip_discard(za);
            return npy_fail(err, cap, "output name '%.200s...' is too long for a member name", names[i]);
        }
        if (!(src = zip_source_buffer(za, images[i], lens[i], 0)) ||
            (at = zip_file_add(za, member, src, ZIP_FL_ENC_UTF_8 | ZIP_FL_OVERWRITE)) < 0) {
            int rc = npy_fail(err, cap, "%s: member '%s': %s", path, member, zip_strerror(za));
            if (src) zip_source_free(src);
            zip_discard(za);
            return rc;
        }
        zip_set_file_compression(za, (zip_uint64_t)at, ZIP_CM_STORE, 0);
    }
    if (zip_close(za)) {
        int rc = npy_fail(err, cap, "cannot write %s: %s", path, zip_strerror(za));
        zip_discard(za);
        return rc;
    }
    return 0;
}
