/*
 * test_kernels_attention.c - the flash-attention kernel (online softmax over key tiles, causal by loop
 * bounds, GQA heads read in place) at every kernel level, against the reference attention kernel that
 * materializes the scores (kernels_attention.c), on odd shapes that span several key tiles. Both are
 * float computations that differ in summation order and in where the softmax normalization happens:
 * |flash - ref| <= 2e-6 * (1 + |ref|) elementwise (values and weights are in [-1, 1]). One and three
 * threads must agree bit for bit.
 */
#include "harness.h"

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_kv.h"
#include "tensor/types.h"
#include "core/core.h"
#include "graph_run.h"

#include <math.h>
#include <stdlib.h>

typedef struct shape {
    int64_t d, hq, hkv, t;
} shape;

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

/* Run a kernel on every thread share of an nth-thread split, serially, as the pool would. */
static void run_kernel(kiln_cpu_kernel kernel, kiln_tensor *dst, float *scratch, int nth) {
    for (int ith = 0; ith < nth; ith++) {
        kiln_cpu_args a = {dst, ith, nth, scratch, NULL, NULL, NULL};
        kernel(&a);
    }
}

/* Shapes: odd head size with GQA groups of 3; TinyLlama's heads (64, groups of 8) over several
 * 16-row units with different positions in one unit; no GQA (16 positions per unit); a head size that
 * is not a multiple of the kernels' blocks. Key counts end inside and on key-tile edges. */
static void flash_attention_matches_the_reference_at_every_level_across_key_tiles(void) {
    static const shape shapes[] = {{40, 6, 2, 5}, {64, 16, 2, 7}, {24, 3, 3, 37}, {13, 4, 1, 3}};
    static const int32_t pos0s[] = {0, 3, 63, 150};
    enum { MAXQ = 64 * 16 * 7, MAXKV = 64 * 2 * 190 };
    static float q[MAXQ], k[MAXKV], v[MAXKV], want[MAXQ], got[MAXQ], got1[MAXQ];
    static float scratch[8192];
    kiln_tensor tq, tk, tv, dst;
    for (size_t sh = 0; sh < KILN__ARRAY_LEN(shapes); sh++)
        for (size_t c = 0; c < KILN__ARRAY_LEN(pos0s); c++) {
            const shape *p = &shapes[sh];
            int64_t L = pos0s[c] + p->t, nq = p->d * p->hq * p->t;
            fill_random(q, (size_t)nq, 1 + c + 10 * sh);
            fill_random(k, (size_t)(p->d * p->hkv * L), 2 + c + 10 * sh);
            fill_random(v, (size_t)(p->d * p->hkv * L), 3 + c + 10 * sh);
            set_tensor(&tq, q, p->d, p->hq, p->t);
            set_tensor(&tk, k, p->d, p->hkv, L);
            set_tensor(&tv, v, p->d, p->hkv, L);
            set_tensor(&dst, want, p->d, p->hq, p->t);
            dst.op = KILN_OP_ATTENTION;
            dst.src[0] = &tq, dst.src[1] = &tk, dst.src[2] = &tv;
            dst.ip[0] = pos0s[c];
            dst.fp[0] = 1.0f / sqrtf((float)p->d) * 3.0f; /* sharper than usual: larger score spread */
            kiln__cpu_force_level(KILN_CPU_REF);
            run_kernel(kiln__cpu_attention, &dst, scratch, 3);
            for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
                if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
                kiln__cpu_force_level((kiln_cpu_level)l);
                CHECK(kiln__cpu_flash_attention_scratch_floats(&dst) <= KILN__ARRAY_LEN(scratch) - 16);
                dst.data = got1;
                run_kernel(kiln__cpu_flash_attention, &dst, scratch, 1);
                dst.data = got;
                memset(got, 0, sizeof got);
                run_kernel(kiln__cpu_flash_attention, &dst, scratch, 3);
                dst.data = want;
                CHECK(memcmp(got, got1, (size_t)nq * sizeof(float)) == 0); /* thread counts agree bit for bit */
                for (int64_t i = 0; i < nq; i++)
                    if (!(fabsf(got[i] - want[i]) <= 2e-6f * (1.0f + fabsf(want[i])))) {
                        harness_fail(__FILE__, __LINE__, "level %s shape %zu pos0 %d element %lld: %.9g vs reference %.9g",
                                     kiln__cpu_level_name((kiln_cpu_level)l), sh, pos0s[c], (long long)i, got[i],
                                     want[i]);
                        break;
                    }
            }
        }
    kiln__cpu_force_level(kiln__cpu_max_level());
}

