/*
 * test_kernels_vec.c - the dispatch table's elementwise row helpers (kernels.h; references in
 * kernels_vec_ref.c) at every level this machine supports, on random rows of odd lengths (tails):
 *   add, mul, scale_mul   lane-by-lane float operations in the reference's order: bit-exact;
 *   sum_sq                partial sums in another order: |got - want| <= n * 1.2e-7 * want (all terms >= 0);
 *   swiglu                through the level's exp (2.5e-7 relative) and one division: 1e-6 relative,
 *                         plus 1e-30 absolute for results that underflow;
 *   silu, gelu            against the reference's definitions (see the test for the bounds and the
 *                         inf/NaN behaviour);
 *   exp                   against libm's expf: 2.5e-7 relative (about 2 float ulp); AVX2 and AVX-512
 *                         bit-identical to each other.
 */
#include "harness.h"

#include "backend/cpu/kernels.h"
#include "core/core.h"
#include "graph_run.h"

#include <math.h>

#define N 1043

static float x[N], y[N], want[N], got[N];

static void every_level_adds_and_multiplies_rows_exactly(void) {
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    static const int64_t ns[] = {1, 15, 16, 17, 1043};
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (size_t c = 0; c < KILN__ARRAY_LEN(ns); c++) {
            int64_t n = ns[c];
            fill_random(x, N, 10 + c);
            fill_random(y, N, 20 + c);
            ref->add_f32(want, x, y, n);
            isa->add_f32(got, x, y, n);
            CHECK(memcmp(got, want, (size_t)n * sizeof(float)) == 0);
            ref->mul_f32(want, x, y, n);
            isa->mul_f32(got, x, y, n);
            CHECK(memcmp(got, want, (size_t)n * sizeof(float)) == 0);
            ref->scale_mul_f32(want, 0.37f, x, y, n);
            isa->scale_mul_f32(got, 0.37f, x, y, n);
            CHECK(memcmp(got, want, (size_t)n * sizeof(float)) == 0);
            memcpy(got, x, sizeof x); /* in place: out is the first input */
            isa->add_f32(got, got, y, n);
            ref->add_f32(want, x, y, n);
            CHECK(memcmp(got, want, (size_t)n * sizeof(float)) == 0);
        }
    }
}

static void every_level_sums_squares_within_float_rounding(void) {
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (int64_t n = 1; n <= N; n += 149) {
            fill_random(x, N, (uint64_t)n);
            double exact = 0;
            for (int64_t i = 0; i < n; i++) exact += (double)x[i] * x[i];
            float w = ref->sum_sq_f32(x, n), g = isa->sum_sq_f32(x, n);
            CHECK(fabs(w - exact) <= (double)n * 1.2e-7 * exact);
            CHECK(fabs(g - exact) <= (double)n * 1.2e-7 * exact);
        }
    }
}

static void every_level_swiglu_matches_the_reference(void) {
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        fill_random(x, N, 7);
        fill_random(y, N, 8);
        for (int i = 0; i < N; i++) x[i] *= 40.0f; /* gates far into both tails of the sigmoid */
        x[0] = -120.0f, x[1] = 95.0f, x[2] = 0.0f;
        ref->swiglu_f32(want, x, y, N);
        isa->swiglu_f32(got, x, y, N);
        for (int i = 0; i < N; i++)
            if (!(fabsf(got[i] - want[i]) <= 1e-6f * fabsf(want[i]) + 1e-30f)) {
                harness_fail(__FILE__, __LINE__, "level %s element %d (gate %g): %.9g vs %.9g",
                             kiln__cpu_level_name((kiln_cpu_level)l), i, (double)x[i], got[i], want[i]);
                break;
            }
    }
}

/* silu, gelu and the exact (erf) gelu at every level against the reference level (kiln__act_apply's
 * definitions; libm's erff for the exact form) on a sweep of [-30, 30], random rows of odd length
 * (tails), and the edges. Tolerances (worst seen over 2e6 points of [-30, 30] at AVX2 and AVX-512: 3.1e-7
 * relative for silu, 1.9e-7 |x| for gelu):
 *   silu  |got - want| <= 1e-6 |want| + 1e-30 (the level's exp and one division; swiglu's bound);
 *   gelu  |got - want| <= 4e-7 |x| + 1e-30. The levels compute x / (1 + e^(-2u)), the reference
 *         0.5 x (1 + tanhf(u)); for negative x the reference's 1 + tanhf(u) cancels (tanhf's own
 *         rounding, ~6e-8, becomes absolute error on a factor near 0), so the bound is on |x|, of which
 *         the result is a fraction, not on the result.
 *   gelu_erf  the same bound: the levels' erfc approximation (Abramowitz-Stegun 7.1.26) is within
 *         1.5e-7 absolute, then 2 - erfc and the products round, a few float ulps of the factor
 *         (1 + erf) <= 2 times 0.5 |x|; worst seen at AVX2 over 2e6 points: 2.8e-7 |x| (at x = 0.26).
 * Edges, identical at every level: -inf gives NaN for both (x * 0, as the reference's factor 0 gives);
 * +inf gives +inf; NaN gives NaN; far negative finite inputs (gelu below -10, silu below -88) give -0;
 * huge positive ones give x exactly. */
static void check_act_row(kiln_cpu_level l, const char *name, const float *in, const float *g, const float *w,
                          int n, bool gelu) {
    for (int i = 0; i < n; i++) {
        bool ok;
        if (isnan(w[i])) ok = isnan(g[i]);
        else if (isinf(w[i])) ok = g[i] == w[i];
        else if (gelu) ok = fabsf(g[i] - w[i]) <= 4e-7f * fabsf(in[i]) + 1e-30f;
        else ok = fabsf(g[i] - w[i]) <= 1e-6f * fabsf(w[i]) + 1e-30f;
        if (!ok) {
            harness_fail(__FILE__, __LINE__, "level %s %s element %d (x %.9g): %.9g vs %.9g", kiln__cpu_level_name(l),
                         name, i, (double)in[i], g[i], w[i]);
            return;
        }
    }
}

