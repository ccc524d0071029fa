/*
 * test_offload.c - partial offload (kiln_model_params.gpu_layers, `--gpu-layers`): the backends before the
 * CPU run only the last N layers (their nodes, their weights, their KV cache) and the output head, the CPU
 * runs the rest, and the greedy tokens are the CPU's (the reference: the stories260K goldens, which the CPU
 * reproduces in test_generate) at N = none, 1, about half, all and auto. On a Vulkan device (lavapipe here;
 * those cases are skipped with a message when there is none) and on the restricted CPU backend, which runs
 * everywhere and is bit-exact with the CPU, so a wrong placement there would show as a wrong split count.
 */
#include "harness.h"

#include "backend/backend.h"
#include "runtime/engine.h"

#include <stdlib.h>
#include <string.h>

#define N_LAYER 5 /* stories260K */

static bool have_vulkan;

static kiln_model *load(const char *devices, int32_t gpu_layers) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_model *m = NULL;
    mp.n_threads = 2;
    mp.devices = devices;
    mp.gpu_layers = gpu_layers;
    CHECK_OK(kiln_model_load_ex(KILN_MODEL_PATH, &mp, &m));
    return m;
}

static void keep_line(void *user, const char *line) {
    char *out = user;
    if (!strncmp(line, "schedule: ", 10)) snprintf(out, 256, "%s", line); /* the last plan's: decode's */
}

/* Greedy decode of the golden's prompt for n ids; *splits gets the decode step's split count. */
static size_t greedy(kiln_model *m, const harness_golden *g, size_t n, int32_t *ids, int *splits) {
    kiln_ctx_params cp = harness_ctx_params();
    char schedule[256] = "";
    kiln_ctx *ctx = NULL;
    const float *logits = NULL;
    size_t got = 0;
    cp.n_ctx = 256;
    cp.log = keep_line;
    cp.log_user = schedule;
    CHECK_OK(kiln_ctx_create(m, &cp, &ctx));
    if (!ctx) return 0;
    CHECK_OK(kiln_ctx_decode(ctx, g->prompt, (int32_t)g->n_prompt, &logits));
    for (; logits && got < n; got++) {
        int32_t V = kiln_model_n_vocab(m), best = 0;
        for (int32_t v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        ids[got] = best;
        if (got + 1 == n) break;
        CHECK_OK(kiln_ctx_decode(ctx, &best, 1, &logits));
    }
    kiln_ctx_destroy(ctx);
    *splits = schedule[0] ? atoi(schedule + 10) : -1;
    return got + 1;
}

/* The goldens' ids with the last n layers on `devices`, in `want_splits` splits (-1: not checked). */
static void check_offload(const char *devices, int32_t n, int want_splits) {
    harness_golden g = {0};
    int32_t ids[64];
    int splits = 0;
    harness_golden_load("\"once_upon_a_time_64\"", &g);
    kiln_model *m = load(devices, n);
    if (!m || !g.n_ids) {
        kiln_model_destroy(m);
        return;
    }
    size_t got = greedy(m, &g, 32, ids, &splits);
    CHECK_EQ_INT(got, 32);
    CHECK(g.n_ids >= g.n_prompt + got); /* the golden's ids are the prompt's, then the generated */
    for (size_t i = 0; i < got && g.n_prompt + i < g.n_ids; i++)
        if (ids[i] != g.ids[g.n_prompt + i]) {
            harness_fail(__FILE__, __LINE__, "%s, gpu_layers %d: id %zu is %d, the golden's %d", devices, n,
                         i, ids[i], g.ids[g.n_prompt + i]);
            break;
        }
    printf("  %-14.14s gpu_layers %2d: 32 ids as the golden, decode in %d splits\n", devices, n, splits);
    if (want_splits >= 0) CHECK_EQ_INT(splits, want_splits);
    kiln_model_destroy(m);
}

/* Every op on the restricted backend, so that only the layer range decides the placement. It holds no KV
 * cache, so each of its layers leaves cache_write and attention to the CPU: with none of it the decode is
 * 1 split (the CPU); with the last N < L layers the CPU's prefix, then per layer the device and the CPU's
 * cache ops, then the device's rest and the head: 2N + 2; with all, 2L + 1 (no CPU prefix). A node of a
 * CPU layer placed on the device would add splits. */
static void the_last_n_layers_run_on_the_first_backend_and_give_the_cpus_tokens(void) {
    static const char *const dev = "cpu-restricted:get_rows+rms_norm_mul+matmul+rope+cache_write+attention+"
                                   "linear+swiglu+add+mul+rms_norm+softmax+scale+cont";
    check_offload(dev, KILN_GPU_LAYERS_NONE, 1);
    check_offload(dev, 1, 2 * 1 + 2);
    check_offload(dev, 2, 2 * 2 + 2);
    check_offload(dev, N_LAYER, 2 * N_LAYER + 1);
    check_offload(dev, 0, 2 * N_LAYER + 1); /* the default: everything */
}

/* On Vulkan the KV cache of the device's layers lives on the device (so their cache_write and attention
 * run there: still two splits), the others' on the CPU, and only the device's layers' weights are
 * uploaded. */
static void on_vulkan_the_device_holds_only_its_layers_weights_and_kv(void) {
    uint64_t uploaded[N_LAYER + 1] = {0};
    static const int32_t ns[] = {KILN_GPU_LAYERS_NONE, 1, 2, N_LAYER};
    if (!have_vulkan) {
        printf("  skipped: no Vulkan device (%s)\n", kiln_devices_note() ? kiln_devices_note() : "none");
        return;
    }
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int32_t n = ns[k];
        check_offload("vulkan", n, n == KILN_GPU_LAYERS_NONE || n == N_LAYER ? 1 : 2);
        kiln_model *m = load("vulkan", n);
        harness_golden g = {0};
        int32_t ids[4];
        int splits;
        harness_golden_load("\"once_upon_a_time_64\"", &g);
        if (m) greedy(m, &g, 2, ids, &splits);
        kiln_model_memory mem = {0};
        if (m) CHECK_OK(kiln_model_memory_info(m, &mem));
        uploaded[n < 0 ? 0 : n] = mem.device.weight_bytes;
        kiln_model_destroy(m);
    }
    printf("  weights uploaded: none %llu, 1 layer %llu, 2 layers %llu, all %llu bytes\n",
           (unsigned long long)uploaded[0], (unsigned long long)uploaded[1], (unsigned long long)uploaded[2],
           (unsigned long long)uploaded[N_LAYER]);
    CHECK_EQ_INT(uploaded[0], 0);
    CHECK(uploaded[1] > 0 && uploaded[1] < uploaded[2] && uploaded[2] < uploaded[N_LAYER]);
}

