/* SPDX-License-Identifier: MIT */
/*
 * test_status.c - `outboxctl status` beyond the row counts: dead letters
 * per handler (the relay's under ""), lease expiries, the ledger's claims
 * in progress, and from NATS the stream's message count and sequences and
 * each durable consumer's pending and ack-pending counts; with NATS away
 * it still reports the database and says why the stream is missing.
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

TestSuite(ctl_status, .init = setup, .fini = teardown, .timeout = 120);

Test(ctl_status, reports_dead_letters_per_handler_claims_the_stream_and_its_consumers)
{
    struct consume_group g;
    struct harness_proc consumer;
    struct ctl_run r;
    char bad[200];
    json_t *doc, *by, *stream, *consumers, *c;

    consume_group_init(&g, "jetstream", "STAT", NULL);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "1");
    snprintf(bad, sizeof(bad), "bad@%s.movie.>=sql:SELECT 1/0", g.prefix);
    relay_test_enqueue(conn, 30);
    consume_test_start(&consumer, &g.env, "stat-1",
                       (const char *const[]){CONSUME_EFFECT("good"), bad, NULL});
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "good") == 30 &&
                           harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters") ==
                               30 &&
                           consume_test_nats_drained(g.stream, g.consumer),
                       30000);
    consume_test_stop(&consumer, 10000);
    /* A relay's dead letter, a row whose lease ran out twice, and a claim held right now. */
    harness_exec(conn, "INSERT INTO outbox.dead_letters (event_id, handler, reason) "
                       "VALUES (gen_random_uuid(), '', 'lease_expired_without_outcome')");
    harness_exec(conn, "UPDATE outbox.events SET status = 'pending', published_at = NULL, "
                       "lease_expiries = 2, next_attempt_at = 'infinity' WHERE id = "
                       "(SELECT id FROM outbox.events ORDER BY id LIMIT 1)");
    harness_exec(conn, "INSERT INTO outbox.processed_events (event_id, handler, owner_token, "
                       "claimed_until) VALUES (gen_random_uuid(), 'slow', gen_random_uuid(), "
                       "now() + interval '1 hour')");

    ctl_expect(&r, &g.env, 0, (const char *const[]){"status", "--json", NULL});
    cr_assert_eq(json_array_size(r.lines), 1, "status --json prints one object");
    doc = json_array_get(r.lines, 0);
    cr_assert_eq(ctl_int(doc, "done"), 29);
    cr_assert_eq(ctl_int(doc, "dead_letters"), 31);
    by = json_object_get(doc, "dead_letters_by_handler");
    cr_assert_eq(ctl_int(by, "bad"), 30);
    cr_assert_eq(ctl_int(by, ""), 1, "the relay's dead letters are under \"\"");
    cr_assert_eq(json_object_size(by), 2);
    cr_assert_eq(ctl_int(doc, "lease_expiries"), 2);
    cr_assert_eq(ctl_int(doc, "ledger_in_progress"), 1);
    stream = json_object_get(doc, "stream");
    cr_assert(json_is_object(stream), "no stream in %s", r.out);
    cr_assert_str_eq(ctl_str(stream, "name"), g.stream);
    cr_assert_eq(ctl_int(stream, "messages"), 30);
    cr_assert_eq(ctl_int(stream, "first_seq"), 1);
    cr_assert_eq(ctl_int(stream, "last_seq"), 30);
    consumers = json_object_get(doc, "consumers");
    cr_assert_eq(json_array_size(consumers), 1, "%s", r.out);
    c = json_array_get(consumers, 0);
    cr_assert_str_eq(ctl_str(c, "name"), g.consumer);
    cr_assert_eq(ctl_int(c, "num_pending"), 0);
    cr_assert_eq(ctl_int(c, "num_ack_pending"), 0);
    ctl_run_fini(&r);

    ctl_expect(&r, &g.env, 0, (const char *const[]){"status", NULL});
    cr_assert(strstr(r.out, "30 messages, sequences 1 to 30") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, g.consumer) != NULL, "%s", r.out);
    ctl_run_fini(&r);

    /* NATS away: the database's part still comes, and says why the stream is missing. */
    relay_env_set(&g.env, "OUTBOX_NATS_URL", "nats://127.0.0.1:1");
    ctl_expect(&r, &g.env, 0, (const char *const[]){"status", "--json", NULL});
    doc = json_array_get(r.lines, 0);
    cr_assert_eq(ctl_int(doc, "done"), 29);
    cr_assert(json_is_null(json_object_get(doc, "stream")));
    cr_assert_not_null(ctl_str(doc, "nats_error"));
    ctl_run_fini(&r);
    consume_group_fini(&g);
}
