/*
 * cpu_features.h - run-time CPU detection and the instruction-set level the CPU kernels use.
 *
 * The level is chosen once, on first use: the best level the CPU and the OS support (cpuid and xgetbv on
 * x86-64), lowered by the KILN_CPU environment variable (ref, avx2, avx512, amx) when it is set. A level
 * the CPU lacks is never used: asking for it selects the best supported level below it. Tests and
 * `kiln bench --cpu` switch levels with kiln__cpu_force_level() between graph computations.
 */
#ifndef KILN_CPU_FEATURES_H
#define KILN_CPU_FEATURES_H

#include <stdbool.h>

typedef enum kiln_cpu_level {
    KILN_CPU_REF = 0,    /* scalar reference kernels only */
    KILN_CPU_AVX2 = 1,   /* AVX2 + FMA + F16C; integer dots with vpmaddubsw */
    KILN_CPU_AVX512 = 2, /* AVX-512 F/BW/VL/DQ + VNNI (vpdpbusd) */
    KILN_CPU_AMX = 3,    /* AVX-512 level plus AMX-INT8 tiles for prefill */
    KILN_CPU_LEVEL_COUNT
} kiln_cpu_level;

typedef struct kiln_cpu_features {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avxvnni;
    bool amx_tile, amx_int8, amx_bf16;
    bool os_avx, os_avx512, os_amx; /* the OS saves the register state (xgetbv) */
} kiln_cpu_features;

/* What the CPU offers (detected once). */
const kiln_cpu_features *kiln__cpu_features(void);
/* The best level this machine supports. */
kiln_cpu_level kiln__cpu_max_level(void);
/* The level in use: the maximum, or KILN_CPU's choice, or the last forced one. */
kiln_cpu_level kiln__cpu_level(void);
/* Use `level` (clamped to the maximum) from now on; returns the level actually selected. Call only while
 * no graph is computing. */
kiln_cpu_level kiln__cpu_force_level(kiln_cpu_level level);
const char *kiln__cpu_level_name(kiln_cpu_level level);
/* Parse "ref", "avx2", "avx512" or "amx"; false for anything else. */
bool kiln__cpu_level_parse(const char *name, kiln_cpu_level *out);

#endif
