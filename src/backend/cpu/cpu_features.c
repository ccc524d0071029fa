/*
 * cpu_features.c - CPU detection (cpuid, xgetbv, and the Linux AMX permission request) and the active
 * kernel level. See cpu_features.h. On other architectures every x86 feature reads false and the level is
 * the scalar reference.
 */
#include "backend/cpu/cpu_features.h"

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

static kiln_cpu_features features;
static kiln_cpu_level max_level;
static atomic_int active_level;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *const level_names[KILN_CPU_LEVEL_COUNT] = {"ref", "avx2", "avx512", "amx"};

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
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
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

static kiln_cpu_level best_level(const kiln_cpu_features *f) {
    if (!(f->os_avx && f->avx2 && f->fma && f->f16c)) return KILN_CPU_REF;
    if (!(f->os_avx512 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni))
        return KILN_CPU_AVX2;
    if (!(f->os_amx && f->amx_tile && f->amx_int8)) return KILN_CPU_AVX512;
    return KILN_CPU_AMX;
}

static void detect(void) {
    kiln_cpu_level level;
    const char *env = getenv("KILN_CPU");
#if defined(__x86_64__) || defined(__i386__)
    detect_x86(&features);
#endif
    max_level = best_level(&features);
    level = max_level;
    if (env && *env && kiln__cpu_level_parse(env, &level) && level > max_level) level = max_level;
    atomic_store(&active_level, (int)level);
}

const kiln_cpu_features *kiln__cpu_features(void) {
    pthread_once(&once, detect);
    return &features;
}

kiln_cpu_level kiln__cpu_max_level(void) {
    pthread_once(&once, detect);
    return max_level;
}

kiln_cpu_level kiln__cpu_level(void) {
    pthread_once(&once, detect);
    return (kiln_cpu_level)atomic_load_explicit(&active_level, memory_order_relaxed);
}

kiln_cpu_level kiln__cpu_force_level(kiln_cpu_level level) {
    pthread_once(&once, detect);
    if (level < KILN_CPU_REF) level = KILN_CPU_REF;
    if (level > max_level) level = max_level;
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
