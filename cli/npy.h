/*
 * npy.h - NumPy's .npy format, as far as `kiln onnx run` needs it: the reader takes little-endian float32
 * ('<f4') and int64 ('<i8') arrays in C order, format versions 1.0, 2.0 and 3.0, of rank 0 to
 * KILN_MAX_ONNX_RANK; the writer writes every type a session outputs.
 *
 * The reader is an input surface (any file a user names): the magic, the version, the header length
 * against the file, the header's Python-literal dict (its three keys, each once, nothing else), every dim
 * and the element count (overflow-checked) and the data size (exactly what the shape needs) are checked,
 * and a failure says which in err. fuzz/fuzz_npy.c fuzzes it.
 */
#ifndef KILN_CLI_NPY_H
#define KILN_CLI_NPY_H

#include "kiln.h"

#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_HEADER (1u << 20) /* bytes of a header we read (NumPy writes under 4 KiB) */

typedef struct npy_array {
    kiln_onnx_type type; /* KILN_ONNX_FLOAT or KILN_ONNX_INT64 */
    int32_t rank;
    int64_t shape[KILN_MAX_ONNX_RANK];
    const uint8_t *data; /* into the parsed bytes: little-endian elements, not necessarily aligned */
    size_t size;         /* bytes of data */
} npy_array;

/* Write the message into err (NUL-terminated, cap bytes) and return -1: the readers' refusals (npy.c, npz.c).
 */
int npy_fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Parse the .npy image buf[0..len). Returns 0, or -1 with a message in err (NUL-terminated, cap bytes). */
int npy_parse(const uint8_t *buf, size_t len, npy_array *out, char *err, size_t cap);

/* The .npy image of an array of the given type and shape (float32, int64, int32, bool, uint8, int8: what an
 * ONNX session's outputs are), in a buffer the caller frees. Returns 0, or -1 with errno set (EINVAL for a
 * type the writer does not write). */
int npy_image(kiln_onnx_type type, int32_t rank, const int64_t *shape, const void *data, uint8_t **out,
              size_t *len);
/* The same image written to path. Returns 0, or -1 with errno set. */
int npy_write(const char *path, kiln_onnx_type type, int32_t rank, const int64_t *shape, const void *data);

#endif