static void every_level_gelu_gelu_erf_and_silu_match_the_reference(void) {
    enum { NS = 60001 };
    static float sx[NS], sw[NS], sg[NS];
    static const float edge[] = {-INFINITY, INFINITY, NAN, -1e30f, -200.0f, -89.0f, -10.5f, -9.9f, -5.0f,
                                 -0.0f, 0.0f, 1e-30f, -1e-30f, 1e30f, 3e38f, 95.0f};
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    float ew[KILN__ARRAY_LEN(edge)], eg[KILN__ARRAY_LEN(edge)];
    int ne = (int)KILN__ARRAY_LEN(edge);
    for (int i = 0; i < NS; i++) sx[i] = -30.0f + 60.0f * (float)i / (float)(NS - 1);
    fill_random(x, N, 31);
    for (int i = 0; i < N; i++) x[i] *= 8.0f;
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (int fn = 0; fn < 3; fn++) {
            void (*want_fn)(float *, const float *, int64_t) =
                fn == 0 ? ref->silu_f32 : fn == 1 ? ref->gelu_f32 : ref->gelu_erf_f32;
            void (*got_fn)(float *, const float *, int64_t) =
                fn == 0 ? isa->silu_f32 : fn == 1 ? isa->gelu_f32 : isa->gelu_erf_f32;
            const char *name = fn == 0 ? "silu" : fn == 1 ? "gelu" : "gelu_erf";
            bool gelu = fn > 0;
            want_fn(sw, sx, NS);
            got_fn(sg, sx, NS);
            check_act_row((kiln_cpu_level)l, name, sx, sg, sw, NS, gelu);
            want_fn(want, x, 1043);
            memcpy(got, x, sizeof x); /* in place, on a row with a tail */
            got_fn(got, got, 1043);
            check_act_row((kiln_cpu_level)l, name, x, got, want, 1043, gelu);
            want_fn(ew, edge, ne);
            got_fn(eg, edge, ne);
            check_act_row((kiln_cpu_level)l, name, edge, eg, ew, ne, gelu);
            CHECK(isnan(eg[0]) && isnan(ew[0]));                  /* -inf */
            CHECK(eg[1] == INFINITY && isnan(eg[2]));             /* +inf, NaN */
            CHECK(eg[3] == 0.0f && signbit(eg[3]) && eg[4] == 0.0f); /* far negative: -0 */
            CHECK(eg[13] == 1e30f && eg[14] == 3e38f);            /* huge positive: x */
        }
    }
}

/* exp_f32 at every level against libm's expf over the range softmax uses (x <= 0, down to underflow)
 * and beyond: relative error <= 2.5e-7 (about 2 float ulp), exact 0 for -inf and far below. */
static void every_level_exp_is_within_two_ulp_of_libm(void) {
    enum { NE = 20011 };
    static float ex[NE], ey[NE];
    for (int i = 0; i < NE; i++) ex[i] = -103.0f + 190.0f * (float)i / (float)(NE - 1);
    ex[0] = -INFINITY, ex[1] = -200.0f, ex[2] = 0.0f, ex[3] = -0.0f, ex[4] = 1e-8f, ex[5] = -1e-8f;
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        float worst = 0;
        isa->exp_f32(ex, ey, NE);
        CHECK(ey[0] == 0.0f && ey[1] == 0.0f && ey[2] == 1.0f && ey[3] == 1.0f);
        for (int i = 2; i < NE; i++) {
            float e = expf(ex[i]);
            if (e < 1e-37f) continue; /* subnormal results: absolute error below 1e-44 */
            worst = fmaxf(worst, fabsf(ey[i] - e) / e);
        }
        if (!(worst <= 2.5e-7f))
            harness_fail(__FILE__, __LINE__, "level %s: worst relative error %.3g", kiln__cpu_level_name((kiln_cpu_level)l),
                         (double)worst);
    }
}

/* The AVX2 and AVX-512 exps share their reduction and polynomial; only the final scaling by 2^n differs
 * in instructions (two exact power-of-two multiplies against vscalefps), so they agree bit for bit,
 * subnormal results included, and a level switch never moves a softmax. */
static void avx2_and_avx512_exp_give_the_same_bits(void) {
    enum { NE = 4099 };
    static float ex[NE], a[NE], b[NE];
    const kiln_cpu_isa *v2 = kiln__cpu_isa_for(KILN_CPU_AVX2), *v5 = kiln__cpu_isa_for(KILN_CPU_AVX512);
    if (!v2 || !v5) {
        printf("  (skipped: this CPU lacks AVX2 or AVX-512)\n");
        return;
    }
    for (int i = 0; i < NE; i++) ex[i] = -110.0f + 200.0f * (float)i / (float)(NE - 1);
    v2->exp_f32(ex, a, NE);
    v5->exp_f32(ex, b, NE);
    CHECK(memcmp(a, b, sizeof a) == 0);
}

int main(void) {
    RUN(every_level_adds_and_multiplies_rows_exactly);
    RUN(every_level_sums_squares_within_float_rounding);
    RUN(every_level_swiglu_matches_the_reference);
    RUN(every_level_gelu_gelu_erf_and_silu_match_the_reference);
    RUN(every_level_exp_is_within_two_ulp_of_libm);
    RUN(avx2_and_avx512_exp_give_the_same_bits);
    return harness_finish();
}