/* F16 and Q8_0 caches ([Hkv * D, L], a row per position): each level's kernel against the reference
 * over the same cache rows (both dequantize the same values; they differ in summation order and exp):
 * the same 2e-6 bound. D = 64 and 48 (a Q8_0 block spans two heads' elements when D = 48). */
static void quantized_caches_match_the_reference_at_every_level(void) {
    static const kiln_type types[] = {KILN_TYPE_F16, KILN_TYPE_Q8_0};
    static const shape shapes[] = {{64, 8, 2, 9}, {48, 4, 2, 3}};
    enum { L = 140, MAXQ = 64 * 8 * 9 };
    static float q[MAXQ], kf[64 * 2 * L], vf[64 * 2 * L], want[MAXQ], got[MAXQ];
    static unsigned char kc[2 * 64 * 2 * L], vc[2 * 64 * 2 * L];
    static float scratch[16384];
    kiln_tensor tq, tk, tv, dst;
    for (size_t ti = 0; ti < KILN__ARRAY_LEN(types); ti++)
        for (size_t sh = 0; sh < KILN__ARRAY_LEN(shapes); sh++) {
            const shape *p = &shapes[sh];
            int64_t row = p->d * p->hkv, nq = p->d * p->hq * p->t;
            size_t rb;
            CHECK(kiln_type_row_bytes(types[ti], row, &rb) == KILN_OK);
            fill_random(q, (size_t)nq, 40 + sh);
            fill_random(kf, (size_t)(row * L), 41 + sh);
            fill_random(vf, (size_t)(row * L), 42 + sh);
            for (int64_t j = 0; j < L; j++) {
                kiln_quantize_row(types[ti], kf + j * row, kc + (size_t)j * rb, row);
                kiln_quantize_row(types[ti], vf + j * row, vc + (size_t)j * rb, row);
            }
            set_tensor(&tq, q, p->d, p->hq, p->t);
            memset(&tk, 0, sizeof tk);
            tk.type = types[ti], tk.n_dims = 2;
            tk.ne[0] = row, tk.ne[1] = L, tk.ne[2] = tk.ne[3] = 1;
            tk.nb[0] = kiln__type_traits(types[ti])->block_bytes, tk.nb[1] = rb, tk.nb[2] = tk.nb[3] = rb * L;
            tv = tk;
            tk.data = kc, tv.data = vc;
            set_tensor(&dst, want, p->d, p->hq, p->t);
            dst.op = KILN_OP_ATTENTION;
            dst.src[0] = &tq, dst.src[1] = &tk, dst.src[2] = &tv;
            dst.ip[0] = L - (int32_t)p->t;
            dst.fp[0] = 1.0f / sqrtf((float)p->d) * 3.0f;
            kiln__cpu_force_level(KILN_CPU_REF);
            run_kernel(kiln__cpu_attention_kv, &dst, scratch, 3);
            for (int l = KILN_CPU_REF + 1; l < KILN_CPU_LEVEL_COUNT; l++) {
                if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
                kiln__cpu_force_level((kiln_cpu_level)l);
                CHECK(kiln__cpu_attention_kv_scratch_floats(&dst) <= KILN__ARRAY_LEN(scratch) - 16);
                dst.data = got;
                run_kernel(kiln__cpu_attention_kv, &dst, scratch, 3);
                dst.data = want;
                for (int64_t i = 0; i < nq; i++)
                    if (!(fabsf(got[i] - want[i]) <= 2e-6f * (1.0f + fabsf(want[i])))) {
                        harness_fail(__FILE__, __LINE__, "level %s %s shape %zu element %lld: %.9g vs %.9g",
                                     kiln__cpu_level_name((kiln_cpu_level)l), kiln__type_name(types[ti]), sh,
                                     (long long)i, got[i], want[i]);
                        break;
                    }
            }
        }
    kiln__cpu_force_level(kiln__cpu_max_level());
}

int main(void) {
    RUN(flash_attention_matches_the_reference_at_every_level_across_key_tiles);
    RUN(quantized_caches_match_the_reference_at_every_level);
    return harness_finish();
}
