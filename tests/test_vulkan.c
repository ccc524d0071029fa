/*
 * test_vulkan.c - the Vulkan backend (docs/vulkan.md) on whatever Vulkan device the machine has (Mesa's
 * lavapipe on this project's machines; every test is skipped, with a message, when there is none):
 *   - the device list, and `auto` never picking a CPU device;
 *   - the buffer verbs and every kind of sub-buffer view, read back after device writes, byte for byte;
 *   - a weight over maxStorageBufferRange bound in row ranges;
 *   - a committed range recorded once and replayed with new inputs;
 *   - the pool's size-bucket reuse and least-recently-used eviction, by its counters;
 *   - the memory pool against no pool on a real workload (stories260K, a prefill and 64 decode steps);
 *   - greedy generation on "vulkan" against the public goldens of test_generate.c, and the logits against
 *     the CPU's within a tolerance; the KV cache on the device, the whole decode one split;
 *   - forced fallbacks (an op refused, an allocation failing at start, no loader) give the CPU's output.
 * The fallbacks and the pool comparison use the backend's test hooks (kiln__vulkan_set_test_hooks in
 * backend.h: an op refused, an allocation failing, no pool, another loader library).
 */
#include "harness.h"

#include "backend/backend.h"
#include "backend/vulkan/vk_hazard.h"
#include "graph/graph.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/sched.h"
#include "tensor/quantize.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool have_vulkan;

static bool skip(void) {
    if (!have_vulkan)
        printf("  skipped: no Vulkan device (%s)\n", kiln_devices_note() ? kiln_devices_note() : "none");
    return !have_vulkan;
}

/* ---- Goldens (tests/data/golden, as test_generate.c reads them) ---- */

static kiln_model *load(const char *devices) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_model *m = NULL;
    mp.n_threads = 2;
    mp.devices = devices;
    CHECK_OK(kiln_model_load_ex(KILN_MODEL_PATH, &mp, &m));
    return m;
}

/* Greedy from the prompt to n_total ids; the first step's logits go to first_logits (may be NULL). */
static const char *greedy_passes; /* the graph passes of greedy's contexts (NULL: all) */
static kiln_type greedy_kv = KILN_TYPE_F32; /* the KV cache type of greedy's (and the schedule's) contexts */

static size_t greedy(kiln_model *m, const harness_golden *g, size_t n_total, int32_t *out, float *first_logits) {
    kiln_ctx_params p = harness_ctx_params();
    kiln_ctx *ctx = NULL;
    const float *logits = NULL;
    size_t n = g->n_prompt;
    p.n_ctx = 256;
    p.passes = greedy_passes;
    p.kv_type = greedy_kv;
    CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    if (!ctx) return 0;
    memcpy(out, g->prompt, g->n_prompt * sizeof *out);
    CHECK_OK(kiln_ctx_decode(ctx, g->prompt, (int32_t)g->n_prompt, &logits));
    if (logits && first_logits) memcpy(first_logits, logits, (size_t)kiln_model_n_vocab(m) * sizeof(float));
    while (logits && n < n_total) {
        out[n] = harness_argmax(logits, kiln_model_n_vocab(m));
        if (++n < n_total) CHECK_OK(kiln_ctx_decode(ctx, &out[n - 1], 1, &logits));
    }
    kiln_ctx_destroy(ctx);
    return n;
}

static void check_ids(const harness_golden *g, const int32_t *ids, size_t n, const char *what) {
    CHECK_EQ_INT(n, g->n_ids);
    for (size_t i = 0; i < n && i < g->n_ids; i++)
        if (ids[i] != g->ids[i]) {
            harness_fail(__FILE__, __LINE__, "%s: id %zu is %d, golden %d", what, i, ids[i], g->ids[i]);
            return;
        }
}

/* ---- Devices ---- */

static void the_device_list_describes_each_device_and_auto_never_picks_a_cpu_device(void) {
    kiln_device_info d;
    bool any_gpu = false;
    kiln_model *m;
    if (skip()) return;
    CHECK(kiln_device_count() >= 1);
    CHECK_STATUS(kiln_device_get(kiln_device_count(), &d), KILN_E_RANGE);
    for (int32_t i = 0; i < kiln_device_count(); i++) {
        CHECK_OK(kiln_device_get(i, &d));
        CHECK_EQ_INT(d.index, i);
        CHECK(d.name[0] != '\0');
        CHECK(d.n_heaps >= 1 && d.heap_bytes[0] > 0);
        CHECK(d.max_storage_buffer_range >= (1u << 27) - 1); /* the Vulkan minimum is 2^27 - 1 */
        CHECK(d.subgroup_size >= 1 && d.max_shared_memory >= 16384);
        any_gpu |= d.type == KILN_DEVICE_DISCRETE_GPU || d.type == KILN_DEVICE_INTEGRATED_GPU;
    }
    if (any_gpu) return; /* auto would take the GPU; the rest pins the CPU-only machine */
    m = load("auto");
    if (!m) return;
    CHECK_STR(kiln_model_backends(m), "cpu");
    CHECK(kiln_model_device_note(m) && strstr(kiln_model_device_note(m), "no discrete or integrated GPU"));
    kiln_model_destroy(m);
    m = load("vulkan");
    if (m) CHECK(strncmp(kiln_model_backends(m), "vulkan:0 (", 10) == 0 && kiln_model_device_note(m) == NULL);
    kiln_model_destroy(m);
}

/* ---- Buffers and views ---- */

enum { BIG = (9 << 20) + 13 }; /* more than two trips through the 4 MiB staging ring, odd-sized */

static void the_buffer_verbs_move_every_byte_of_every_sub_range(void) {
    kiln_backend *vk = NULL;
    kiln_buffer a = {0}, b = {0};
    unsigned char *host = malloc(BIG), *model = malloc(BIG), *back = malloc(BIG);
    if (skip() || !host || !model || !back) goto done;
    CHECK_OK(kiln__backend_vulkan_create(0, &vk));
    if (!vk) goto done;
    CHECK(!kiln__backend_is_host(vk));
    CHECK_OK(kiln__backend_buffer_alloc(vk, BIG, &a));
    CHECK_OK(kiln__backend_buffer_alloc(vk, 4099, &b));
    for (size_t i = 0; i < BIG; i++)
        host[i] = (unsigned char)(i * 131u + (i >> 9));
    memcpy(model, host, BIG);
    CHECK_OK(kiln__buffer_set(&a, 0, host, BIG));
    /* Sets, fills and copies at odd offsets and lengths, mirrored on the host model. */
    CHECK_OK(kiln__buffer_set(&a, 4097, host + 77, 12345));
    memcpy(model + 4097, host + 77, 12345);
    CHECK_OK(kiln__buffer_memset(&a, 3, 0xab, 1001)); /* unaligned: through the ring */
    memset(model + 3, 0xab, 1001);
    CHECK_OK(kiln__buffer_memset(&a, 8192, 0x5c, 4096)); /* aligned: a device fill */
    memset(model + 8192, 0x5c, 4096);
    CHECK_OK(kiln__buffer_copy(&a, 100, &a, 150, (5 << 20) + 1)); /* overlapping, forwards */
    memmove(model + 150, model + 100, (5 << 20) + 1);
    CHECK_OK(kiln__buffer_copy(&a, 7000001, &a, 6999990, 1 << 20)); /* overlapping, backwards */
    memmove(model + 6999990, model + 7000001, 1 << 20);
    CHECK_OK(kiln__buffer_copy(&a, 333, &b, 1, 4098)); /* into another buffer */
    CHECK_OK(kiln__buffer_copy(&b, 1, &a, BIG - 4098, 4098));
    memmove(model + BIG - 4098, model + 333, 4098);
    CHECK_OK(kiln__buffer_get(&a, 0, back, BIG));
    CHECK(memcmp(back, model, BIG) == 0);
    /* Reads of sub-ranges at every small offset and length. */
    for (size_t off = 0; off < 9; off++)
        for (size_t len = 1; len < 70; len += 7) {
            unsigned char piece[80];
            CHECK_OK(kiln__buffer_get(&a, (4 << 20) - 4 + off, piece, len));
            if (memcmp(piece, model + (4 << 20) - 4 + off, len)) {
                harness_fail(__FILE__, __LINE__, "get at %zu + %zu differs", (size_t)(4 << 20) - 4 + off,
                             len);
                off = 9;
                break;
            }
        }
    CHECK_STATUS(kiln__buffer_get(&a, BIG - 1, back, 2), KILN_E_RANGE);
done:
    if (vk) {
        kiln__backend_buffer_free(vk, &a);
        kiln__backend_buffer_free(vk, &b);
    }
    kiln__backend_destroy(vk);
    free(host);
    free(model);
    free(back);
}

