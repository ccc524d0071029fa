/*
 * test_kernels_attention.c - the flash-attention kernel (online softmax over key tiles, causal by loop
 * bounds, GQA heads read in place) at every kernel level, against the reference attention kernel that
 * materializes the scores (kernels_attention.c), on odd shapes that span several key tiles. Both are
 * float computations that differ in summation order and in where the softmax normalization happens:
 * |flash - ref| <= 2e-6 * (1 + |ref|) elementwise (values and weights are in [-1, 1]).
 */
#include "harness.h"

#include "backend/cpu/kernels.h"
#include "core/core.h"
#include "graph_run.h"

#include <math.h>
#include <stdlib.h>

#define D 40
#define HQ 6
#define HKV 2
#define T 5

static void set_tensor(kiln_tensor *t, float *data, int64_t ne0, int64_t ne1, int64_t ne2) {
    memset(t, 0, sizeof *t);
    t->type = KILN_TYPE_F32;
    t->n_dims = 3;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2, t->ne[3] = 1;
    t->nb[0] = sizeof(float);
    t->nb[1] = t->nb[0] * (size_t)ne0;
    t->nb[2] = t->nb[1] * (size_t)ne1;
    t->nb[3] = t->nb[2] * (size_t)ne2;
    t->data = data;
}

/* Run a kernel on every thread share of a 3-thread split, serially, as the pool would. */
static void run_kernel(kiln_cpu_kernel kernel, kiln_tensor *dst, float *scratch) {
    for (int ith = 0; ith < 3; ith++) {
        kiln_cpu_args a = {dst, ith, 3, scratch, NULL, NULL, NULL};
        kernel(&a);
    }
}

static void flash_attention_matches_the_reference_at_every_level_across_key_tiles(void) {
    static const int32_t pos0s[] = {0, 3, 63, 150};
    static float q[D * HQ * T], k[D * HKV * 160], v[D * HKV * 160], want[D * HQ * T], got[D * HQ * T];
    static float scratch[4096];
    kiln_tensor tq, tk, tv, dst;
    for (size_t c = 0; c < KILN__ARRAY_LEN(pos0s); c++) {
        int64_t L = pos0s[c] + T;
        fill_random(q, sizeof q / sizeof q[0], 1 + c);
        fill_random(k, sizeof k / sizeof k[0], 2 + c);
        fill_random(v, sizeof v / sizeof v[0], 3 + c);
        set_tensor(&tq, q, D, HQ, T);
        set_tensor(&tk, k, D, HKV, L);
        set_tensor(&tv, v, D, HKV, L);
        set_tensor(&dst, want, D, HQ, T);
        dst.op = KILN_OP_ATTENTION;
        dst.src[0] = &tq, dst.src[1] = &tk, dst.src[2] = &tv;
        dst.ip[0] = pos0s[c];
        dst.fp[0] = 1.0f / sqrtf((float)D) * 3.0f; /* sharper than usual: larger score spread */
        kiln__cpu_force_level(KILN_CPU_REF);
        run_kernel(kiln__cpu_attention, &dst, scratch);
        for (int l = KILN_CPU_REF; l <= (int)kiln__cpu_max_level(); l++) {
            kiln__cpu_force_level((kiln_cpu_level)l);
            dst.data = got;
            memset(got, 0, sizeof got);
            run_kernel(kiln__cpu_flash_attention, &dst, scratch);
            dst.data = want;
            for (int i = 0; i < D * HQ * T; i++)
                if (!(fabsf(got[i] - want[i]) <= 2e-6f * (1.0f + fabsf(want[i])))) {
                    harness_fail(__FILE__, __LINE__, "level %s pos0 %d element %d: %.9g vs reference %.9g",
                                 kiln__cpu_level_name((kiln_cpu_level)l), pos0s[c], i, got[i], want[i]);
                    break;
                }
        }
    }
    kiln__cpu_force_level(kiln__cpu_max_level());
}

int main(void) {
    RUN(flash_attention_matches_the_reference_at_every_level_across_key_tiles);
    return harness_finish();
}
