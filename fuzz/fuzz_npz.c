/*
 * fuzz_npz.c - libFuzzer target for the .npz reader of `kiln onnx run` (cli/npz.c over libzip, and npy.c
 * for each member): the ZIP container as libzip opens it with its consistency checks, the members' names
 * (NAME.npy, unique), their sizes against the budget (here 1 MiB, and deflate's 1032:1 of the input), each
 * member read whole with its CRC, and each parsed as a .npy image.
 *
 * A refusal must come with a message and leave nothing behind; an accepted archive must have at most
 * NPZ_MAX_MEMBERS members, each with a non-empty name no other member has and an array as fuzz_npy checks
 * it, inside the member's image (its first and last bytes are touched). Any crash, sanitizer report or trap
 * is a bug. See fuzz/README.md.
 */
#include "npz.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static volatile uint8_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npz z;
    char err[512];
    err[0] = '\0';
    if (npz_parse(data, size, (uint64_t)1 << 20, &z, err, sizeof err)) {
        if (!err[0] || z.n != 0 || z.members) __builtin_trap();
        return 0;
    }
    if (z.n < 0 || z.n > NPZ_MAX_MEMBERS) __builtin_trap();
    for (int32_t i = 0; i < z.n; i++) {
        const npz_member *m = &z.members[i];
        uint64_t n = 1;
        if (!m->name[0]) __builtin_trap();
        for (int32_t j = 0; j < i; j++)
            if (!strcmp(z.members[j].name, m->name)) __builtin_trap();
        if (m->a.type != KILN_ONNX_FLOAT && m->a.type != KILN_ONNX_INT64) __builtin_trap();
        if (m->a.rank < 0 || m->a.rank > KILN_MAX_ONNX_RANK) __builtin_trap();
        for (int32_t d = 0; d < m->a.rank; d++) {
            if (m->a.shape[d] < 0) __builtin_trap();
            n *= (uint64_t)m->a.shape[d];
        }
        if (m->a.size != n * (m->a.type == KILN_ONNX_FLOAT ? 4u : 8u)) __builtin_trap();
        if (m->a.data < m->image) __builtin_trap();
        if (m->a.size) sink ^= m->a.data[0] ^ m->a.data[m->a.size - 1];
    }
    npz_free(&z);
    return 0;
}
