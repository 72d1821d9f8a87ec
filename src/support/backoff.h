/* SPDX-License-Identifier: MIT */
/*
 * backoff.h - how long a rejected row waits before its next attempt.
 *
 * Base delay after the first failure, doubling, capped, with +-10 % jitter
 * so rows that failed together do not come back together. The SQL function
 * backoff_ms() in migration 0002 computes the same numbers for the finish
 * statement; a test keeps the two in step.
 */
#ifndef OBX_BACKOFF_H
#define OBX_BACKOFF_H

#define OBX_BACKOFF_BASE_MS 5000   /* after the first failure */
#define OBX_BACKOFF_CAP_MS  300000 /* never longer, before jitter */

/*
 * The delay in ms after failure number `attempt` (1-based; below 1 counts
 * as 1): base_ms * 2^(attempt - 1), at most cap_ms, times
 * 0.9 + 0.2 * jitter_unit, rounded down. `jitter_unit` is a uniform random
 * number in [0, 1) (0.5 means no jitter) and is clamped to [0, 1] (NaN counts as 1).
 * Negative base or cap count as 0. Never overflows; at most INT_MAX.
 */
int obx_backoff_delay_ms(int attempt, int base_ms, int cap_ms, double jitter_unit);

#endif
