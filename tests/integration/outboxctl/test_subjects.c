/* SPDX-License-Identifier: MIT */
/*
 * test_subjects.c - `outboxctl subjects`: an event subject no running
 * handler's filter matches is an orphan publish and a filter that matches
 * nothing published is a dead subscription, both exit 1; once every
 * subject is consumed and the stale binding of a stopped consumer has aged
 * out, exit 0. Bindings come from the consumers themselves (the handlers
 * table), published subjects from the outbox and the stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "consume_test.h"
#include "ctl_test.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

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

TestSuite(ctl_subjects, .init = setup, .fini = teardown, .timeout = 120);

Test(ctl_subjects, orphan_subjects_and_dead_subscriptions_exit_1)
{
    struct consume_group g;
    struct harness_proc consumer;
    struct ctl_run r;
    char movies[200], orders[200], users[200], orphan[120];
    json_t *line;

    consume_group_init(&g, "jetstream", "SUBJ", NULL);
    snprintf(movies, sizeof(movies), "movies@%s.movie.>=sql:SELECT 1", g.prefix);
    snprintf(orders, sizeof(orders), "orders@%s.order.*=sql:SELECT 1", g.prefix);
    snprintf(users, sizeof(users), "users@%s.user.>=sql:SELECT 1", g.prefix);
    snprintf(orphan, sizeof(orphan), "%s.user.signed_up", g.prefix);
    relay_test_enqueue(conn, 3);
    harness_exec(conn, "SELECT outbox.enqueue('user', gen_random_uuid(), 'signed_up', '{}')");
    consume_test_start(&consumer, &g.env, "subj-1", (const char *const[]){movies, orders, NULL});
    HARNESS_WAIT_UNTIL(
        relay_test_unfinished(conn) == 0 && consume_test_nats_drained(g.stream, g.consumer), 30000);

    ctl_expect(&r, &g.env, 1, (const char *const[]){"subjects", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "orphan_publish"), 1, "%s", r.out);
    line = ctl_line(&r, "orphan_publish", 0);
    cr_assert_str_eq(ctl_str(line, "subject"), orphan);
    cr_assert_eq(ctl_int(line, "outbox_rows"), 1);
    cr_assert_eq(ctl_int(line, "stream_messages"), 1);
    cr_assert_eq(ctl_count(&r, "dead_subscription"), 1);
    cr_assert_str_eq(ctl_str(ctl_line(&r, "dead_subscription", 0), "name"), "orders");
    cr_assert_eq(ctl_count(&r, "subject"), 1); /* the movies' subject, consumed */
    ctl_run_fini(&r);
    ctl_expect(&r, &g.env, 1, (const char *const[]){"subjects", NULL});
    cr_assert(strstr(r.out, "1 orphan publishes, 1 dead subscriptions") != NULL, "%s", r.out);
    ctl_run_fini(&r);

    /* Fixed: users consumed, orders gone; its binding ages out like a stopped consumer's. */
    consume_test_stop(&consumer, 10000);
    consume_test_start(&consumer, &g.env, "subj-2", (const char *const[]){movies, users, NULL});
    HARNESS_WAIT_UNTIL(
        harness_scalar_ll(conn, "SELECT count(*) FROM outbox.handlers WHERE name = 'users'") == 1,
        20000);
    ctl_expect(&r, &g.env, 1, (const char *const[]){"subjects", NULL});
    ctl_run_fini(&r);
    harness_exec(conn, "UPDATE outbox.handlers SET last_seen = now() - interval '1 hour' "
                       "WHERE name = 'orders'");
    ctl_expect(&r, &g.env, 0, (const char *const[]){"subjects", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "orphan_publish"), 0, "%s", r.out);
    cr_assert_eq(ctl_count(&r, "dead_subscription"), 0);
    cr_assert_eq(ctl_count(&r, "stale_handler"), 1);
    ctl_run_fini(&r);
    consume_test_stop(&consumer, 10000);
    consume_group_fini(&g);
}
