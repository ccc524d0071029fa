/*
 * kernels_kv.h - kernels for KV caches stored as F16 or Q8_0 rows: writing rows into the cache
 * (converting or quantizing them), attention reading K and V in place, and cast (dequantize to F32, used
 * by the plain attention form). F32 caches go to the regular kernels.
 */
#ifndef KILN_CPU_KERNELS_KV_H
#define KILN_CPU_KERNELS_KV_H

#include "backend/cpu/kernels.h"

void kiln__cpu_cast(const kiln_cpu_args *a);
/* cache_write for any cache type (F32 delegates to kiln__cpu_cache_write). */
void kiln__cpu_cache_write_kv(const kiln_cpu_args *a);
/* attention for any K/V type (F32 delegates to the flash kernel). */
void kiln__cpu_attention_kv(const kiln_cpu_args *a);
size_t kiln__cpu_attention_kv_scratch_floats(const kiln_tensor *node);
/* Cells j0 .. j0 + n of KV head hk (D elements each) as float rows, for the levels' attention kernels:
 * an F32 cache ([D, Hkv, C]) is read in place; an F16 or Q8_0 cache ([Hkv * D, C], a row per cell) is
 * converted into buf ([n][D]), the blocks covering the head's elements at a time, through tmp (D + 64
 * floats). Sets *stride to the returned rows' stride in bytes. */
const char *kiln__cpu_kv_head_rows(const kiln_tensor *c, int64_t D, int64_t hk, int64_t j0, int64_t n, float *buf,
                                   float *tmp, size_t *stride);

#endif
