/*
 * dispatch.c - the kernel dispatch table: one kiln_cpu_isa per level, built once, each level starting
 * from its base's table (kiln__cpu_level_base: avx2 on ref, avx512 on avx2, amx on avx512, neon on ref).
 * kiln__cpu_isa() returns the table of the active level (cpu_features.h), so KILN_CPU or a forced level
 * takes effect at the next graph computation. Tables of levels the CPU lacks stay copies of their base
 * and are never handed out.
 */
#include "backend/cpu/kernels.h"

#include <pthread.h>

static kiln_cpu_isa tables[KILN_CPU_LEVEL_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void build(void) {
    kiln__cpu_isa_init_ref(&tables[KILN_CPU_REF]);
    for (int l = KILN_CPU_REF + 1; l < KILN_CPU_LEVEL_COUNT; l++) { /* a base always precedes its levels */
        tables[l] = tables[kiln__cpu_level_base((kiln_cpu_level)l)];
        tables[l].level = (kiln_cpu_level)l;
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        if (l == KILN_CPU_AVX2) {
            kiln__cpu_isa_init_avx2(&tables[l]);
            kiln__cpu_isa_init_avx2_vec(&tables[l]);
            kiln__cpu_isa_init_avx2_kquants(&tables[l]);
            kiln__cpu_isa_init_avx2_packed(&tables[l]);
            kiln__cpu_isa_init_avx2_packed_kquants(&tables[l]);
            kiln__cpu_isa_init_avx2_pairs(&tables[l]);
            kiln__cpu_isa_init_avx2_attention(&tables[l]);
        }
        if (l == KILN_CPU_AVX512) {
            kiln__cpu_isa_init_avx512(&tables[l]);
            kiln__cpu_isa_init_avx512_packed(&tables[l]);
            kiln__cpu_isa_init_avx512_half(&tables[l]);
            kiln__cpu_isa_init_avx512_bf16(&tables[l]);
            kiln__cpu_isa_init_avx512_kquants(&tables[l]);
            kiln__cpu_isa_init_avx512_attention(&tables[l]);
            kiln__cpu_isa_init_avx512_vec(&tables[l]);
        }
        if (l == KILN_CPU_AMX) kiln__cpu_isa_init_amx(&tables[l]);
        if (l == KILN_CPU_NEON) kiln__cpu_isa_init_neon(&tables[l]);
    }
}

const kiln_cpu_isa *kiln__cpu_isa_for(kiln_cpu_level level) {
    if (!kiln__cpu_level_supported(level)) return NULL;
    pthread_once(&once, build);
    return &tables[level];
}

const kiln_cpu_isa *kiln__cpu_isa(void) { return kiln__cpu_isa_for(kiln__cpu_level()); }
