/* SPDX-License-Identifier: MIT */
/*
 * test_unmigrated_schema.c - a relay and a consumer started on a schema
 * that `outboxctl migrate` has not brought up to their build say so, by
 * name and with the command to run, and wait; once the schema is
 * migrated they work without a restart.
 */
#include <criterion/criterion.h>

#include "consume_test.h"
#include "harness.h"
#include "outbox/outbox.h"
#include "relay_test.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(unmigrated_schema, .init = setup, .fini = teardown, .timeout = 120);

#define NEEDLE "schema late_outbox is at migration 0, this build needs"

Test(unmigrated_schema, workers_wait_for_the_migration_and_then_run)
{
    struct relay_env relay_env;
    struct consume_group g;
    struct harness_proc relay, consumer;
    const char *handlers[] = {
        "proj=sql:INSERT INTO public.effects (event_id, handler) VALUES (($1->>'id')::uuid, "
        "'proj')",
        NULL};
    outbox_error err;

    /* The group's relay serves the default schema; this test runs its own for late_outbox. */
    consume_group_init(&g, "jetstream", "LATE", NULL);
    relay_env_set(&g.env, "OUTBOX_SCHEMA", "late_outbox");
    relay_test_env(&relay_env, g.stream, g.prefix);
    relay_env_set(&relay_env, "OUTBOX_SCHEMA", "late_outbox");
    relay_test_start(&relay, &relay_env, "late-relay");
    consume_test_start(&consumer, &g.env, "late-consumer", handlers);

    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&relay, NEEDLE) &&
                           harness_proc_log_contains(&consumer, NEEDLE) &&
                           harness_proc_log_contains(&consumer, "outboxctl migrate"),
                       20000);
    relay_test_assert_running(&relay, "a relay waiting for its schema");
    relay_test_assert_running(&consumer, "a consumer waiting for its schema");

    cr_assert_eq(outbox_migrate(conn, "late_outbox", NULL, &err), OUTBOX_OK, "%s", err.message);
    harness_exec(conn, "SELECT late_outbox.enqueue('movie', gen_random_uuid(), 'review.logged', "
                       "'{}'::jsonb) FROM generate_series(1, 5)");
    /* Published by the relay, handled by the consumer from the stream. */
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects") == 5 &&
                           harness_scalar_ll(conn, "SELECT count(*) FROM late_outbox.events "
                                                   "WHERE published_at IS NOT NULL") == 5,
                       30000);
    relay_test_stop(&relay, 10000);
    consume_test_stop(&consumer, 10000);
    relay_env_fini(&relay_env);
    consume_group_fini(&g); /* and the group's own relay, on the default schema */
}
