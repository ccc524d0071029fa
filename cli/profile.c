/*
 * profile.c - the kernel profile as a markdown table (`kiln bench --profile`).
 *
 * What the wall time of a run is made of: preparing its computes (a device recording or finding its
 * command buffers, the CPU packing weights), running them (a device's work while the host waits, the CPU
 * pool's run), and the rest (the host's own graph work, the inputs, reading the logits). The kernels' time
 * is part of the run; the run less the kernels is the idle time between and around them.
 */
#include "profile.h"

void cli_print_profile(FILE *f, const char *test, const kiln_device_profile *p, double wall_s, long runs) {
    double per = runs > 0 ? 1.0 / (double)runs : 0;
    double wall = wall_s * 1e3 * per, rec = (double)p->record_ns * 1e-6 * per,
           sub = (double)p->submit_ns * 1e-6 * per;
    double ker = (double)p->kernel_ns * 1e-6 * per;
    fprintf(
        f,
        "\nprofile, %s, per run (%ld runs): wall %.3f ms = prepare %.3f + run %.3f (kernels %.3f, idle %.3f) + "
        "the host's other work %.3f; %.1f computes (%.1f recorded)\n",
        test, runs, wall, rec, sub, ker, sub - ker, wall - rec - sub, (double)p->computes / (double)runs,
        (double)p->recorded / (double)runs);
    if (p->unattributed)
        fprintf(f, "(%llu dispatches or nodes are in no row: past a recording's timestamps, or past the rows)\n",
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
