/* SPDX-License-Identifier: MIT */
/*
 * test_backoff.c - the retry delay: doubling from the base, capped, +-10 %
 * jitter, and no overflow however many attempts. The SQL twin of this
 * function is compared with it in tests/integration/test_store_backoff.c.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>

#include "support/backoff.h"

TestSuite(backoff, .timeout = 10);

static int
plain(int attempt)
{
    return obx_backoff_delay_ms(attempt, OBX_BACKOFF_BASE_MS, OBX_BACKOFF_CAP_MS, 0.5);
}

Test(backoff, starts_at_five_seconds_and_doubles)
{
    cr_assert_eq(plain(1), 5000);
    cr_assert_eq(plain(2), 10000);
    cr_assert_eq(plain(3), 20000);
    cr_assert_eq(plain(4), 40000);
    cr_assert_eq(plain(5), 80000);
    cr_assert_eq(plain(6), 160000);
}

Test(backoff, never_exceeds_five_minutes_before_jitter)
{
    cr_assert_eq(plain(7), 300000);
    cr_assert_eq(plain(8), 300000);
    cr_assert_eq(plain(64), 300000);
}

Test(backoff, does_not_overflow_for_huge_attempts_or_limits)
{
    cr_assert_eq(plain(INT_MAX), 300000);
    cr_assert_eq(obx_backoff_delay_ms(INT_MAX, INT_MAX, INT_MAX, 0.5), INT_MAX);
    cr_assert_eq(obx_backoff_delay_ms(INT_MAX, INT_MAX, INT_MAX, 0.999), INT_MAX);
    cr_assert_eq(obx_backoff_delay_ms(40, 1, INT_MAX, 0.5), INT_MAX);
}

Test(backoff, jitter_stays_within_ten_percent)
{
    cr_assert_eq(obx_backoff_delay_ms(1, 5000, 300000, 0.0), 4500);
    cr_assert_eq(obx_backoff_delay_ms(1, 5000, 300000, 0.999), 5499);
    cr_assert_eq(obx_backoff_delay_ms(8, 5000, 300000, 0.0), 270000);
    cr_assert_eq(obx_backoff_delay_ms(8, 5000, 300000, 0.999), 329940);
    for (double j = 0.0; j < 1.0; j += 0.01) {
        int d = obx_backoff_delay_ms(3, 5000, 300000, j);

        cr_assert(d >= 18000 && d <= 22000, "jitter %f gave %d ms", j, d);
    }
}

Test(backoff, rises_with_the_jitter_unit)
{
    int previous = -1;

    for (double j = 0.0; j < 1.0; j += 0.05) {
        int d = obx_backoff_delay_ms(2, 1000, 60000, j);

        cr_assert_geq(d, previous, "jitter %f gave %d ms after %d", j, d, previous);
        previous = d;
    }
}

Test(backoff, clamps_out_of_range_inputs)
{
    cr_assert_eq(obx_backoff_delay_ms(0, 5000, 300000, 0.5), 5000, "attempt 0 counts as 1");
    cr_assert_eq(obx_backoff_delay_ms(-7, 5000, 300000, 0.5), 5000);
    cr_assert_eq(obx_backoff_delay_ms(1, 5000, 300000, -3.0), 4500, "below 0 counts as 0");
    cr_assert_eq(obx_backoff_delay_ms(1, 5000, 300000, 7.0), 5500, "above 1 counts as 1");
    cr_assert_eq(obx_backoff_delay_ms(1, 5000, 300000, NAN), 5500, "NaN counts as 1");
    cr_assert_eq(obx_backoff_delay_ms(3, -5, 300000, 0.5), 0);
    cr_assert_eq(obx_backoff_delay_ms(3, 5000, -1, 0.5), 0);
}

Test(backoff, a_cap_below_the_base_wins)
{
    cr_assert_eq(obx_backoff_delay_ms(1, 5000, 2000, 0.5), 2000);
}

Test(backoff, small_bases_follow_the_same_schedule_for_tests)
{
    cr_assert_eq(obx_backoff_delay_ms(1, 1000, 300000, 0.5), 1000);
    cr_assert_eq(obx_backoff_delay_ms(2, 1000, 300000, 0.5), 2000);
    cr_assert_eq(obx_backoff_delay_ms(3, 1000, 300000, 0.5), 4000);
}
