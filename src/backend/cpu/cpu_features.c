/*
 * cpu_features.c - CPU detection (cpuid, xgetbv, and the Linux AMX permission request) and the active
 * kernel level, with its public switch (kiln_set_cpu_level). See cpu_features.h. aarch64 reads its features from the kernel's hardware capabilities
 * (getauxval(AT_HWCAP)), which is what the kernel promises user space can run. On other architectures
 * every feature reads false and the level is the scalar reference.
 */
#include "backend/cpu/cpu_features.h"

#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
/* The bits of AT_HWCAP (the kernel's uapi asm/hwcap.h), spelled out for C libraries that lack them. */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#endif

static kiln_cpu_features features;
static kiln_cpu_level max_level;
static bool supported[KILN_CPU_LEVEL_COUNT]; /* [level] the CPU runs it and every level down its chain */
static atomic_int active_level;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *const level_names[KILN_CPU_LEVEL_COUNT] = {"ref", "avx2", "avx512", "amx", "neon"};
/* Each level's base: the level whose dispatch table it starts from and that it falls back to. */
static const kiln_cpu_level level_bases[KILN_CPU_LEVEL_COUNT] = {KILN_CPU_REF, KILN_CPU_REF, KILN_CPU_AVX2,
                                                                  KILN_CPU_AVX512, KILN_CPU_REF};

#if defined(__x86_64__) || defined(__i386__)
static unsigned long long read_xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

/* Linux hands out the AMX tile-data state only to processes that ask for it. */
static bool request_amx(void) {
#if defined(__linux__)
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}

static void detect_x86(kiln_cpu_features *f) {
    unsigned int a, b, c, d;
    bool osxsave;
    if (__get_cpuid(0, &a, &b, &c, &d)) /* the vendor string, "AuthenticAMD", in ebx, edx, ecx */
        f->amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    f->family = (a >> 8) & 0xf;
    if (f->family == 0xf) f->family += (a >> 20) & 0xff; /* the extended family */
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    osxsave = (c >> 27) & 1;
    if (osxsave && ((c >> 28) & 1)) {
        unsigned long long xcr0 = read_xcr0();
        f->os_avx = (xcr0 & 0x6) == 0x6;
        f->os_avx512 = f->os_avx && (xcr0 & 0xe0) == 0xe0;
        f->os_amx = (xcr0 & 0x60000) == 0x60000;
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        f->avx2 = (b >> 5) & 1;
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vnni = (c >> 11) & 1;
        f->amx_bf16 = (d >> 22) & 1;
        f->amx_tile = (d >> 24) & 1;
        f->amx_int8 = (d >> 25) & 1;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        f->avxvnni = (a >> 4) & 1;
        f->avx512bf16 = (a >> 5) & 1;
    }
    if (f->os_amx && f->amx_tile && f->amx_int8) f->os_amx = request_amx();
}
#endif

#if defined(__aarch64__)
static void detect_arm(kiln_cpu_features *f) {
#if defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP);
    f->asimd = (hw & HWCAP_ASIMD) != 0;
    f->asimddp = f->asimd && (hw & HWCAP_ASIMDDP) != 0;
#else
    f->asimd = true; /* Advanced SIMD is part of the aarch64 base architecture */
    f->asimddp = false;
#endif
}
#endif

/* Whether the CPU has what a level's kernels execute (a level needs its base as well). */
static bool has_level(const kiln_cpu_features *f, kiln_cpu_level level) {
    switch (level) {
    case KILN_CPU_REF: return true;
    case KILN_CPU_AVX2: return f->os_avx && f->avx2 && f->fma && f->f16c;
    case KILN_CPU_AVX512:
        return f->os_avx512 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni;
    case KILN_CPU_AMX: return f->os_amx && f->amx_tile && f->amx_int8;
    case KILN_CPU_NEON: return f->asimd;
    case KILN_CPU_LEVEL_COUNT: break;
    }
    return false;
}

/* `level`, or the first supported level down its chain; past the last level, the maximum. */
static kiln_cpu_level resolve(kiln_cpu_level level) {
    if (level < KILN_CPU_REF) return KILN_CPU_REF;
    if (level >= KILN_CPU_LEVEL_COUNT) return max_level;
    while (!supported[level]) level = level_bases[level];
    return level;
}

static void detect(void) {
    kiln_cpu_level level;
#if defined(__x86_64__) || defined(__i386__)
    detect_x86(&features);
#elif defined(__aarch64__)
    detect_arm(&features);
#endif
    /* Bases come before the levels on them, so one pass in order settles every chain; the architectures'
     * chains are disjoint, so the highest supported level is the top of this machine's chain. */
    max_level = KILN_CPU_REF;
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        supported[l] = has_level(&features, (kiln_cpu_level)l) &&
                       (l == KILN_CPU_REF || supported[level_bases[l]]);
        if (supported[l]) max_level = (kiln_cpu_level)l;
    }
    level = max_level;
    atomic_store(&active_level, (int)level);
}

const kiln_cpu_features *kiln__cpu_features(void) {
    pthread_once(&once, detect);
    return &features;
}

int kiln__cpu_decode_streams(void) { return kiln__cpu_features()->amd ? 1 : 0; }

bool kiln__cpu_bf16_prefill(void) { return kiln__cpu_features()->amd && kiln__cpu_features()->avx512bf16; }

kiln_cpu_level kiln__cpu_max_level(void) {
    pthread_once(&once, detect);
    return max_level;
}

bool kiln__cpu_level_supported(kiln_cpu_level level) {
    pthread_once(&once, detect);
    return level >= KILN_CPU_REF && level < KILN_CPU_LEVEL_COUNT && supported[level];
}

kiln_cpu_level kiln__cpu_level_base(kiln_cpu_level level) {
    return level >= KILN_CPU_REF && level < KILN_CPU_LEVEL_COUNT ? level_bases[level] : KILN_CPU_REF;
}

kiln_cpu_level kiln__cpu_level(void) {
    pthread_once(&once, detect);
    return (kiln_cpu_level)atomic_load_explicit(&active_level, memory_order_relaxed);
}

kiln_cpu_level kiln__cpu_force_level(kiln_cpu_level level) {
    pthread_once(&once, detect);
    level = resolve(level);
    atomic_store(&active_level, (int)level);
    return level;
}

const char *kiln__cpu_level_name(kiln_cpu_level level) {
    return level >= 0 && level < KILN_CPU_LEVEL_COUNT ? level_names[level] : "unknown";
}

bool kiln__cpu_level_parse(const char *name, kiln_cpu_level *out) {
    for (int i = 0; i < KILN_CPU_LEVEL_COUNT; i++)
        if (!strcmp(name, level_names[i])) {
            *out = (kiln_cpu_level)i;
            return true;
        }
    return false;
}

/* The public level switch (kiln.h). */
kiln_status kiln_set_cpu_level(const char *name) {
    kiln_cpu_level level = kiln__cpu_max_level();
    if (name && *name && strcmp(name, "auto") != 0 && !kiln__cpu_level_parse(name, &level))
        return kiln__error(KILN_E_INVALID_ARG, "CPU level '%s' is not one of auto, ref, avx2, avx512, amx, neon", name);
    kiln__cpu_force_level(level);
    return KILN_OK;
}

const char *kiln_get_cpu_level(void) { return kiln__cpu_level_name(kiln__cpu_level()); }
