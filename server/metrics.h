/*
 * metrics.h - the histogram helper behind ks_metrics (engine.h): an observation in seconds lands in
 * every cumulative bucket whose bound it does not exceed, as Prometheus histograms count them. The
 * engine updates its histograms under its own lock; these helpers take none.
 */
#ifndef KILN_SERVER_METRICS_H
#define KILN_SERVER_METRICS_H

#include "engine.h"

/* Record one observation of `seconds` (negative values count as 0). */
void ks__hist_observe(ks_histogram *h, double seconds);

/* Seconds on the monotonic clock. */
double ks__now(void);

#endif
