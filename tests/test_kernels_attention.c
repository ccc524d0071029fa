/*
 * test_kernels_attention.c - the attention kernels under additive masks, at every kernel level:
 *  - the reference kernel (kernels_attention.c, materialized scores) against a double-precision
 *    attention written here, within 1e-5 * (1 + |ref|);
 *  - the flash kernels (generic, and the level's own: x86/avx2_attention.c, avx512_attention.c) over F32
 *    caches, and the F16 / Q8_0 cache kernels (kernels_kv.c, and the level's own), against the reference
 *    over the same values: both are float computations that differ in summation order and in where the
 *    softmax normalization happens, |got - ref| <= 2e-6 * (1 + |ref|) elementwise (values and weights are
 *    in [-1, 1]);
 *  - 1, 2, 3 and 5 threads agree bit for bit at every level.
 * The masks: plain causal; a sliding window; two sequences interleaved token by token over interleaved
 * cells, with free cells between them; two sequences in separate cell ranges with a run of free cells
 * between; padding queries that see no key (their output must be exactly zero); finite non-zero values
 * (an ALiBi-like distance penalty); causal with the float minimum for hidden keys, as exported PyTorch
 * graphs write it, where every 4th query's keys are all hidden (ONNX softmax then averages the values,
 * and so must every kernel: nothing is -inf). Free cells hold NaN in K and V, as a never-written cache cell may:
 * a hidden cell must not reach any output. Shapes span several 16-row units and 64-key tiles.
 */
#include "harness.h"

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_kv.h"
#include "tensor/types.h"
#include "core/core.h"
#include "graph_run.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

typedef struct shape {
    int64_t d, hq, hkv, t;
} shape;

typedef enum mask_kind {
    MASK_CAUSAL,
    MASK_WINDOW,
    MASK_INTERLEAVED,
    MASK_SPLIT_CELLS,
    MASK_PADDING,
    MASK_FINITE,
    MASK_FINITE_MIN,
    MASK_KINDS
} mask_kind;

static const char *const mask_names[MASK_KINDS] = {"causal", "window", "interleaved", "split cells", "padding",
                                                   "finite values", "float minimum"};

enum { WINDOW = 45, GAP = 40 };

/* Cells no query sees: every 7th cell between the interleaved sequences, the gap between split ranges. */
static bool free_cell(mask_kind kind, int64_t C, int64_t j) {
    if (kind == MASK_INTERLEAVED) return j % 7 == 6;
    if (kind == MASK_SPLIT_CELLS) return j >= C / 3 && j < C / 3 + GAP;
    return false;
}

/* Query t is the token at position C - T + t of a single sequence (cells hold positions 0..C-1), or, for
 * the two-sequence masks, of sequence t % 2 (tokens of the two alternate in the batch). */
static bool padding_query(mask_kind kind, int64_t t) { return kind == MASK_PADDING && t % 3 == 1; }

static float mask_value(mask_kind kind, int64_t C, int64_t T, int64_t t, int64_t j) {
    const int64_t pos = C - T + t;
    if (free_cell(kind, C, j) || padding_query(kind, t)) return -INFINITY;
    switch (kind) {
    case MASK_CAUSAL:
    case MASK_PADDING: return j <= pos ? 0.0f : -INFINITY;
    case MASK_WINDOW: return j <= pos && j > pos - WINDOW ? 0.0f : -INFINITY;
    case MASK_INTERLEAVED: return j % 2 == t % 2 && j <= pos ? 0.0f : -INFINITY;
    case MASK_SPLIT_CELLS: {
        const int64_t lo = t % 2 ? C / 3 + GAP : 0, hi = t % 2 ? C : C / 3; /* the sequence's cells */
        const int64_t last = hi - 1 - (T - 1 - t) / 2;                       /* its token's newest cell */
        return j >= lo && j <= last ? 0.0f : -INFINITY;
    }
    case MASK_FINITE: return j <= pos ? -0.07f * (float)(pos - j) - (j % 5 == 0 ? 1.5f : 0.0f) : -INFINITY;
    case MASK_FINITE_MIN: return t % 4 == 3 || j > pos ? -FLT_MAX : 0.0f;
    case MASK_KINDS: break;
    }
    return -INFINITY;
}

