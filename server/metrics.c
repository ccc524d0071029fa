/*
 * metrics.c - the bucket bounds of every engine histogram and the one function that fills them. The
 * bounds span a token time on a fast machine (5 ms) to a long request (60 s); Prometheus adds +Inf
 * itself from `total`.
 */
#include "metrics.h"

#include <time.h>

const double ks_metric_buckets[KS_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                                   0.5,   1.0,  2.5,   5.0,  10.0, 60.0};

void ks__hist_observe(ks_histogram *h, double seconds) {
    if (!(seconds > 0)) seconds = 0;
    for (int i = 0; i < KS_HIST_BUCKETS; i++)
        if (seconds <= ks_metric_buckets[i]) h->count[i]++;
    h->total++;
    h->sum += seconds;
}

double ks__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
