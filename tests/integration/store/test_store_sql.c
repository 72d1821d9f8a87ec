/* SPDX-License-Identifier: MIT */
/*
 * test_store_sql.c - the SQL helpers of migration 0002 agree with the C
 * code they stand in for: backoff_ms() with obx_backoff_delay_ms(), and
 * uuid_v7_floor() bounds the v7 ids of its millisecond from below.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "support/backoff.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(store_sql, .init = setup, .fini = teardown, .timeout = 60);

static void
expect_same_delays(int base_ms, int cap_ms)
{
    const double jitters[] = {0.0, 0.5, 0.999};

    for (int attempt = 1; attempt <= 12; attempt++) {
        for (size_t j = 0; j < sizeof(jitters) / sizeof(jitters[0]); j++) {
            char sql[160];
            long long in_sql;
            int in_c = obx_backoff_delay_ms(attempt, base_ms, cap_ms, jitters[j]);

            snprintf(sql, sizeof(sql), "SELECT outbox.backoff_ms(%d, %d, %d, %.17g)", attempt,
                     base_ms, cap_ms, jitters[j]);
            in_sql = harness_scalar_ll(conn, sql);
            cr_assert_eq(in_sql, in_c, "attempt %d, jitter %g: SQL %lld ms, C %d ms", attempt,
                         jitters[j], in_sql, in_c);
        }
    }
}

Test(store_sql, backoff_in_sql_matches_c_with_the_production_defaults)
{
    expect_same_delays(OBX_BACKOFF_BASE_MS, OBX_BACKOFF_CAP_MS);
}

Test(store_sql, backoff_in_sql_matches_c_with_test_sized_delays)
{
    expect_same_delays(1000, 60000);
    expect_same_delays(7, 100);
}

Test(store_sql, backoff_in_sql_matches_c_at_the_edges)
{
    const int cases[][3] = {{0, 5000, 300000},
                            {2147483647, 5000, 300000},
                            {2147483647, 2147483647, 2147483647},
                            {40, 1, 2147483647},
                            {3, 5000, 2000},
                            {3, 0, 300000}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char sql[160];
        int in_c = obx_backoff_delay_ms(cases[i][0], cases[i][1], cases[i][2], 0.999);

        snprintf(sql, sizeof(sql), "SELECT outbox.backoff_ms(%d, %d, %d, 0.999)", cases[i][0],
                 cases[i][1], cases[i][2]);
        cr_assert_eq(harness_scalar_ll(conn, sql), in_c, "case %zu", i);
    }
}

Test(store_sql, uuid_v7_floor_is_the_smallest_id_of_its_millisecond)
{
    /* Every v7 id made at t sorts between floor(t) and floor(t + 1 ms). */
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM generate_series(1, 1000), "
                                         "LATERAL (SELECT clock_timestamp() AS t) AS n "
                                         "WHERE outbox.uuid_v7_floor(n.t) > outbox.uuid_v7(n.t) "
                                         "OR outbox.uuid_v7(n.t) >= "
                                         "outbox.uuid_v7_floor(n.t + interval '1 millisecond')"),
                 0);
    cr_assert_eq(harness_scalar_ll(
                     conn, "SELECT count(*) WHERE outbox.uuid_v7_floor('2026-01-01 00:00:00+00') "
                           "= '019b76da-a800-7000-8000-000000000000'"),
                 1, "48 bits of Unix milliseconds, version 7, variant 10, zeros");
}