/* An upload of several ring slots returns once its bytes are in the ring: one submission per piece, a wait
 * only when the ring comes back to a slot in flight, the last pieces still in flight on return, and the
 * caller's bytes free at once. Whatever comes after it sees the bytes in program order: a small upload
 * recorded before it (which its first piece carries to the queue), one recorded after it, and a read. */
static void an_upload_overlaps_its_pieces_and_what_follows_sees_them_in_order(void) {
    enum { PIECE = 4 << 20, N = 3 * PIECE + 4096 + 3, AT = N - 103 };
    kiln_backend *vk = NULL;
    kiln_buffer a = {0};
    unsigned char *host = malloc(N), *model = malloc(N), *back = malloc(N), small[64];
    uint32_t in_flight;
    uint64_t waits0, waits, submits;
    if (skip() || !host || !model || !back) goto done;
    CHECK_OK(kiln__backend_vulkan_create(0, &vk));
    if (!vk) goto done;
    CHECK_OK(kiln__backend_buffer_alloc(vk, N, &a));
    for (size_t i = 0; i < N; i++)
        host[i] = (unsigned char)(i * 77u + (i >> 11));
    memset(small, 0xc3, sizeof small);
    CHECK_OK(kiln__buffer_set(&a, 8, small, sizeof small)); /* deferred; overwritten by the upload below */
    kiln__backend_vulkan_ring(vk, &in_flight, &waits0);
    submits = kiln__backend_vulkan_submits(vk);
    CHECK_OK(kiln__buffer_set(&a, 0, host, N));
    memcpy(model, host, N);
    kiln__backend_vulkan_ring(vk, &in_flight, &waits);
    CHECK_EQ_INT(kiln__backend_vulkan_submits(vk) - submits, 4); /* 3 whole slots and a tail */
    CHECK_EQ_INT(waits - waits0, 2);                              /* pieces 3 and 4 came back round */
    CHECK_EQ_INT(in_flight, 2);
    memset(host, 0, N); /* the caller's buffer is its own again */
    memset(small, 0x3c, sizeof small);
    CHECK_OK(kiln__buffer_set(&a, AT, small, sizeof small)); /* after the upload, over its last piece */
    memcpy(model + AT, small, sizeof small);
    CHECK_OK(kiln__buffer_get(&a, 0, back, N));
    CHECK(memcmp(back, model, N) == 0);
    kiln__backend_vulkan_ring(vk, &in_flight, &waits);
    CHECK_EQ_INT(in_flight, 0); /* the read waited, and so did everything before it */
done:
    if (vk) kiln__backend_buffer_free(vk, &a);
    kiln__backend_destroy(vk);
    free(host);
    free(model);
    free(back);
}

/* Free what a test's scheduled run made: the plan, the scheduler, n arenas (unallocated ones skipped), the
 * graph. */
static void free_run(kiln_sched_plan *p, kiln_sched *s, kiln_buffer *arenas, int n, kiln_graph *g) {
    kiln__sched_plan_destroy(p);
    kiln__sched_destroy(s);
    for (int b = 0; b < n; b++)
        if (arenas[b].backend) kiln__backend_buffer_free(arenas[b].backend, &arenas[b]);
    kiln__graph_destroy(g);
}

/* g ordered and planned on vk with the CPU behind it: one split, on vk, its arenas allocated and the plan
 * committed. NULL when it could not be (the test has failed then); the caller frees with free_run. */
static kiln_sched_plan *one_split(kiln_graph *g, kiln_backend *vk, kiln_backend *cpu, kiln_sched **s,
                                  kiln_buffer arenas[2]) {
    kiln_sched_backend list[2] = {{vk, 0}, {cpu, 0}};
    kiln_sched_plan *p = NULL;
    CHECK_OK(kiln__graph_order(g));
    CHECK_OK(kiln__sched_create(list, 2, s));
    if (*s) CHECK_OK(kiln__sched_plan_create(*s, g, 1, &p));
    if (!p) return NULL;
    CHECK_EQ_INT(kiln__sched_plan_n_splits(p), 1);
    CHECK_EQ_INT(kiln__sched_plan_split_backend(p, 0), 0);
    for (int b = 0; b < 2; b++)
        if (kiln__sched_plan_arena_bytes(p, b))
            CHECK_OK(kiln__backend_buffer_alloc(list[b].backend, kiln__sched_plan_arena_bytes(p, b), &arenas[b]));
    CHECK_OK(kiln__sched_plan_commit(p, arenas));
    return p;
}

/* Kernels reading views at offsets that are not binding-aligned (rows with gaps, a transpose, a slice
 * of a weight) and writing into the arena; each output is read back and checked exactly (x2 is exact). */
static void every_kind_of_view_reads_back_what_the_device_wrote(void) {
    enum { N = 1000 };
    static float x[N], w[N];
    kiln_backend *vk = NULL, *cpu = NULL;
    kiln_graph *g = NULL;
    kiln_sched *s = NULL;
    kiln_sched_plan *p = NULL;
    kiln_buffer arenas[2] = {{0}};
    if (skip()) return;
    for (int i = 0; i < N; i++)
        x[i] = (float)i * 0.25f - 100.0f, w[i] = (float)(i % 97) - 48.0f;
    CHECK_OK(kiln__backend_vulkan_create(0, &vk));
    CHECK_OK(kiln__backend_cpu_create(1, &cpu));
    CHECK_OK(kiln__graph_create(64, &g));
    if (!vk || !cpu || !g) goto done;
    int64_t n = N;
    kiln_tensor *xl = kiln__graph_leaf(g, "x", KILN_TYPE_F32, 1, &n, x, KILN_TENSOR_INPUT);
    kiln_tensor *wl = kiln__graph_leaf(g, "w", KILN_TYPE_F32, 1, &n, w, KILN_TENSOR_WEIGHT);
    int64_t ne1[1] = {37}, ne2[2] = {10, 5}, ne3[2] = {7, 3};
    size_t nb1[1] = {4}, nb2[2] = {4, 4 * 13}, nb3[2] = {4, 4 * 11};
    kiln_tensor *outs[5];
    outs[0] = kiln__scale(g, kiln__view(g, xl, 1, ne1, nb1, 4 * 3), 2.0f, 0.0f); /* a slice at 12 bytes */
    outs[1] = kiln__cont(g, kiln__view(g, xl, 2, ne2, nb2, 4 * 101));            /* rows with gaps */
    outs[2] = kiln__cont(g, kiln__transpose(g, kiln__view(g, xl, 2, ne3, nb3, 4 * 5))); /* a transpose */
    outs[3] = kiln__scale(g, kiln__view(g, wl, 1, ne1, nb1, 4 * 501), 2.0f, 0.0f);      /* a weight's slice */
    outs[4] =
        kiln__cont(g, kiln__view(g, outs[0], 2, ne3, nb3, 4 * 1)); /* rows with gaps of a device result */
    for (int i = 0; i < 5; i++)
        kiln__graph_set_output(g, outs[i]);
    if (!(p = one_split(g, vk, cpu, &s, arenas))) goto done;
    CHECK_OK(kiln__sched_compute(p));
    const float *o0 = kiln__sched_plan_output(p, 0)->data, *o1 = kiln__sched_plan_output(p, 1)->data;
    const float *o2 = kiln__sched_plan_output(p, 2)->data, *o3 = kiln__sched_plan_output(p, 3)->data;
    const float *o4 = kiln__sched_plan_output(p, 4)->data;
    int bad = 0;
    for (int i = 0; i < 37; i++)
        bad += o0[i] != 2.0f * x[3 + i] || o3[i] != 2.0f * w[501 + i];
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 10; c++)
            bad += o1[r * 10 + c] != x[101 + r * 13 + c];
    for (int r = 0; r < 7; r++) /* transpose of [7, 3] with row stride 11: out[r][c] = v[c][r] */
        for (int c = 0; c < 3; c++)
            bad += o2[r * 3 + c] != x[5 + c * 11 + r];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 7; c++)
            bad += o4[r * 7 + c] != 2.0f * x[3 + 1 + r * 11 + c];
    CHECK_EQ_INT(bad, 0);
    /* The arena read back through get at each output's place and at odd sub-offsets. */
    for (int i = 0; i < 5; i++) {
        const kiln_tensor *t = kiln__graph_output(g, i), *h = kiln__sched_plan_output(p, i);
        size_t bytes = kiln__tensor_nbytes(t);
        unsigned char back[4096];
        for (size_t off = 0; off + 3 < bytes && off < 9; off += 3) {
            CHECK_OK(kiln__buffer_get(&arenas[0], t->plan_offset + off, back, bytes - off));
            CHECK(memcmp(back, (const unsigned char *)h->data + off, bytes - off) == 0);
        }
    }
