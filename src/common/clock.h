/* SPDX-License-Identifier: MIT */
/*
 * clock.h - the one monotonic clock of the code: timeouts, pauses and
 * polling deadlines. Never for lease arithmetic, which uses the
 * database's time (DESIGN.md).
 */
#ifndef OBX_CLOCK_H
#define OBX_CLOCK_H

/* Milliseconds of a monotonic clock. */
long long obx_monotonic_ms(void);

/* Seconds of the same clock, to the microsecond: for latency histograms. */
double obx_monotonic_seconds(void);

/* Sleeps `ms` milliseconds, through signals. */
void obx_sleep_ms(int ms);

#endif
