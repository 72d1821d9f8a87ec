/* SPDX-License-Identifier: MIT */
/*
 * backoff.c - how long a rejected row waits before its next attempt.
 *
 * A pure function of its input, so tests need no clock and no sleeping.
 * The arithmetic mirrors backoff_ms() in sql/migrations/0002_relay.sql
 * step for step (the same doubles, multiplied in the same order), so the
 * delay the relay logs is the delay the database schedules.
 */
#include "backoff.h"

#include <limits.h>
#include <math.h>

#include "common/banned.h" /* last: poisons unsafe functions */

int
obx_backoff_delay_ms(int attempt, int base_ms, int cap_ms, double jitter_unit)
{
    /* long long: doubling a value below cap_ms stays below 2 * INT_MAX. */
    long long delay_ms = base_ms > 0 ? base_ms : 0;
    long long max_ms = cap_ms > 0 ? cap_ms : 0;
    double scaled_ms;

    /* Stops once the cap is reached (or at 0), so huge attempts cost nothing. */
    for (int i = 1; i < attempt && delay_ms > 0 && delay_ms < max_ms; i++) {
        delay_ms *= 2;
    }
    if (delay_ms > max_ms) {
        delay_ms = max_ms;
    }
    /* NaN goes to 1, as PostgreSQL sorts NaN above every number. */
    if (jitter_unit < 0.0) {
        jitter_unit = 0.0;
    } else if (!(jitter_unit <= 1.0)) {
        jitter_unit = 1.0;
    }
    scaled_ms = floor((double)delay_ms * (0.9 + 0.2 * jitter_unit));
    return scaled_ms < (double)INT_MAX ? (int)scaled_ms : INT_MAX;
}