done:
    free_run(p, s, arenas, 2, g);
    kiln__backend_destroy(vk);
    kiln__backend_destroy(cpu);
}

/* A weight of 1024 x 33000 floats (135 MB) is over lavapipe's 128 MiB binding limit: it is bound in
 * ranges of rows, and the product matches the CPU's. */
static void a_weight_over_the_binding_limit_is_bound_in_row_ranges(void) {
    enum { K = 1024, NR = 33000, M = 2 };
    float *wt = malloc((size_t)K * NR * sizeof(float)), xs[K * M];
    kiln_backend *vk = NULL, *cpu = NULL;
    kiln_device_info d;
    if (skip() || !wt) goto done;
    CHECK_OK(kiln_device_get(0, &d));
    if ((uint64_t)K * NR * 4 <= d.max_storage_buffer_range) {
        printf("  skipped: device 0 binds %llu bytes at once\n",
               (unsigned long long)d.max_storage_buffer_range);
        goto done;
    }
    for (size_t i = 0; i < (size_t)K * NR; i++)
        wt[i] = (float)(((uint32_t)i * 2654435761u) >> 22) / 1024.0f - 0.5f;
    for (int i = 0; i < K * M; i++)
        xs[i] = (float)(i % 17) / 16.0f - 0.5f;
    CHECK_OK(kiln__backend_vulkan_create(0, &vk));
    CHECK_OK(kiln__backend_cpu_create(2, &cpu));
    float *out[2] = {NULL, NULL};
    for (int run = 0; run < 2 && vk && cpu; run++) {
        kiln_graph *g = NULL;
        kiln_sched *s = NULL;
        kiln_sched_plan *p = NULL;
        kiln_buffer arenas[2] = {{0}};
        kiln_sched_backend list[2] = {{vk, 0}, {cpu, 0}};
        int64_t wne[2] = {K, NR}, xne[2] = {K, M};
        CHECK_OK(kiln__graph_create(16, &g));
        kiln_tensor *y =
            kiln__matmul(g, kiln__graph_leaf(g, "w", KILN_TYPE_F32, 2, wne, wt, KILN_TENSOR_WEIGHT),
                         kiln__graph_leaf(g, "x", KILN_TYPE_F32, 2, xne, xs, KILN_TENSOR_INPUT));
        kiln__graph_set_output(g, y);
        CHECK_OK(kiln__graph_order(g));
        CHECK_OK(kiln__sched_create(run == 0 ? &list[1] : list, run == 0 ? 1 : 2, &s));
        CHECK_OK(kiln__sched_plan_create(s, g, M, &p));
        if (p && run == 1) CHECK_EQ_INT(kiln__sched_plan_split_backend(p, 0), 0);
        for (int b = 0; p && b < 2 - (run == 0); b++) {
            kiln_backend *be = run == 0 ? cpu : list[b].backend;
            if (kiln__sched_plan_arena_bytes(p, b))
                CHECK_OK(kiln__backend_buffer_alloc(be, kiln__sched_plan_arena_bytes(p, b), &arenas[b]));
        }
        if (p) CHECK_OK(kiln__sched_plan_commit(p, arenas));
        if (p) CHECK_OK(kiln__sched_compute(p));
        if (p && (out[run] = malloc((size_t)NR * M * sizeof(float))))
            memcpy(out[run], kiln__sched_plan_output(p, 0)->data, (size_t)NR * M * sizeof(float));
        free_run(p, s, arenas, 2, g);
    }
    if (out[0] && out[1]) {
        double worst = 0, mag = 0;
        for (size_t i = 0; i < (size_t)NR * M; i++) {
            worst = fmax(worst, fabs((double)out[0][i] - out[1][i]));
            mag = fmax(mag, fabs((double)out[0][i]));
        }
        printf("  %d rows in ranges: max error %.2g of max |y| %.3g\n", NR, worst, mag);
        CHECK(worst <= 1e-5 * mag);
    }
    free(out[0]);
    free(out[1]);
done:
    kiln__backend_destroy(vk);
    kiln__backend_destroy(cpu);
    free(wt);
}

/* ---- Recording once, replaying ---- */

/* y = silu(W x) + x on the device, computed 4 times with new input values: recorded once, replayed 3
 * times, each result right; a new arena (other addresses) records again. */
