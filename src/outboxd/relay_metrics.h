/* SPDX-License-Identifier: MIT */
/*
 * relay_metrics.h - the relay's metrics as /metrics names them, shared by
 * `outboxd relay` (one database, relay_cmd.c) and the fleet (one set per
 * database, labelled, fleet_cmd.c), so the two never name a figure apart.
 */
#ifndef OBX_RELAY_METRICS_H
#define OBX_RELAY_METRICS_H

#include <stddef.h>

#include "outboxd/service/metrics.h"

extern const struct obx_metric_def obx_relay_counters[];
extern const struct obx_metric_def obx_relay_gauges[];
extern const struct obx_metric_def obx_relay_histograms[];
extern const size_t obx_relay_counter_count, obx_relay_gauge_count, obx_relay_histogram_count;

#endif
