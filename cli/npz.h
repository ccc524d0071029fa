/*
 * npz.h - NumPy's .npz archives, as `kiln onnx run` reads its inputs from and writes its outputs to: a ZIP
 * file (numpy.savez stores its members, numpy.savez_compressed deflates them) whose members are .npy
 * images named NAME.npy, one per array. The ZIP container is libzip's (a Debian package, like the server's
 * libraries); what is inside each member is npy.c's.
 *
 * The reader is an input surface (any file a user names): the archive is opened with libzip's consistency
 * checks, and then every member must be a file named NAME.npy with a non-empty NAME that no other member
 * has, the members' uncompressed sizes together may not exceed what deflate can expand the archive's bytes
 * to (1032 to 1) nor the caller's limit, each member must read back whole with a matching CRC, and each must
 * parse as a .npy image. A failure says which member and why in err. fuzz/fuzz_npz.c fuzzes it.
 */
#ifndef KILN_CLI_NPZ_H
#define KILN_CLI_NPZ_H

#include "npy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NPZ_MAX_MEMBERS 4096

typedef struct npz_member {
    char *name;     /* the member's name without ".npy" */
    uint8_t *image; /* its .npy bytes */
    npy_array a;    /* parsed: a.data points into image */
} npz_member;

typedef struct npz {
    npz_member *members;
    int32_t n;
} npz;

/* True when buf starts like a ZIP archive (a local file header, or the end record of an empty one). */
bool npz_is_zip(const uint8_t *buf, size_t len);

/* Read the .npz image buf[0..len), taking at most max_bytes of member data in all. Returns 0, or -1 with
 * a message in err (NUL-terminated, cap bytes); *out is empty after a failure. */
int npz_parse(const uint8_t *buf, size_t len, uint64_t max_bytes, npz *out, char *err, size_t cap);
void npz_free(npz *z);

/* Write n arrays to path as a .npz archive (members stored, as numpy.savez does): names[i] + ".npy" holds
 * images[i] (lens[i] bytes, from npy_image). Returns 0, or -1 with a message in err. */
int npz_write(const char *path, int32_t n, const char *const *names, uint8_t *const *images,
              const size_t *lens, char *err, size_t cap);

#endif