static void a_committed_range_is_recorded_once_and_replayed_with_new_inputs(void) {
    enum { K = 64, NR = 64 };
    static float w[K * NR], x[K];
    kiln_backend *vk = NULL, *cpu = NULL;
    kiln_graph *g = NULL;
    kiln_sched *s = NULL;
    kiln_sched_plan *p = NULL;
    kiln_buffer arenas[2][2] = {{{0}}};
    uint64_t recorded = 0, replayed = 0;
    if (skip()) return;
    for (int i = 0; i < K * NR; i++)
        w[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    CHECK_OK(kiln__backend_vulkan_create(0, &vk));
    CHECK_OK(kiln__backend_cpu_create(1, &cpu));
    CHECK_OK(kiln__graph_create(16, &g));
    if (!vk || !cpu || !g) goto done;
    int64_t wne[2] = {K, NR}, xne[1] = {K};
    kiln_tensor *xl = kiln__graph_leaf(g, "x", KILN_TYPE_F32, 1, xne, x, KILN_TENSOR_INPUT);
    kiln_tensor *y = kiln__add(
        g,
        kiln__silu(
            g, kiln__matmul(g, kiln__graph_leaf(g, "w", KILN_TYPE_F32, 2, wne, w, KILN_TENSOR_WEIGHT), xl)),
        xl);
    kiln__graph_set_output(g, y);
    CHECK_OK(kiln__graph_order(g));
    kiln_sched_backend list[2] = {{vk, 0}, {cpu, 0}};
    CHECK_OK(kiln__sched_create(list, 2, &s));
    CHECK_OK(kiln__sched_plan_create(s, g, 1, &p));
    if (!p) goto done;
    CHECK_EQ_INT(kiln__sched_plan_n_splits(p), 1);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            if (kiln__sched_plan_arena_bytes(p, b))
                CHECK_OK(kiln__backend_buffer_alloc(list[b].backend, kiln__sched_plan_arena_bytes(p, b),
                                                    &arenas[a][b]));
    for (int step = 0; step < 6; step++) {
        int bad = 0;
        uint64_t submits = kiln__backend_vulkan_submits(vk);
        if (step == 0 || step == 4) CHECK_OK(kiln__sched_plan_commit(p, arenas[step == 4]));
        for (int i = 0; i < K; i++)
            x[i] = (float)((i + step * 5) % 13) / 13.0f - 0.4f;
        CHECK_OK(kiln__sched_compute(p));
        const float *out = kiln__sched_plan_output(p, 0)->data;
        for (int n = 0; n < NR; n++) {
            float dot = 0.0f;
            for (int k = 0; k < K; k++)
                dot += w[n * K + k] * x[k];
            float want = dot / (1.0f + expf(-dot)) + x[n];
            bad += fabsf(out[n] - want) > 1e-5f * (1.0f + fabsf(want));
        }
        if (bad) harness_fail(__FILE__, __LINE__, "step %d: %d outputs wrong", step, bad);
        /* A replayed step is two submissions: the input's upload rides with the kernels, then the
         * output's download. */
        if (step == 2 || step == 3 || step == 5) CHECK_EQ_INT(kiln__backend_vulkan_submits(vk) - submits, 2);
    }
    kiln__backend_vulkan_replays(vk, &recorded, &replayed);
    printf("  6 computes over 2 arenas: %llu recorded, %llu replayed\n", (unsigned long long)recorded,
           (unsigned long long)replayed);
    CHECK_EQ_INT(recorded, 2);
    CHECK_EQ_INT(replayed, 4);
done:
    free_run(p, s, &arenas[0][0], 4, g);
    kiln__backend_destroy(vk);
    kiln__backend_destroy(cpu);
}

/* ---- Barriers only between dependent dispatches (vk_hazard.h; no device needed) ---- */

static kiln_vk_range rng(uint64_t buffer, uint64_t lo, uint64_t hi) {
    return (kiln_vk_range){buffer, lo, hi};
}

/* Whether a dispatch reading r0 (and r1 when r1.hi > r1.lo) and writing w must wait. */
static bool waits(kiln_vk_hazards *h, kiln_vk_range r0, kiln_vk_range r1, kiln_vk_range w) {
    kiln_vk_range r[2] = {r0, r1};
    return kiln__vk_hazards_add(h, r, 2, &w, 1);
}

static void a_dispatch_waits_only_for_what_it_reads_or_overwrites(void) {
    kiln_vk_hazards h;
    kiln_vk_range none = rng(1, 0, 0), x = rng(1, 0, 256), a = rng(1, 256, 512), b = rng(1, 512, 768);
    kiln__vk_hazards_clear(&h);
    CHECK(!waits(&h, x, rng(2, 0, 4096), a)); /* a = W1 x */
    CHECK(!waits(&h, x, rng(2, 4096, 8192), b)); /* b = W2 x: reads what the first read, writes elsewhere */
    CHECK(waits(&h, a, b, rng(1, 768, 1024)));   /* read after write */
    /* After the barrier only the last dispatch is pending: reading a (written before it) is free. */
    CHECK(!waits(&h, a, none, rng(3, 0, 64)));
    CHECK(waits(&h, rng(1, 1000, 1004), none, rng(3, 64, 128))); /* reads a byte the last one wrote */
    kiln__vk_hazards_clear(&h);
    CHECK(!waits(&h, x, none, a));
    CHECK(waits(&h, b, none, rng(1, 200, 300))); /* write after read (x's end) and after write (a's start) */
    kiln__vk_hazards_clear(&h);
    CHECK(!waits(&h, x, none, a));
    CHECK(waits(&h, b, none, rng(1, 300, 400))); /* write after write */
    kiln__vk_hazards_clear(&h);
    CHECK(!waits(&h, x, none, a));
    CHECK(!waits(&h, rng(1, 512, 600), none, rng(2, 256, 512))); /* same bytes of another buffer */
    CHECK(!waits(&h, rng(1, 512, 600), none, rng(1, 600, 700))); /* ranges that only touch */
    CHECK(!waits(&h, x, rng(1, 256, 256), rng(4, 0, 8)));        /* an empty range is no access */
    /* Beyond the ranges tracked, a dispatch waits even when independent. */
    kiln__vk_hazards_clear(&h);
    int first_wait = -1;
    for (int i = 0; i < KILN_VK_HAZARD_RANGES + 1 && first_wait < 0; i++)
        if (waits(&h, rng(5, 0, 64), none, rng(6, (uint64_t)i * 64, (uint64_t)i * 64 + 64))) first_wait = i;
    CHECK_EQ_INT(first_wait, KILN_VK_HAZARD_RANGES);
}

/* Two matmuls of one activation and their sum: three dispatches, one barrier (before the sum; the second
 * matmul does not wait for the first), and the right values on the device. */
static void independent_matmuls_share_one_barrier(void) {
    enum { K = 64, NR = 32 };
    static float w1[K * NR], w2[K * NR], x[K];
    kiln_backend *vk = NULL, *cpu = NULL;
    kiln_graph *g = NULL;
    kiln_sched *s = NULL;
    kiln_sched_plan *p = NULL;
    kiln_buffer arenas[2] = {{0}};
    uint64_t d0 = 0, b0 = 0, d1 = 0, b1 = 0;
    if (skip()) return;
    for (int i = 0; i < K * NR; i++) {
        w1[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
        w2[i] = (float)((i * 13) % 7) / 7.0f - 0.5f;
    }
    for (int k = 0; k < K; k++)
        x[k] = (float)(k % 9) / 9.0f - 0.3f;
    CHECK_OK(kiln__backend_vulkan_create(0, &vk));
    CHECK_OK(kiln__backend_cpu_create(1, &cpu));
    CHECK_OK(kiln__graph_create(16, &g));
    if (!vk || !cpu || !g) goto done;
    int64_t wne[2] = {K, NR}, xne[1] = {K};
    kiln_tensor *xl = kiln__graph_leaf(g, "x", KILN_TYPE_F32, 1, xne, x, KILN_TENSOR_INPUT);
    kiln_tensor *y =
        kiln__add(g, kiln__matmul(g, kiln__graph_leaf(g, "w1", KILN_TYPE_F32, 2, wne, w1, KILN_TENSOR_WEIGHT), xl),
                  kiln__matmul(g, kiln__graph_leaf(g, "w2", KILN_TYPE_F32, 2, wne, w2, KILN_TENSOR_WEIGHT), xl));
    kiln__graph_set_output(g, y);
    if (!(p = one_split(g, vk, cpu, &s, arenas))) goto done;
    kiln__backend_vulkan_barriers(vk, &d0, &b0);
    CHECK_OK(kiln__sched_compute(p));
    kiln__backend_vulkan_barriers(vk, &d1, &b1);
    CHECK_EQ_INT(d1 - d0, 3);
    CHECK_EQ_INT(b1 - b0, 1);
    const float *out = kiln__sched_plan_output(p, 0)->data;
    int bad = 0;
    for (int n = 0; n < NR; n++) {
        float want = 0.0f;
        for (int k = 0; k < K; k++)
            want += (w1[n * K + k] + w2[n * K + k]) * x[k];
        bad += fabsf(out[n] - want) > 1e-5f * (1.0f + fabsf(want));
    }
    CHECK_EQ_INT(bad, 0);
done:
    free_run(p, s, arenas, 2, g);
    kiln__backend_destroy(vk);
    kiln__backend_destroy(cpu);
}

/* Q8_0 matmuls over one activation graph: ya = W1 x1 + W2 x1 (two matmuls of one activation) and
 * yb = W3 x2 (another activation of the same shape), all three summed. */
static void q8_three_matmuls(kiln_backend *vk, kiln_backend *cpu, void *wq[3], float *x1, float *x2,
                             int64_t K, int64_t NR, float *out, uint64_t *dispatches, uint64_t *reused) {
    kiln_graph *g = NULL;
    kiln_sched *s = NULL;
    kiln_sched_plan *p = NULL;
    kiln_buffer arenas[2] = {{0}};
    uint64_t d0 = 0, d1 = 0, b = 0, r0 = kiln__backend_vulkan_q8_reused(vk);
    int64_t wne[2] = {K, NR}, xne[1] = {K};
    CHECK_OK(kiln__graph_create(16, &g));
    if (!g) return;
    kiln_tensor *a = kiln__graph_leaf(g, "x1", KILN_TYPE_F32, 1, xne, x1, KILN_TENSOR_INPUT);
    kiln_tensor *c = kiln__graph_leaf(g, "x2", KILN_TYPE_F32, 1, xne, x2, KILN_TENSOR_INPUT);
    kiln_tensor *w[3];
    for (int i = 0; i < 3; i++)
        w[i] = kiln__graph_leaf(g, i == 0 ? "w1" : i == 1 ? "w2" : "w3", KILN_TYPE_Q8_0, 2, wne, wq[i],
                                KILN_TENSOR_WEIGHT);
    kiln_tensor *y = kiln__add(g, kiln__add(g, kiln__matmul(g, w[0], a), kiln__matmul(g, w[1], a)),
                               kiln__matmul(g, w[2], c));
    kiln__graph_set_output(g, y);
    if ((p = one_split(g, vk, cpu, &s, arenas))) {
        kiln__backend_vulkan_barriers(vk, &d0, &b);
        CHECK_OK(kiln__sched_compute(p));
        kiln__backend_vulkan_barriers(vk, &d1, &b);
        memcpy(out, kiln__sched_plan_output(p, 0)->data, (size_t)NR * sizeof *out);
    }
    *dispatches = d1 - d0;
    *reused = kiln__backend_vulkan_q8_reused(vk) - r0;
    free_run(p, s, arenas, 2, g);
}

/* A quantized matmul's activation is quantized once per activation, not once per matmul: two matmuls of one
 * x read the q8 rows the first left in the scratch (one quantize_q8 dispatch fewer), a third of another x of
 * the same shape quantizes its own, and the sum is the CPU's: the same q8 rows and integer dots, the block
 * terms summed in another order (test_backend_ops' 1e-4 of max |ref|). */
static void one_activation_is_quantized_once_for_every_matmul_that_reads_it(void) {
    enum { K = 128, NR = 48 };
    static float w[3][K * NR], x1[K], x2[K], got[NR], want[NR];
    static unsigned char wq[3][K / 32 * 34 * NR];
    void *wp[3] = {wq[0], wq[1], wq[2]};
    kiln_backend *vk = NULL, *cpu = NULL, *cpu2 = NULL;
    uint64_t dispatches = 0, reused = 0, d_cpu = 0, r_cpu = 0;
    if (skip()) return;
    for (int i = 0; i < 3; i++) {
        for (int e = 0; e < K * NR; e++)
            w[i][e] = (float)(((e + 7 * i) * 37) % 23) / 23.0f - 0.5f;
        kiln__quantize_q8_0(w[i], wq[i], K * NR);
    }
    for (int k = 0; k < K; k++) {
        x1[k] = (float)(k % 9) / 9.0f - 0.3f;
        x2[k] = (float)(k % 5) / 5.0f - 0.45f;
    }
    CHECK_OK(kiln__backend_vulkan_create(0, &vk));
    CHECK_OK(kiln__backend_cpu_create(1, &cpu));
    CHECK_OK(kiln__backend_cpu_create(1, &cpu2));
    if (vk && cpu && cpu2) {
        q8_three_matmuls(vk, cpu, wp, x1, x2, K, NR, got, &dispatches, &reused);
        q8_three_matmuls(cpu2, cpu, wp, x1, x2, K, NR, want, &d_cpu, &r_cpu); /* the CPU alone */
        printf("  three Q8_0 matmuls over two activations: %llu dispatches, %llu quantize reused\n",
               (unsigned long long)dispatches, (unsigned long long)reused);
        CHECK_EQ_INT(reused, 1);
        CHECK_EQ_INT(dispatches, 2 + 3 + 2); /* two quantizes, three mul_mv, two adds */
        double worst = 0, mag = 0;
        for (int n = 0; n < NR; n++) {
            worst = fmax(worst, fabs((double)got[n] - want[n]));
            mag = fmax(mag, fabs((double)want[n]));
        }
        CHECK(worst <= 1e-4 * mag);
    }
    kiln__backend_destroy(vk);
    kiln__backend_destroy(cpu);
    kiln__backend_destroy(cpu2);
}

/* stories260K on vulkan and a 64-cell context of it that has decoded the 3-token prompt; NULL (the test has
 * failed, *m may still need destroying) when either could not be made. */
static const int32_t prompt3[3] = {1, 403, 407};

static kiln_ctx *prompted_context(kiln_model **m) {
    kiln_ctx_params p = harness_ctx_params();
    kiln_ctx *ctx = NULL;
    const float *logits = NULL;
    *m = load("vulkan");
    p.n_ctx = 64;
    if (*m) CHECK_OK(kiln_ctx_create(*m, &p, &ctx));
    if (ctx) CHECK_OK(kiln_ctx_decode(ctx, prompt3, 3, &logits));
    return ctx;
}

/* stories260K's decode step on the device: the barriers it records, fewer than its dispatches. */
static void a_decode_step_waits_less_often_than_it_dispatches(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    const float *logits = NULL;
    uint64_t d0 = 0, b0 = 0, d1 = 0, b1 = 0;
    if (skip()) return;
    if (!(ctx = prompted_context(&m))) goto done;
    kiln_backend *vk = m->engine->backends[0];
    kiln__backend_vulkan_barriers(vk, &d0, &b0);
    CHECK_OK(kiln_ctx_decode(ctx, prompt3, 1, &logits)); /* a new plan (one token): recorded */
    kiln__backend_vulkan_barriers(vk, &d1, &b1);
    printf("  one decode step: %llu dispatches, %llu barriers between them\n", (unsigned long long)(d1 - d0),
           (unsigned long long)(b1 - b0));
    CHECK(d1 - d0 > 0);
    CHECK(b1 - b0 < d1 - d0);
done:
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

/* ---- The kernel profile ---- */

/* While the profile is on, every dispatch of every submission is counted once in its kernel's row (a
 * replay as much as a recording), the rows add up to the kernels' time, come most time first, and lie
 * within the host's wait for those submissions; off, nothing more is counted; on again starts from zero.
 * (The whole step is one split on the device: the CPU, profiled too, runs nothing of it.) */
static void the_profile_times_every_dispatch_while_it_is_on(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    const float *logits = NULL;
    uint64_t d0 = 0, d1 = 0, b = 0, sum = 0;
    kiln_device_profile pr, again;
    if (skip()) return;
    if (!(ctx = prompted_context(&m))) goto done;
    CHECK_OK(kiln_ctx_decode(ctx, prompt3, 1, &logits));
    kiln_backend *vk = m->engine->backends[0];
    CHECK_OK(kiln_model_profile(m, true));
    kiln__backend_vulkan_barriers(vk, &d0, &b);
    CHECK_OK(kiln_ctx_decode(ctx, &prompt3[1], 1, &logits)); /* profiling is in the key: recorded anew */
    kiln__backend_vulkan_barriers(vk, &d1, &b);
    CHECK_OK(kiln_ctx_decode(ctx, &prompt3[2], 1, &logits)); /* the same step again */
    CHECK_OK(kiln_model_profile_read(m, &pr));
    sum = harness_check_profile(&pr);
    printf("  two profiled steps: %llu submissions, %llu recorded, %llu dispatches in %d kernels, kernels %.3f ms "
           "of %.3f ms waited\n", (unsigned long long)pr.computes, (unsigned long long)pr.recorded,
           (unsigned long long)sum, (int)pr.n_kernels, (double)pr.kernel_ns * 1e-6, (double)pr.submit_ns * 1e-6);
    CHECK(d1 > d0);
    CHECK_EQ_INT(sum, 2 * (d1 - d0));
    CHECK_EQ_INT(pr.computes, 2);
    CHECK(pr.recorded >= 1);
    CHECK(harness_profile_has(&pr, "mul_mv f32")); /* stories260K's weights are F32 */
    CHECK_OK(kiln_model_profile(m, false));
    CHECK_OK(kiln_ctx_decode(ctx, prompt3, 1, &logits));
    CHECK_OK(kiln_model_profile_read(m, &again));
    CHECK_EQ_INT(again.computes, pr.computes);
    CHECK_EQ_INT(harness_profile_calls(&again), sum);
    CHECK_OK(kiln_model_profile(m, true));
    CHECK_OK(kiln_model_profile_read(m, &again));
    CHECK_EQ_INT(again.computes, 0);
    CHECK_EQ_INT(again.n_kernels, 0);
done:
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

/* ---- The pool's buckets and LRU ---- */

/* Freed buffers are kept and taken back by a request of their size bucket; beyond the cache's 256 MiB the
 * least recently freed are released, and their blocks given back to the driver. 48 MiB buffers are more
 * than half a 64 MiB block, so each is a block of its own and the counts are exact. */
static void freed_buffers_are_reused_by_bucket_and_evicted_least_recently_used_first(void) {
    enum { N = 6 };
    const size_t big = (size_t)48 << 20;
    kiln_backend *vk = NULL;
    kiln_buffer bufs[N] = {{0}}, again = {0}, small = {0}, other = {0};
    kiln_backend_memory m0, m;
    if (skip()) return;
    CHECK_OK(kiln__backend_vulkan_create(0, &vk));
    if (!vk) return;
    kiln__backend_memory(vk, &m0); /* the start-up probe's block */
    for (int i = 0; i < N; i++)
        CHECK_OK(kiln__backend_buffer_alloc(vk, big, &bufs[i]));
    kiln__backend_memory(vk, &m);
    CHECK_EQ_INT(m.device.allocations - m0.device.allocations, N);
    for (int i = 0; i < N; i++)
        kiln__backend_buffer_free(vk, &bufs[i]);
    kiln__backend_memory(vk, &m);
    /* 6 x 48 = 288 MiB freed, after the start-up probe's small buffer: to get back within 256 MiB the two
     * least recently freed go, the probe's (its block, now empty, with it) and the first 48 MiB one. */
    CHECK_EQ_INT(m.device.evictions - m0.device.evictions, 2);
    CHECK_EQ_INT(m.device.frees - m0.device.frees, 2);
    CHECK_OK(kiln__backend_buffer_alloc(vk, big - 4096, &again)); /* same bucket: a reuse, no allocation */
    kiln__backend_memory(vk, &m);
    CHECK_EQ_INT(m.device.reuses - m0.device.reuses, 1);
    CHECK_EQ_INT(m.device.allocations - m0.device.allocations, N);
    CHECK_OK(kiln__backend_buffer_alloc(vk, 1000, &small)); /* no cached buffer of its bucket: a new block */
    CHECK_OK(kiln__backend_buffer_alloc(vk, 1000, &other)); /* carved from that block */
    kiln__backend_memory(vk, &m);
    CHECK_EQ_INT(m.device.reuses - m0.device.reuses, 1);
    CHECK_EQ_INT(m.device.allocations - m0.device.allocations, N + 1);
    CHECK(m.device.peak_bytes >= (uint64_t)N * big);
    printf(
        "  %llu allocations, %llu frees, %llu requests, %llu reuses, %llu evictions, peak %.0f MiB in use\n",
        (unsigned long long)m.device.allocations, (unsigned long long)m.device.frees,
        (unsigned long long)m.device.requests, (unsigned long long)m.device.reuses,
        (unsigned long long)m.device.evictions, (double)m.device.peak_bytes / 1048576.0);
    kiln__backend_buffer_free(vk, &again);
    kiln__backend_buffer_free(vk, &small);
    kiln__backend_buffer_free(vk, &other);
    kiln__backend_destroy(vk);
}

/* ---- The pool on a real workload ---- */

/* A prompt and 64 greedy decode steps on "vulkan"; the model's device memory figures in *mem. */
static void workload(kiln_device_memory *mem) {
    harness_golden g = {0};
    int32_t ids[256];
    kiln_model_memory mm;
    kiln_model *m = load("vulkan");
    memset(mem, 0, sizeof *mem);
    if (!m) return;
    harness_golden_load("\"once_upon_a_time_64\"", &g);
    greedy(m, &g, g.n_prompt + 64, ids, NULL);
    CHECK_OK(kiln_model_memory_info(m, &mm));
    *mem = mm.device;
    kiln_model_destroy(m);
}

static void the_pool_makes_at_least_half_fewer_device_allocations_than_no_pool(void) {
    kiln_device_memory pooled, plain;
    if (skip()) return;
    workload(&pooled);
    const kiln_vulkan_test_hooks no_pool = {.no_pool = true};
    kiln__vulkan_set_test_hooks(&no_pool);
    workload(&plain);
    kiln__vulkan_set_test_hooks(NULL);
    printf("  pool:    %llu device allocations, %llu requests, %llu reuses, %llu evictions, %llu bytes held, "
           "peak %llu bytes in use, weights %llu bytes\n",
           (unsigned long long)pooled.allocations, (unsigned long long)pooled.requests,
           (unsigned long long)pooled.reuses, (unsigned long long)pooled.evictions,
           (unsigned long long)pooled.bytes, (unsigned long long)pooled.peak_bytes,
           (unsigned long long)pooled.weight_bytes);
    printf("  no pool: %llu device allocations, %llu requests, %llu frees\n",
           (unsigned long long)plain.allocations, (unsigned long long)plain.requests,
           (unsigned long long)plain.frees);
    CHECK(pooled.requests > 0 && plain.requests == pooled.requests);
    CHECK(plain.allocations >= 2);
    CHECK(pooled.allocations * 2 <= plain.allocations);
}

/* ---- End to end ---- */

static void greedy_on_vulkan_reproduces_the_goldens_and_the_cpu_logits(void) {
    static const char *sections[2] = {"\"bos_only_200\"", "\"once_upon_a_time_64\""};
    kiln_model *vk, *cpu;
    if (skip()) return;
    vk = load("vulkan");
    cpu = load(NULL);
    for (int k = 0; k < 2 && vk && cpu; k++) {
        harness_golden g = {0};
        int32_t ids[256];
        int32_t V = kiln_model_n_vocab(cpu);
        float *lv = malloc((size_t)V * sizeof(float)), *lc = malloc((size_t)V * sizeof(float));
        harness_golden_load(sections[k], &g);
        if (!lv || !lc || !g.n_ids) {
            free(lv);
            free(lc);
            continue;
        }
        check_ids(&g, ids, greedy(vk, &g, g.n_ids, ids, lv), sections[k]);
        greedy(cpu, &g, g.n_prompt + 1, ids, lc);
        double worst = 0.0, mag = 0.0;
        for (int32_t i = 0; i < V; i++) {
            worst = fmax(worst, fabs((double)lv[i] - lc[i]));
            mag = fmax(mag, fabs((double)lc[i]));
        }
        printf("  %s: %zu ids as the golden; first logits differ from the CPU's by at most %.2g (max |logit| "
               "%.3g)\n",
               sections[k], g.n_ids, worst, mag);
        CHECK(worst <= 1e-4 * mag);
        free(lv);
        free(lc);
    }
    kiln_model_destroy(vk);
    kiln_model_destroy(cpu);
}

/* With env set (name=value), a model on "vulkan" gives the harness_golden ids; its backends and note checked. */
/* With the test hooks h, a model on "vulkan" gives the harness_golden ids; its backends and note checked. */
static void fallback_case(const char *what, const kiln_vulkan_test_hooks *h, const char *backends_prefix,
                          const char *note) {
    harness_golden g = {0};
    int32_t ids[256];
    kiln_model *m;
    kiln__vulkan_set_test_hooks(h);
    m = load("vulkan");
    kiln__vulkan_set_test_hooks(NULL);
    if (!m) return;
    harness_golden_load("\"once_upon_a_time_64\"", &g);
    check_ids(&g, ids, greedy(m, &g, g.n_ids, ids, NULL), what);
    if (strncmp(kiln_model_backends(m), backends_prefix, strlen(backends_prefix)))
        harness_fail(__FILE__, __LINE__, "%s: backends '%s'", what, kiln_model_backends(m));
    if (note && (!kiln_model_device_note(m) || !strstr(kiln_model_device_note(m), note)))
        harness_fail(__FILE__, __LINE__, "%s: note '%s' lacks '%s'", what,
                     kiln_model_device_note(m) ? kiln_model_device_note(m) : "(none)", note);
    kiln_model_destroy(m);
}

/* Without the passes attention is plain ops (matmul over a permuted cache view, cont, softmax), all of
 * which the device must run since the cache lives there; the goldens still hold. */
static void the_goldens_hold_on_vulkan_without_the_graph_passes(void) {
    harness_golden g = {0};
    int32_t ids[256];
    kiln_model *m;
    if (skip()) return;
    m = load("vulkan");
    harness_golden_load("\"once_upon_a_time_64\"", &g);
    greedy_passes = "none";
    if (m) check_ids(&g, ids, greedy(m, &g, g.n_ids, ids, NULL), "passes none");
    greedy_passes = NULL;
    kiln_model_destroy(m);
}

static void forced_fallbacks_give_the_cpu_output(void) {
    const kiln_vulkan_test_hooks refuse_matmul = {.refuse = KILN_OP_MATMUL};
    const kiln_vulkan_test_hooks refuse_norm = {.refuse = KILN_OP_RMS_NORM_MUL};
    const kiln_vulkan_test_hooks fail_first = {.fail_alloc = 1};
    const kiln_vulkan_test_hooks no_loader = {.loader = "libkiln-no-such-loader.so.1"};
    if (skip()) return;
    fallback_case("matmul refused", &refuse_matmul, "vulkan:0", NULL);
    fallback_case("rms_norm_mul refused", &refuse_norm, "vulkan:0", NULL);
    fallback_case("first allocation failing", &fail_first, "cpu", "injected by a test");
    fallback_case("no loader", &no_loader, "cpu", "no Vulkan loader");
}

/* An allocation failing after start is a clean error of the call that needed it, not a crash. Without the
 * pool every buffer is a block of its own: block 1 is the start-up probe, block 2 the context's KV cache
 * (it lives on the device), block 3 the first buffer a decode asks for. */
static void a_device_allocation_failing_later_is_a_clean_error(void) {
    for (int32_t failing = 2; failing <= 3; failing++) {
        kiln_model *m;
        kiln_ctx *ctx = NULL;
        kiln_ctx_params p = harness_ctx_params();
        const float *logits = NULL;
        int32_t tok = 1;
        const kiln_vulkan_test_hooks hooks = {.fail_alloc = failing, .no_pool = true};
        if (skip()) return;
        kiln__vulkan_set_test_hooks(&hooks);
        m = load("vulkan");
        kiln__vulkan_set_test_hooks(NULL);
        if (!m) return;
        p.n_ctx = 64;
        if (failing == 2) {
            CHECK_STATUS(kiln_ctx_create(m, &p, &ctx), KILN_E_NOMEM);
            CHECK_ERROR_MENTIONS("vkAllocateMemory");
            CHECK(ctx == NULL);
        } else {
            CHECK_OK(kiln_ctx_create(m, &p, &ctx));
            if (ctx) CHECK_STATUS(kiln_ctx_decode(ctx, &tok, 1, &logits), KILN_E_NOMEM);
            if (ctx) CHECK_ERROR_MENTIONS("vkAllocateMemory");
            /* The failed step left nothing behind: no cell taken, and the same step now runs. */
            if (ctx) CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), -1);
            if (ctx) CHECK_OK(kiln_ctx_decode(ctx, &tok, 1, &logits));
            if (ctx) CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 0);
        }
        kiln_ctx_destroy(ctx);
        kiln_model_destroy(m);
    }
}

/* The weight upload reports through kiln_model_params.progress, as the CPU's packing does: each run of
 * calls climbs to done == total, and the totals of the runs add up to the weight bytes the device holds. */
typedef struct upload_progress {
    uint64_t last_done, last_total, finished_bytes;
    int32_t calls, out_of_order;
} upload_progress;

static void note_progress(void *user, uint64_t done, uint64_t total) {
    upload_progress *u = user;
    bool run_goes_on = u->last_done < u->last_total; /* an unfinished run: this call continues it */
    if (run_goes_on ? total != u->last_total || done <= u->last_done : done == 0 || done > total)
        u->out_of_order++;
    u->calls++;
    u->last_done = done;
    u->last_total = total;
    if (done == total) u->finished_bytes += total;
}

static void the_weight_upload_reports_progress_up_to_the_total(void) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_model_memory mem = {0};
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    kiln_ctx_params p = harness_ctx_params();
    upload_progress u = {0};
    const float *logits = NULL;
    int32_t prompt[3] = {1, 403, 407};
    if (skip()) return;
    mp.n_threads = 2;
    mp.devices = "vulkan";
    mp.progress = note_progress;
    mp.progress_user = &u;
    CHECK_OK(kiln_model_load_ex(KILN_MODEL_PATH, &mp, &m));
    p.n_ctx = 32;
    if (m) CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    if (ctx) CHECK_OK(kiln_ctx_decode(ctx, prompt, 3, &logits));
    if (ctx) CHECK_OK(kiln_ctx_decode(ctx, prompt, 1, &logits));
    if (m) CHECK_OK(kiln_model_memory_info(m, &mem));
    CHECK(u.calls > 1);
    CHECK_EQ_INT(u.out_of_order, 0);
    CHECK(u.last_done == u.last_total);
    CHECK(mem.device.weight_bytes > 0);
    CHECK(u.finished_bytes == mem.device.weight_bytes);
    printf("  %d progress calls, %llu of %llu weight bytes reported\n", u.calls,
           (unsigned long long)u.finished_bytes, (unsigned long long)mem.device.weight_bytes);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

/* With the cache on the device the whole decode graph is one split on it; an op that touches the cache
 * refused (attention) puts the cache back on the CPU. The schedule is read from the context's log. */
static char schedule_line[512];

static void keep_schedule(void *user, const char *line) {
    (void)user;
    if (!strncmp(line, "schedule: ", 10)) snprintf(schedule_line, sizeof schedule_line, "%s", line);
}

static void schedule_of_one_decode(const kiln_vulkan_test_hooks *h, char *out, size_t cap) {
    kiln_ctx_params p = harness_ctx_params();
    kiln_ctx *ctx = NULL;
    kiln_model *m;
    const float *logits = NULL;
    int32_t tok = 1;
    kiln__vulkan_set_test_hooks(h);
    m = load("vulkan");
    kiln__vulkan_set_test_hooks(NULL);
    schedule_line[0] = '\0';
    p.n_ctx = 64;
    p.kv_type = greedy_kv;
    p.log = keep_schedule;
    if (m) CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    if (ctx) CHECK_OK(kiln_ctx_decode(ctx, &tok, 1, &logits));
    snprintf(out, cap, "%s", schedule_line);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

static void the_kv_cache_lives_on_the_device_and_the_whole_decode_is_one_split(void) {
    const kiln_vulkan_test_hooks refuse_attention = {.refuse = KILN_OP_ATTENTION};
    char line[512];
    if (skip()) return;
    schedule_of_one_decode(NULL, line, sizeof line);
    if (!strstr(line, "schedule: 1 splits") || !strstr(line, "cpu 0 bytes"))
        harness_fail(__FILE__, __LINE__, "cache on the device: '%s'", line);
    schedule_of_one_decode(&refuse_attention, line, sizeof line);
    if (strstr(line, "schedule: 1 splits") || !strstr(line, "schedule: "))
        harness_fail(__FILE__, __LINE__, "attention refused: '%s'", line);
}

/* A Q8_0 copy of stories260K (kiln_quantize_file; its ffn_down, K = 172, falls back to F16) on the device:
 * a 16-token prompt runs prefill's kernels (mul_mm's float tiles for both weight types, attention_tile),
 * then 40 greedy steps decode's (mul_mv, attention.comp), and the profile shows each of them ran. Prefill on
 * the device multiplies float activations where the CPU rounds them to int8 first (docs/vulkan.md, Matrix
 * products), so the prompt's logits differ from the CPU's by that rounding carried through 5 layers, not by
 * float order alone: within 3e-2 of the largest (measured 1.1e-2 on lavapipe beside a Zen 4, whose CPU also
 * rounds the F16 ffn_down's prefill to bf16, AVX512-BF16); the greedy ids are the CPU's. */
static void a_q8_0_model_on_vulkan_runs_the_prefill_tiles_and_gives_the_cpus_greedy_ids(void) {
    kiln_quantize_params qp = kiln_quantize_params_default();
    const char *path = KILN_TEST_TMP "/vulkan_stories260K_q8_0.gguf";
    kiln_model_params mp = kiln_model_params_default();
    kiln_model *vk = NULL, *cpu = NULL;
    harness_golden g = {0};
    int32_t iv[256], ic[256];
    kiln_device_profile pr;
    if (skip()) return;
    qp.mix = KILN_MIX_Q8_0;
    CHECK_OK(kiln_quantize_file(KILN_MODEL_PATH, path, &qp, NULL, NULL));
    mp.n_threads = 2;
    mp.devices = "vulkan";
    CHECK_OK(kiln_model_load_ex(path, &mp, &vk));
    mp.devices = NULL;
    CHECK_OK(kiln_model_load_ex(path, &mp, &cpu));
    harness_golden_load("\"once_upon_a_time_64\"", &g);
    if (vk && cpu && g.n_ids >= 16) {
        int32_t V = kiln_model_n_vocab(cpu);
        float *lv = malloc((size_t)V * sizeof(float)), *lc = malloc((size_t)V * sizeof(float));
        harness_golden p = g; /* the golden's first 16 ids as the prompt */
        memcpy(p.prompt, g.ids, 16 * sizeof *p.prompt);
        p.n_prompt = 16;
        CHECK_OK(kiln_model_profile(vk, true));
        size_t nv = greedy(vk, &p, 16 + 40, iv, lv), nc = greedy(cpu, &p, 16 + 40, ic, lc);
        CHECK_OK(kiln_model_profile_read(vk, &pr));
        CHECK(nv == nc && !memcmp(iv, ic, nv * sizeof *iv));
        CHECK(harness_profile_has(&pr, "mul_mm q8_0") && harness_profile_has(&pr, "mul_mm f16"));
        CHECK(harness_profile_has(&pr, "attention_tile f32") && harness_profile_has(&pr, "mul_mv q8_0"));
        double worst = 0.0, mag = 0.0;
        for (int32_t i = 0; lv && lc && i < V; i++) {
            worst = fmax(worst, fabs((double)lv[i] - lc[i]));
            mag = fmax(mag, fabs((double)lc[i]));
        }
        printf("  Q8_0 model: %zu ids as the CPU's; the prompt's logits differ by at most %.2g (max |logit| %.3g)\n",
               nv, worst, mag);
        CHECK(worst <= 3e-2 * mag);
        free(lv);
        free(lc);
    }
    kiln_model_destroy(vk);
    kiln_model_destroy(cpu);
    remove(path);
}

/* An F16 and a Q8_0 cache live on the device too (one split per decode), and 64 greedy steps from the
 * harness_golden prompt give the CPU's ids with the same cache type, fused attention and the plain form alike, the first logits within the greedy test's 1e-4
 * of the largest (the cache bytes are the CPU's exactly, test_backend_ops; sums differ in order). */
static void f16_and_q8_0_caches_on_vulkan_give_the_cpus_greedy_ids(void) {
    static const kiln_type kinds[2] = {KILN_TYPE_F16, KILN_TYPE_Q8_0};
    kiln_model *vk, *cpu;
    char line[512];
    if (skip()) return;
    vk = load("vulkan");
    cpu = load(NULL);
    for (int k = 0; k < 2 && vk && cpu; k++) {
        harness_golden g = {0};
        int32_t iv[256], ic[256], V = kiln_model_n_vocab(cpu);
        float *lv = malloc((size_t)V * sizeof(float)), *lc = malloc((size_t)V * sizeof(float));
        harness_golden_load("\"once_upon_a_time_64\"", &g);
        greedy_kv = kinds[k];
        schedule_of_one_decode(NULL, line, sizeof line);
        if (!strstr(line, "schedule: 1 splits") || !strstr(line, "cpu 0 bytes"))
            harness_fail(__FILE__, __LINE__, "%s cache on the device: '%s'", kinds[k] == KILN_TYPE_F16 ? "f16" : "q8_0", line);
        if (lv && lc && g.n_ids) {
            size_t nv = greedy(vk, &g, g.n_prompt + 64, iv, lv), nc = greedy(cpu, &g, g.n_prompt + 64, ic, lc);
            CHECK_EQ_INT(nv, nc);
            CHECK(nv == nc && !memcmp(iv, ic, nv * sizeof *iv));
            double worst = 0.0, mag = 0.0;
            for (int32_t i = 0; i < V; i++) {
                worst = fmax(worst, fabs((double)lv[i] - lc[i]));
                mag = fmax(mag, fabs((double)lc[i]));
            }
            printf("  %s cache: %zu ids as the CPU's; first logits differ by at most %.2g (max |logit| %.3g)\n",
                   kinds[k] == KILN_TYPE_F16 ? "f16" : "q8_0", nv, worst, mag);
            CHECK(worst <= 1e-4 * mag);
            greedy_passes = "none"; /* the plain form: cast of the cache, matmuls, softmax */
            nv = greedy(vk, &g, g.n_prompt + 64, iv, NULL);
            nc = greedy(cpu, &g, g.n_prompt + 64, ic, NULL);
            greedy_passes = NULL;
            CHECK(nv == nc && !memcmp(iv, ic, nv * sizeof *iv));
        }
        greedy_kv = KILN_TYPE_F32;
        free(lv);
        free(lc);
    }
    kiln_model_destroy(vk);
    kiln_model_destroy(cpu);
}

/* Sequence edits are cell metadata on the host, whichever backend holds the cache bytes: a prompt shared
 * by kiln_kv_seq_cp, two sequences decoding in one batch, seq_rm of a tail whose cells are then reused,
 * and seq_keep, give the same logits with the cache on the device as on the CPU (within the greedy test's
 * 1e-4 of the largest logit). */
enum { EDIT_STEPS = 4, EDIT_ROWS = 2 };

static void sequence_edits(kiln_model *m, bool device, float *out) {
    static const int32_t prompt[5] = {1, 403, 407, 261, 450};
    kiln_ctx_params p = harness_ctx_params();
    kiln_ctx *ctx = NULL;
    kiln_batch b = {0};
    int32_t V = kiln_model_n_vocab(m), rows[EDIT_STEPS] = {2, 1, 1, 1}, schedules = 0;
    p.n_ctx = 64;
    p.n_seq_max = 2;
    p.log = device ? keep_schedule : NULL; /* the cache on the device: every step one split there */
    CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    CHECK_OK(kiln_batch_init(8, &b));
    for (int step = 0; ctx && b.token && step < EDIT_STEPS; step++) {
        kiln_batch_clear(&b);
        if (step == 0) { /* the prompt once for sequence 0, shared with 1, then one token each */
            for (int32_t i = 0; i < 5; i++)
                CHECK_OK(kiln_batch_add(&b, prompt[i], i, 0, false));
            CHECK_OK(kiln_ctx_decode_batch(ctx, &b));
            CHECK_OK(kiln_kv_seq_cp(ctx, 0, 1, -1, -1));
            kiln_batch_clear(&b);
            CHECK_OK(kiln_batch_add(&b, 300, 5, 0, true));
            CHECK_OK(kiln_batch_add(&b, 301, 5, 1, true));
        } else if (step == 1) { /* sequence 1 drops positions 3.. and goes on from 3 in freed cells */
            CHECK_OK(kiln_kv_seq_rm(ctx, 1, 3, -1));
            CHECK_OK(kiln_batch_add(&b, 302, 3, 1, true));
        } else if (step == 2) { /* sequence 1 alone: 0's cells (the shared prefix stays) */
            CHECK_OK(kiln_kv_seq_keep(ctx, 1));
            CHECK_OK(kiln_batch_add(&b, 303, 4, 1, true));
        } else { /* sequence 0 starts again in the cells keep freed */
            CHECK_OK(kiln_batch_add(&b, 304, 0, 0, true));
        }
        schedule_line[0] = '\0';
        CHECK_OK(kiln_ctx_decode_batch(ctx, &b));
        schedules += schedule_line[0] != '\0'; /* logged when a step compiles a plan */
        if (device && schedule_line[0] && !strstr(schedule_line, "schedule: 1 splits"))
            harness_fail(__FILE__, __LINE__, "step %d: '%s'", step, schedule_line);
        for (int32_t r = 0; r < rows[step]; r++) {
            const float *l = kiln_ctx_logits(ctx, r);
            CHECK(l != NULL);
            if (l) memcpy(out + ((size_t)step * EDIT_ROWS + (size_t)r) * (size_t)V, l, (size_t)V * sizeof *l);
        }
    }
    if (device) CHECK(schedules > 0);
    kiln_batch_free(&b);
    kiln_ctx_destroy(ctx);
}

static void sequence_edits_on_a_device_cache_give_the_cpu_logits(void) {
    kiln_model *vk, *cpu;
    float *lv, *lc;
    size_t n;
    if (skip()) return;
    vk = load("vulkan");
    cpu = load(NULL);
    n = vk ? (size_t)EDIT_STEPS * EDIT_ROWS * (size_t)kiln_model_n_vocab(vk) : 1;
    lv = calloc(n, sizeof *lv);
    lc = calloc(n, sizeof *lc);
    if (vk && cpu && lv && lc) {
        double worst = 0.0, mag = 0.0;
        sequence_edits(vk, true, lv);
        sequence_edits(cpu, false, lc);
        for (size_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs((double)lv[i] - lc[i]));
            mag = fmax(mag, fabs((double)lc[i]));
        }
        printf("  logits after seq_cp/rm/keep differ from the CPU's by at most %.2g (max |logit| %.3g)\n",
               worst, mag);
        CHECK(mag > 0.0);
        CHECK(worst <= 1e-4 * mag);
    }
    free(lv);
    free(lc);
    kiln_model_destroy(vk);
    kiln_model_destroy(cpu);
}

/* Contexts come and go on one thread while another context of the model decodes on another: creating
 * a context allocates and zeroes its cache on the device, destroying one returns its cache and arena to
 * the pool, so both take the engine lock like compute does (the pool and the queue are not thread-safe).
 * The decoding thread still gives the harness_golden ids, and every create succeeds. */
typedef struct churn_arg {
    kiln_model *m;
    int n_ok;
} churn_arg;

static void *churn_contexts(void *user) {
    churn_arg *a = user;
    for (int i = 0; i < 12; i++) {
        kiln_ctx_params p = harness_ctx_params();
        kiln_ctx *ctx = NULL;
        p.n_ctx = 64 + 32 * (i % 3);
        if (kiln_ctx_create(a->m, &p, &ctx) == KILN_OK) a->n_ok++;
        kiln_ctx_destroy(ctx);
    }
    return NULL;
}

static void contexts_created_and_destroyed_beside_a_decode_leave_it_intact(void) {
    harness_golden g = {0};
    int32_t ids[256];
    churn_arg arg = {NULL, 0};
    pthread_t th;
    if (skip()) return;
    arg.m = load("vulkan");
    if (!arg.m) return;
    harness_golden_load("\"once_upon_a_time_64\"", &g);
    CHECK(pthread_create(&th, NULL, churn_contexts, &arg) == 0);
    check_ids(&g, ids, greedy(arg.m, &g, g.n_ids, ids, NULL), "decoding beside context churn");
    pthread_join(th, NULL);
    CHECK_EQ_INT(arg.n_ok, 12);
    kiln_model_destroy(arg.m);
}

int main(void) {
    kiln_backend *probe = NULL;
    have_vulkan = kiln_device_count() > 0 && kiln__backend_vulkan_create(0, &probe) == KILN_OK;
    kiln__backend_destroy(probe);
    RUN(the_device_list_describes_each_device_and_auto_never_picks_a_cpu_device);
    RUN(the_buffer_verbs_move_every_byte_of_every_sub_range);
    RUN(an_upload_overlaps_its_pieces_and_what_follows_sees_them_in_order);
    RUN(every_kind_of_view_reads_back_what_the_device_wrote);
    RUN(a_weight_over_the_binding_limit_is_bound_in_row_ranges);
    RUN(a_committed_range_is_recorded_once_and_replayed_with_new_inputs);
    RUN(a_dispatch_waits_only_for_what_it_reads_or_overwrites);
    RUN(independent_matmuls_share_one_barrier);
    RUN(one_activation_is_quantized_once_for_every_matmul_that_reads_it);
    RUN(a_decode_step_waits_less_often_than_it_dispatches);
    RUN(the_profile_times_every_dispatch_while_it_is_on);
    RUN(freed_buffers_are_reused_by_bucket_and_evicted_least_recently_used_first);
    RUN(the_pool_makes_at_least_half_fewer_device_allocations_than_no_pool);
    RUN(greedy_on_vulkan_reproduces_the_goldens_and_the_cpu_logits);
    RUN(the_goldens_hold_on_vulkan_without_the_graph_passes);
    RUN(forced_fallbacks_give_the_cpu_output);
    RUN(a_device_allocation_failing_later_is_a_clean_error);
    RUN(the_kv_cache_lives_on_the_device_and_the_whole_decode_is_one_split);
    RUN(f16_and_q8_0_caches_on_vulkan_give_the_cpus_greedy_ids);
    RUN(a_q8_0_model_on_vulkan_runs_the_prefill_tiles_and_gives_the_cpus_greedy_ids);
    RUN(sequence_edits_on_a_device_cache_give_the_cpu_logits);
    RUN(contexts_created_and_destroyed_beside_a_decode_leave_it_intact);
    RUN(the_weight_upload_reports_progress_up_to_the_total);
    return harness_finish();
}
