/* SPDX-License-Identifier: MIT */
/*
 * test_stream_seq.c - the relay records on each published row the stream
 * sequence JetStream acked it at (events.stream_seq), on both finishes (a
 * batch all published, and a batch with a quarantined row), and a row
 * published again gets the sequence of the copy the stream already had.
 * Checked against the server: the message at that sequence carries the
 * row's id as Nats-Msg-Id. outboxctl trace and audit stand on this.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "consume_nats.h"
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

TestSuite(stream_seq, .init = setup, .fini = teardown, .timeout = 120);

/* Every done row's stream_seq names a message whose Nats-Msg-Id is the row's id; returns rows. */
static int
expect_sequences_match(const char *stream)
{
    PGresult *res = PQexec(conn, "SELECT id::text, stream_seq FROM outbox.events "
                                 "WHERE status = 'done' ORDER BY stream_seq");
    int rows = PQntuples(res);

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
    for (int i = 0; i < rows; i++) {
        char id[64], err[512] = "";
        uint64_t seq;

        cr_assert(!PQgetisnull(res, i, 1), "done row %s has no stream_seq", PQgetvalue(res, i, 0));
        seq = strtoull(PQgetvalue(res, i, 1), NULL, 10);
        cr_assert_eq(
            consume_nats_msg_id(harness_nats_url(), stream, seq, id, sizeof(id), err, sizeof(err)),
            0, "%s", err);
        cr_assert_str_eq(id, PQgetvalue(res, i, 0), "message %llu is not row %s",
                         (unsigned long long)seq, PQgetvalue(res, i, 0));
    }
    PQclear(res);
    return rows;
}

Test(stream_seq, the_relay_records_the_pubacks_sequence_on_every_published_row)
{
    struct harness_proc relay;
    struct relay_env env;
    char *bad_id, *again_id, *seq_before, *seq_after;

    relay_test_enqueue(conn, 150);
    /* A row only a foreign writer could commit: its batch is finished through the mixed path. */
    harness_exec(conn, "DROP TRIGGER events_row_valid ON outbox.events");
    bad_id = harness_scalar_text(
        conn, "WITH v AS (SELECT outbox.uuid_v7() AS id, gen_random_uuid() AS agg) "
              "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, envelope) "
              "SELECT id, 'movie', agg, 'review.logged', '{\"rating\": 5}'::jsonb FROM v "
              "RETURNING id::text");
    relay_test_enqueue(conn, 50);

    relay_test_env(&env, "SEQ", "seq");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "40");
    relay_test_start(&relay, &env, "seq-relay");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    cr_assert_eq(expect_sequences_match("SEQ"), 200);
    cr_assert_eq(relay_test_count(conn, "status = 'invalid' AND stream_seq IS NULL"), 1,
                 "the quarantined row %s must have no sequence", bad_id);

    /* A finish lost after the publish: the row is published again, the stream has it. */
    again_id = harness_scalar_text(conn, "SELECT id::text FROM outbox.events WHERE status = "
                                         "'done' ORDER BY id LIMIT 1 OFFSET 70");
    {
        char sql[512];

        snprintf(sql, sizeof(sql), "SELECT stream_seq::text FROM outbox.events WHERE id = '%s'",
                 again_id);
        seq_before = harness_scalar_text(conn, sql);
        snprintf(sql, sizeof(sql),
                 "UPDATE outbox.events SET status = 'pending', published_at = NULL, "
                 "stream_seq = NULL, next_attempt_at = now() WHERE id = '%s'",
                 again_id);
        harness_exec(conn, sql);
        HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
        snprintf(sql, sizeof(sql), "SELECT stream_seq::text FROM outbox.events WHERE id = '%s'",
                 again_id);
        seq_after = harness_scalar_text(conn, sql);
    }
    cr_assert_str_eq(seq_after, seq_before, "a duplicate must record the stored copy's sequence");
    cr_assert_eq(expect_sequences_match("SEQ"), 200);
    relay_test_stop(&relay, 10000);
    relay_test_check(conn, "SEQ");
    free(seq_before);
    free(seq_after);
    free(again_id);
    free(bad_id);
    relay_env_fini(&env);
}
