/*
 * cpu_features.h - run-time CPU detection and the instruction-set level the CPU kernels use.
 *
 * The level is chosen once, on first use: the best level the CPU and the OS support (cpuid and xgetbv on
 * x86-64, the kernel's hardware capabilities on aarch64), lowered by the KILN_CPU environment variable
 * (ref, avx2, avx512, amx, neon) when it is set. Levels form one chain per architecture, each building on
 * its base (kiln__cpu_level_base): ref <- avx2 <- avx512 <- amx on x86-64, ref <- neon on aarch64. A
 * level the CPU lacks is never used: asking for it selects the first supported level down its chain
 * (so "neon" on x86-64 and "avx2" on aarch64 give ref). Tests and `kiln bench --cpu` switch levels with
 * kiln__cpu_force_level() between graph computations, and skip levels kiln__cpu_level_supported() denies.
 */
#ifndef KILN_CPU_FEATURES_H
#define KILN_CPU_FEATURES_H

#include <stdbool.h>

typedef enum kiln_cpu_level {
    KILN_CPU_REF = 0,    /* scalar reference kernels only */
    KILN_CPU_AVX2 = 1,   /* AVX2 + FMA + F16C; integer dots with vpmaddubsw */
    KILN_CPU_AVX512 = 2, /* AVX-512 F/BW/VL/DQ + VNNI (vpdpbusd) */
    KILN_CPU_AMX = 3,    /* AVX-512 level plus AMX-INT8 tiles for prefill */
    KILN_CPU_NEON = 4,   /* aarch64 Advanced SIMD; integer dots with sdot when the CPU has asimddp */
    KILN_CPU_LEVEL_COUNT
} kiln_cpu_level;

typedef struct kiln_cpu_features {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avxvnni;
    bool amx_tile, amx_int8, amx_bf16;
    bool os_avx, os_avx512, os_amx; /* the OS saves the register state (xgetbv) */
    bool asimd, asimddp;            /* aarch64 hwcaps: Advanced SIMD, its dot-product instructions */
    /* x86-64: the vendor and display family (cpuid leaf 1, extended family added), for the few kernel
     * parameters chosen per microarchitecture where measured (AMD family 0x1a: Zen 5). */
    bool amd;
    unsigned family;
} kiln_cpu_features;

/* What the CPU offers (detected once). */
const kiln_cpu_features *kiln__cpu_features(void);
/* The best level this machine supports (the top of its architecture's chain that the CPU has). */
kiln_cpu_level kiln__cpu_max_level(void);
/* Whether this machine can run `level` (ref always; false for out-of-range values). */
bool kiln__cpu_level_supported(kiln_cpu_level level);
/* The level `level` builds on (ref for ref itself): its dispatch table starts as the base's. */
kiln_cpu_level kiln__cpu_level_base(kiln_cpu_level level);
/* The level in use: the maximum, or the last forced one (kiln_set_cpu_level). */
kiln_cpu_level kiln__cpu_level(void);
/* Use `level` from now on, or the first supported level down its chain (the maximum for values past the
 * last level); returns the level actually selected. Call only while no graph is computing. */
kiln_cpu_level kiln__cpu_force_level(kiln_cpu_level level);
const char *kiln__cpu_level_name(kiln_cpu_level level);
/* How many interleaved weight streams the AVX-512 decode tiles (one activation column; Q8_0, Q4_0, F16,
 * BF16) walk in each group of 16 rows: 1 on AMD CPUs, where one sequential run per thread read fastest
 * and, except for Q8_0, faster still without software prefetches (also the K-quant tiles; measured on a
 * Zen 5 EPYC, docs/performance.md); 0 elsewhere, meaning each tile's own count (4 or 8) with prefetches
 * (measured on Sapphire Rapids). Chosen by vendor, not family: that Zen 5 VM's cpuid reports family 0x19
 * model 0x11 (Genoa's numbers), so a family test would have missed the one machine measured. */
int kiln__cpu_decode_streams(void);
/* Whether F16/BF16 prefill multiplies in bf16 (vdpbf16ps; kernels.h, mm_packed_bf16): on AMD CPUs with
 * AVX512-BF16, where it measured about twice the float tiles' rate (Zen 5, docs/performance.md). Not on
 * Intel until measured there: Sapphire Rapids issues vdpbf16ps on one port against two for the FMA, so
 * it may gain nothing for the lost precision. Keyed on the vendor for the reason given above. */
bool kiln__cpu_bf16_prefill(void);
/* Parse "ref", "avx2", "avx512", "amx" or "neon"; false for anything else. */
bool kiln__cpu_level_parse(const char *name, kiln_cpu_level *out);

#endif
