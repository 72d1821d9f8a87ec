/* SPDX-License-Identifier: MIT */
/*
 * histogram.c - fixed-bucket latency histograms (histogram.h).
 */
#include "histogram.h"

#include "outbox/worker.h"

#include <math.h>

#include "common/banned.h" /* last: poisons unsafe functions */

const double obx_histogram_bounds[OBX_HISTOGRAM_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02,     0.025,
    0.05,   0.1,   0.25,   0.5,   1,      2.5,  5,     INFINITY,
};

void
obx_histogram_observe(struct obx_histogram *h, double seconds)
{
    size_t i = 0;

    while (i + 1 < OBX_HISTOGRAM_BUCKETS && seconds > obx_histogram_bounds[i]) {
        i++;
    }
    h->counts[i]++;
    h->sum_seconds += seconds;
}

size_t
obx_histogram_cumulative(const struct obx_histogram *h, unsigned long long *out, size_t cap)
{
    unsigned long long running = 0;
    size_t n = cap < OBX_HISTOGRAM_BUCKETS ? cap : OBX_HISTOGRAM_BUCKETS;

    for (size_t i = 0; i < n; i++) {
        running += h->counts[i];
        out[i] = running;
    }
    return n;
}

size_t
outbox_histogram_bounds(const double **bounds)
{
    if (bounds != NULL) {
        *bounds = obx_histogram_bounds;
    }
    return OBX_HISTOGRAM_BUCKETS;
}