/* auto: stories260K fits any device many times over, so all of it goes there, and the note says so. */
static void auto_puts_every_layer_on_a_device_it_fits_and_says_so(void) {
    if (!have_vulkan) {
        printf("  skipped: no Vulkan device\n");
        return;
    }
    kiln_model *m = load("vulkan", KILN_GPU_LAYERS_AUTO);
    if (!m) return;
    printf("  note: %s\n", kiln_model_device_note(m));
    CHECK(strstr(kiln_model_device_note(m), "gpu layers auto: 5 of 5") != NULL);
    kiln_model_destroy(m);
    check_offload("vulkan", KILN_GPU_LAYERS_AUTO, 1);
}

/* The auto estimate's arithmetic (engine.h), computed by hand, on a Llama-2-7B Q4_0 shape: 32 layers of
 * 106 MB of weights plus 128 MiB of F32 KV at 4096 cells (4096 * 2 * 4096 * 4 bytes), a 107 MB Q6_K head
 * and 70 MB of embeddings. */
static void auto_fits_the_layers_the_device_memory_holds(void) {
    const uint64_t MiB = 1u << 20, GiB = 1u << 30;
    kiln_engine_layers l = {32, 106000000u + 128 * MiB, 107000000u, 70000000u};
    CHECK_EQ_INT(kiln__engine_fit_layers(80 * GiB, &l), 32); /* an H100: everything */
    /* 8 GiB: usable 8192 - 819.2 - 256 = 7116.8 MiB; less the 102.0 MiB head, / 229.1 MiB a layer: 30 */
    CHECK_EQ_INT(kiln__engine_fit_layers(8 * GiB, &l), 30);
    CHECK_EQ_INT(kiln__engine_fit_layers(1 * GiB, &l), 2);   /* 665.6 MiB usable: (665.6 - 102.0) / 229.1 */
    CHECK_EQ_INT(kiln__engine_fit_layers(300 * MiB, &l), 0); /* 14 MiB usable: not even the head */
    CHECK_EQ_INT(kiln__engine_fit_layers(0, &l), 32);        /* unknown memory: everything */
}

static void a_gpu_layers_value_below_auto_is_a_named_error(void) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_model *m = NULL;
    mp.gpu_layers = -3;
    CHECK_EQ_INT(kiln_model_load_ex(KILN_MODEL_PATH, &mp, &m), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("gpu_layers -3");
    CHECK(m == NULL);
}

int main(void) {
    kiln_backend *probe = NULL;
    have_vulkan = kiln_device_count() > 0 && kiln__backend_vulkan_create(0, &probe) == KILN_OK;
    kiln__backend_destroy(probe);
    RUN(the_last_n_layers_run_on_the_first_backend_and_give_the_cpus_tokens);
    RUN(on_vulkan_the_device_holds_only_its_layers_weights_and_kv);
    RUN(auto_puts_every_layer_on_a_device_it_fits_and_says_so);
    RUN(auto_fits_the_layers_the_device_memory_holds);
    RUN(a_gpu_layers_value_below_auto_is_a_named_error);
    return harness_finish();
}