static void fill_mask(mask_kind kind, float *mask, int64_t C, int64_t T) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < C; j++) mask[t * C + j] = mask_value(kind, C, T, t, j);
}

static void set_tensor(kiln_tensor *t, void *data, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2) {
    memset(t, 0, sizeof *t);
    t->type = KILN_TYPE_F32;
    t->n_dims = n_dims;
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

/* got against want (n floats of T rows): within tol * (1 + |want|), and exactly zero on padding rows. */
static bool agrees(const float *got, const float *want, int64_t n, int64_t T, mask_kind kind, double tol,
                   const char *what) {
    for (int64_t i = 0; i < n; i++) {
        bool pad = padding_query(kind, i / (n / T));
        if (pad ? got[i] != 0.0f : !(fabs((double)got[i] - want[i]) <= tol * (1.0 + fabs(want[i])))) {
            harness_fail(__FILE__, __LINE__, "%s, mask %s, element %lld: %.9g vs reference %.9g", what,
                         mask_names[kind], (long long)i, got[i], want[i]);
            return false;
        }
    }
    return true;
}

/* Runs kernel with 1, 2, 3 and 5 threads into got; false (and a failure) when the bits differ. */
static bool thread_counts_agree(kiln_cpu_kernel kernel, kiln_tensor *dst, float *got, float *other, float *scratch,
                                int64_t n, const char *what) {
    static const int counts[] = {1, 2, 3, 5};
    void *keep = dst->data;
    dst->data = got;
    run_kernel(kernel, dst, scratch, counts[0]);
    for (size_t c = 1; c < KILN__ARRAY_LEN(counts); c++) {
        memset(other, 0x7f, (size_t)n * sizeof(float));
        dst->data = other;
        run_kernel(kernel, dst, scratch, counts[c]);
        if (memcmp(got, other, (size_t)n * sizeof(float)) != 0) {
            harness_fail(__FILE__, __LINE__, "%s: %d threads differ from 1", what, counts[c]);
            dst->data = keep;
            return false;
        }
    }
    dst->data = keep;
    return true;
}

/* Shapes: odd head size with GQA groups of 3; TinyLlama's heads (64, groups of 8) over several 16-row
 * units with different positions in one unit; no GQA (16 positions per unit); a head size that is not a
 * multiple of the kernels' blocks. C = 150 keys: three 64-key tiles, the last partial. */
static const shape f32_shapes[] = {{40, 6, 2, 5}, {64, 16, 2, 7}, {24, 3, 3, 37}, {13, 4, 1, 3}};
enum { C = 150, MAXQ = 64 * 16 * 7, MAXKV = 64 * 2 * C, MAXMASK = C * 37 };

static float q[MAXQ], k[MAXKV], v[MAXKV], mask[MAXMASK], want[MAXQ], got[MAXQ], other[MAXQ];
static float scratch[32768];

/* Q, K, V and the mask of one case, with NaN in the free cells' K and V; the node over F32 caches. */
static void make_case(const shape *p, mask_kind kind, uint64_t seed, kiln_tensor *tq, kiln_tensor *tk,
                      kiln_tensor *tv, kiln_tensor *tm, kiln_tensor *dst) {
    int64_t row = p->d * p->hkv;
    fill_random(q, (size_t)(p->d * p->hq * p->t), seed);
    fill_random(k, (size_t)(row * C), seed + 1);
    fill_random(v, (size_t)(row * C), seed + 2);
    for (int64_t j = 0; j < C; j++)
        if (free_cell(kind, C, j))
            for (int64_t i = 0; i < row; i++) k[j * row + i] = v[j * row + i] = NAN;
    fill_mask(kind, mask, C, p->t);
    set_tensor(tq, q, 3, p->d, p->hq, p->t);
    set_tensor(tk, k, 3, p->d, p->hkv, C);
    set_tensor(tv, v, 3, p->d, p->hkv, C);
    set_tensor(tm, mask, 2, C, p->t, 1);
    set_tensor(dst, want, 3, p->d, p->hq, p->t);
    dst->op = KILN_OP_ATTENTION;
    dst->src[0] = tq, dst->src[1] = tk, dst->src[2] = tv, dst->src[3] = tm;
    dst->fp[0] = 1.0f / sqrtf((float)p->d) * 3.0f; /* sharper than usual: larger score spread */
}

static void the_reference_matches_a_double_precision_attention_under_every_mask(void) {
    static double ref[MAXQ];
    kiln_tensor tq, tk, tv, tm, dst;
    for (size_t sh = 0; sh < KILN__ARRAY_LEN(f32_shapes); sh++)
        for (int kind = 0; kind < MASK_KINDS; kind++) {
            const shape *p = &f32_shapes[sh];
            int64_t nq = p->d * p->hq * p->t, group = p->hq / p->hkv;
            make_case(p, (mask_kind)kind, 100 + 10 * sh + (uint64_t)kind, &tq, &tk, &tv, &tm, &dst);
            kiln__cpu_force_level(KILN_CPU_REF);
            run_kernel(kiln__cpu_attention, &dst, scratch, 2);
            for (int64_t t = 0; t < p->t; t++)
                for (int64_t h = 0; h < p->hq; h++) {
                    const float *qr = q + (t * p->hq + h) * p->d, *mr = mask + t * C;
                    double s[C], mx = -INFINITY, sum = 0;
                    for (int64_t j = 0; j < C; j++) {
                        const float *kr = k + (j * p->hkv + h / group) * p->d;
                        double dot = 0;
                        if (mr[j] == -INFINITY) {
                            s[j] = -INFINITY;
                            continue;
                        }
                        for (int64_t i = 0; i < p->d; i++) dot += (double)qr[i] * kr[i];
                        s[j] = dot * dst.fp[0] + mr[j];
                        mx = fmax(mx, s[j]);
                    }
                    for (int64_t j = 0; j < C; j++) sum += s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
                    for (int64_t i = 0; i < p->d; i++) {
                        double acc = 0;
                        for (int64_t j = 0; j < C; j++)
                            if (s[j] != -INFINITY) acc += exp(s[j] - mx) / sum * v[(j * p->hkv + h / group) * p->d + i];
                        ref[(t * p->hq + h) * p->d + i] = acc;
                    }
                }
            for (int64_t i = 0; i < nq; i++) got[i] = (float)ref[i];
            agrees(want /* the kernel's */, got /* the double result */, nq, p->t, (mask_kind)kind, 1e-5,
                   "reference vs double");
        }
    kiln__cpu_force_level(kiln__cpu_max_level());
}

static void flash_attention_matches_the_reference_at_every_level_under_every_mask(void) {
    kiln_tensor tq, tk, tv, tm, dst;
    char what[96];
    for (size_t sh = 0; sh < KILN__ARRAY_LEN(f32_shapes); sh++)
        for (int kind = 0; kind < MASK_KINDS; kind++) {
            const shape *p = &f32_shapes[sh];
            int64_t nq = p->d * p->hq * p->t;
            make_case(p, (mask_kind)kind, 1 + 10 * sh + (uint64_t)kind, &tq, &tk, &tv, &tm, &dst);
            kiln__cpu_force_level(KILN_CPU_REF);
            run_kernel(kiln__cpu_attention, &dst, scratch, 3);
            for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
                if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
                kiln__cpu_force_level((kiln_cpu_level)l);
                snprintf(what, sizeof what, "level %s shape %zu", kiln__cpu_level_name((kiln_cpu_level)l), sh);
                CHECK(kiln__cpu_flash_attention_scratch_floats(&dst) <= KILN__ARRAY_LEN(scratch) - 16);
                if (thread_counts_agree(kiln__cpu_flash_attention, &dst, got, other, scratch, nq, what))
                    agrees(got, want, nq, p->t, (mask_kind)kind, 2e-6, what);
            }
        }
    kiln__cpu_force_level(kiln__cpu_max_level());
}

