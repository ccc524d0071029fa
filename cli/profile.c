/*
 * profile.c - the device kernel profile as a markdown table (`kiln bench --profile`).
 *
 * What the wall time of a run is made of: the host recording or finding its command buffers, the device
 * running them while the host waits (submit), and the rest (the host's own graph work, uploads of the
 * inputs, reading the logits). The kernels' device time is part of submit; submit less the kernels is the
 * device's idle time between and around them.
 */
#include "profile.h"

void cli_print_profile(FILE *f, const char *test, const kiln_device_profile *p, double wall_s, long runs) {
    double per = runs > 0 ? 1.0 / (double)runs : 0;
    double wall = wall_s * 1e3 * per, rec = (double)p->record_ns * 1e-6 * per,
           sub = (double)p->submit_ns * 1e-6 * per;
    double ker = (double)p->kernel_ns * 1e-6 * per;
    fprintf(
        f,
        "\ndevice profile, %s, per run (%ld runs): wall %.3f ms = record %.3f + submit %.3f (kernels %.3f, "
        "the device idle %.3f) + the host's other work %.3f; %.1f submissions (%.1f recorded)\n",
        test, runs, wall, rec, sub, ker, sub - ker, wall - rec - sub, (double)p->computes / (double)runs,
        (double)p->recorded / (double)runs);
    if (p->unattributed)
        fprintf(f, "(%llu dispatches past a recording's timestamps are in no row)\n",
                (unsigned long long)p->unattributed);
    fprintf(f, "\n| kernel | calls/run | ms/run | share of kernels | us/call |\n|---|---|---|---|---|\n");
    for (int32_t i = 0; i < p->n_kernels; i++) {
        const kiln_kernel_time *k = &p->kernels[i];
        double ms = (double)k->ns * 1e-6 * per;
        fprintf(f, "| %s | %.1f | %.3f | %.1f%% | %.2f |\n", k->name, (double)k->calls / (double)runs, ms,
                p->kernel_ns ? 100.0 * (double)k->ns / (double)p->kernel_ns : 0.0,
                k->calls ? (double)k->ns * 1e-3 / (double)k->calls : 0.0);
    }
}
