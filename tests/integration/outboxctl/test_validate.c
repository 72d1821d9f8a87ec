/* SPDX-License-Identifier: MIT */
/*
 * test_validate.c - `outboxctl validate` lists exactly the pending rows
 * the relay then quarantines: rows only a foreign writer could commit (no
 * id, an id that is not the row's) and an envelope the writer allowed but
 * the server's max_payload does not; exit 1 while there are any, 0 once
 * none is pending; the filters narrow it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "ctl_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    relay_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ctl_validate, .init = setup, .fini = teardown, .timeout = 120);

/* A raw row whose envelope is `envelope_sql` (may use agg), bypassing the writer; its id, malloc'd.
 */
static char *
insert_raw(const char *envelope_sql)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "WITH v AS (SELECT outbox.uuid_v7() AS id, gen_random_uuid() AS agg) "
             "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, envelope) "
             "SELECT id, 'movie', agg, 'review.logged', %s FROM v RETURNING id::text",
             envelope_sql);
    return harness_scalar_text(conn, sql);
}

Test(ctl_validate, lists_the_rows_the_relay_then_quarantines)
{
    struct relay_env env;
    struct harness_proc relay;
    struct ctl_run r;
    char *no_id, *other_id, *huge, *listed;
    const char *want[3];

    relay_test_enqueue(conn, 20);
    harness_exec(conn, "DROP TRIGGER events_row_valid ON outbox.events");
    no_id = insert_raw("'{\"rating\": 5}'::jsonb");
    other_id = insert_raw("jsonb_build_object('id', gen_random_uuid(), 'event_type', "
                          "'review.logged', 'aggregate_type', 'movie', 'aggregate_id', agg, "
                          "'occurred_at', '2026-11-29T09:41:56.123Z', 'schema_version', 1, "
                          "'payload', '{}'::jsonb)");
    /* Within a raised writer limit, over the server's 1 MiB max_payload. */
    harness_exec(conn, "SET outbox.max_envelope_bytes = 4000000");
    huge = harness_scalar_text(conn, "SELECT outbox.enqueue('movie', gen_random_uuid(), 'big', "
                                     "jsonb_build_object('fill', repeat('x', 1500000)))::text");
    relay_test_env(&env, "VALIDATE", "validate");

    ctl_expect(&r, &env, 1, (const char *const[]){"validate", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "invalid"), 3, "%s", r.out);
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "checked"), 23);
    want[0] = no_id;
    want[1] = other_id;
    want[2] = huge;
    for (int i = 0; i < 3; i++) {
        int seen = 0;

        for (size_t k = 0; k < 3; k++) {
            seen += strcmp(ctl_str(ctl_line(&r, "invalid", k), "id"), want[i]) == 0;
        }
        cr_assert_eq(seen, 1, "validate must list %s", want[i]);
    }
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 1, (const char *const[]){"validate", "--event-type", "big", NULL});
    cr_assert(strstr(r.out, "1 pending row checked, 1 the relay would quarantine") != NULL, "%s",
              r.out);
    ctl_run_fini(&r);

    /* The relay agrees, row for row. */
    relay_test_start(&relay, &env, "validate-relay");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);
    listed = harness_scalar_text(conn, "SELECT string_agg(id::text, ',' ORDER BY id) FROM "
                                       "outbox.events WHERE status = 'invalid'");
    cr_assert_eq(relay_test_count(conn, "status = 'invalid'"), 3, "%s", listed);
    cr_assert(strstr(listed, no_id) && strstr(listed, other_id) && strstr(listed, huge), "%s",
              listed);
    ctl_expect(&r, &env, 0, (const char *const[]){"validate", NULL});
    ctl_run_fini(&r);
    free(listed);
    free(huge);
    free(other_id);
    free(no_id);
    relay_env_fini(&env);
}