/* F16 and Q8_0 caches ([Hkv * D, C], a row per cell): each level's kernel against the reference kernel
 * over the same cache rows (both dequantize the same values): the same 2e-6 bound. D = 64 and 48 (a Q8_0
 * block spans two heads' elements when D = 48). */
static void quantized_caches_match_the_reference_at_every_level_under_every_mask(void) {
    static const kiln_type types[] = {KILN_TYPE_F16, KILN_TYPE_Q8_0};
    static const shape shapes[] = {{64, 8, 2, 9}, {48, 4, 2, 3}};
    static unsigned char kc[2 * 64 * 2 * C], vc[2 * 64 * 2 * C];
    kiln_tensor tq, tk, tv, tm, dst;
    char what[96];
    for (size_t ti = 0; ti < KILN__ARRAY_LEN(types); ti++)
        for (size_t sh = 0; sh < KILN__ARRAY_LEN(shapes); sh++)
            for (int kind = 0; kind < MASK_KINDS; kind++) {
                const shape *p = &shapes[sh];
                int64_t row = p->d * p->hkv, nq = p->d * p->hq * p->t;
                size_t rb;
                make_case(p, (mask_kind)kind, 40 + 10 * sh + (uint64_t)kind, &tq, &tk, &tv, &tm, &dst);
                CHECK(kiln_type_row_bytes(types[ti], row, &rb) == KILN_OK);
                for (int64_t j = 0; j < C; j++) {
                    if (free_cell((mask_kind)kind, C, j)) { /* never written: all-ones bytes, NaN as F16 and as a Q8_0 scale */
                        memset(kc + (size_t)j * rb, 0xff, rb);
                        memset(vc + (size_t)j * rb, 0xff, rb);
                        continue;
                    }
                    kiln_quantize_row(types[ti], k + j * row, kc + (size_t)j * rb, row);
                    kiln_quantize_row(types[ti], v + j * row, vc + (size_t)j * rb, row);
                }
                tk.type = types[ti], tk.n_dims = 2;
                tk.ne[0] = row, tk.ne[1] = C, tk.ne[2] = tk.ne[3] = 1;
                tk.nb[0] = kiln__type_traits(types[ti])->block_bytes, tk.nb[1] = rb, tk.nb[2] = tk.nb[3] = rb * C;
                tv = tk;
                tk.data = kc, tv.data = vc;
                kiln__cpu_force_level(KILN_CPU_REF);
                run_kernel(kiln__cpu_attention_kv, &dst, scratch, 3);
                for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
                    if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
                    kiln__cpu_force_level((kiln_cpu_level)l);
                    snprintf(what, sizeof what, "level %s %s shape %zu", kiln__cpu_level_name((kiln_cpu_level)l),
                             kiln__type_name(types[ti]), sh);
                    CHECK(kiln__cpu_attention_kv_scratch_floats(&dst) <= KILN__ARRAY_LEN(scratch) - 16);
                    if (thread_counts_agree(kiln__cpu_attention_kv, &dst, got, other, scratch, nq, what))
                        agrees(got, want, nq, p->t, (mask_kind)kind, 2e-6, what);
                }
            }
    kiln__cpu_force_level(kiln__cpu_max_level());
}

int main(void) {
    RUN(the_reference_matches_a_double_precision_attention_under_every_mask);
    RUN(flash_attention_matches_the_reference_at_every_level_under_every_mask);
    RUN(quantized_caches_match_the_reference_at_every_level_under_every_mask);
    return harness_finish();
}
