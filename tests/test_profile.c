/*
 * test_profile.c - kiln_model_profile on the CPU (include/kiln.h, "Kernel profile"; docs/runtime.md,
 * Profiling): while it is on, every kernel node of every compute is counted once in its op's row, the rows
 * add up to the kernels' time, come most time first and lie within the pool's run; off, nothing more is
 * counted; on again starts from zero. (test_vulkan.c checks a device's profile.)
 */
#include "harness.h"

static void the_cpu_profile_counts_every_kernel_node_of_every_step_while_it_is_on(void) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_ctx_params cp = harness_ctx_params();
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    const float *logits = NULL;
    int32_t prompt[3] = {1, 403, 407};
    kiln_device_profile one, two, after;
    mp.n_threads = 2;
    CHECK_OK(kiln_model_load_ex(KILN_MODEL_PATH, &mp, &m));
    cp.n_ctx = 64;
    if (m) CHECK_OK(kiln_ctx_create(m, &cp, &ctx));
    if (!ctx) goto done;
    CHECK_OK(kiln_ctx_decode(ctx, prompt, 3, &logits));
    CHECK_OK(kiln_ctx_decode(ctx, prompt, 1, &logits)); /* the one-token plan made before profiling */
    CHECK_OK(kiln_model_profile(m, true));
    CHECK_OK(kiln_ctx_decode(ctx, &prompt[1], 1, &logits));
    CHECK_OK(kiln_model_profile_read(m, &one));
    CHECK_OK(kiln_ctx_decode(ctx, &prompt[2], 1, &logits));
    CHECK_OK(kiln_model_profile_read(m, &two));
    printf("  two decode steps on the CPU: %llu computes, %llu kernel nodes in %d rows, kernels %.3f ms of a "
           "%.3f "
           "ms run\n",
           (unsigned long long)two.computes, (unsigned long long)harness_profile_calls(&two),
           (int)two.n_kernels, (double)two.kernel_ns * 1e-6, (double)two.submit_ns * 1e-6);
    CHECK_EQ_INT(one.computes, 1);
    CHECK_EQ_INT(two.computes, 2);
    CHECK(harness_profile_calls(&one) > 0);
    CHECK_EQ_INT(harness_check_profile(&two), 2 * harness_profile_calls(&one)); /* the same step twice */
    CHECK(harness_profile_has(&two, "matmul f32") && harness_profile_has(&two, "attention") &&
          harness_profile_has(&two, "rms_norm_mul"));
    CHECK_OK(kiln_model_profile(m, false));
    CHECK_OK(kiln_ctx_decode(ctx, prompt, 1, &logits));
    CHECK_OK(kiln_model_profile_read(m, &after));
    CHECK_EQ_INT(after.computes, two.computes);
    CHECK_EQ_INT(harness_profile_calls(&after), harness_profile_calls(&two));
    CHECK_OK(kiln_model_profile(m, true));
    CHECK_OK(kiln_model_profile_read(m, &after));
    CHECK_EQ_INT(after.computes, 0);
    CHECK_EQ_INT(after.n_kernels, 0);
    CHECK_EQ_INT(kiln_model_profile(NULL, true), KILN_E_INVALID_ARG);
    CHECK_EQ_INT(kiln_model_profile_read(m, NULL), KILN_E_INVALID_ARG);
done:
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

int main(void) {
    RUN(the_cpu_profile_counts_every_kernel_node_of_every_step_while_it_is_on);
    return harness_finish();
}
