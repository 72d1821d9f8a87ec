/* SPDX-License-Identifier: MIT */
/*
 * histogram.h - a latency histogram with fixed buckets, the same for every
 * histogram of the workers, so the daemon renders them all one way and
 * Prometheus can aggregate replicas. Not thread-safe on its own: the
 * worker holds its stats lock around it.
 */
#ifndef OBX_HISTOGRAM_H
#define OBX_HISTOGRAM_H

#include <stddef.h>

/* 0.5 ms to 5 s, then +Inf: lease and finish round trips sit near the bottom. */
enum { OBX_HISTOGRAM_BUCKETS = 17 };

extern const double obx_histogram_bounds[OBX_HISTOGRAM_BUCKETS];

struct obx_histogram {
    unsigned long long counts[OBX_HISTOGRAM_BUCKETS]; /* per bucket, not cumulative */
    double sum_seconds;
};

void obx_histogram_observe(struct obx_histogram *h, double seconds);

/* Up to `cap` cumulative counts (observations <= bound i) into `out`; returns how many. */
size_t obx_histogram_cumulative(const struct obx_histogram *h, unsigned long long *out, size_t cap);

#endif
