/* SPDX-License-Identifier: MIT */
/*
 * test_feed_db.c - the DB-only feed against a real PostgreSQL: a fetch
 * leases due rows with their subject, each settle writes what feed.h says
 * (ACK done or deleted, NAK released with its own delay and no attempt,
 * TERM done), replicas get disjoint rows, a commit wakes a waiting fetch,
 * in_progress extends the lease, invalid rows are quarantined without
 * holding up the rows behind them, and a database restart is survived.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <libpq-fe.h>

#include "envelope/envelope.h"
#include "feed/feed.h"
#include "harness.h"
#include "store_helpers.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define MAX_BATCH 64

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

TestSuite(feed_db, .init = setup, .fini = teardown, .timeout = 90);

/* ---- helpers ---------------------------------------------------------------------------- */

static struct obx_feed *
open_db_feed(int lease_seconds, int prune)
{
    struct obx_feed_options o;
    struct obx_feed *feed = NULL;
    outbox_error err = {0};
    outbox_status st;

    memset(&o, 0, sizeof(o));
    o.database_url = harness_db_url();
    o.schema = "outbox";
    o.lease_seconds = lease_seconds;
    o.prune = prune;
    o.subject_prefix = "evdb";
    o.name = "feed-db-test";
    st = obx_feed_db_open(&o, &feed, &err);
    cr_assert_eq(st, OUTBOX_OK, "obx_feed_db_open: %s: %s", outbox_status_name(st), err.message);
    return feed;
}

static void
fetch_ok(struct obx_feed *feed, size_t max, int timeout_ms, struct obx_feed_batch *b)
{
    outbox_error err = {0};
    outbox_status st = feed->ops->fetch(feed, max, timeout_ms, b, &err);

    cr_assert_eq(st, OUTBOX_OK, "fetch: %s: %s", outbox_status_name(st), err.message);
}

static void
settle_ok(struct obx_feed *feed, struct obx_feed_batch *b, const enum obx_settle *what,
          const long long *delays)
{
    outbox_error err = {0};
    outbox_status st = feed->ops->settle(feed, b, what, delays, &err);

    cr_assert_eq(st, OUTBOX_OK, "settle: %s: %s", outbox_status_name(st), err.message);
}

static void
settle_all(struct obx_feed *feed, struct obx_feed_batch *b, enum obx_settle what)
{
    enum obx_settle whats[MAX_BATCH];
    long long delays[MAX_BATCH] = {0};

    cr_assert(b->count <= MAX_BATCH);
    for (size_t i = 0; i < b->count; i++) {
        whats[i] = what;
    }
    settle_ok(feed, b, whats, delays);
}

/* SELECT <expr> FROM outbox.events WHERE id = '<id>', as text (the caller frees). */
static char *
row_value(const char *expr, const char *id)
{
    char sql[512];

    snprintf(sql, sizeof(sql), "SELECT (%s)::text FROM outbox.events WHERE id = '%s'", expr, id);
    return harness_scalar_text(conn, sql);
}

static void
expect_row(const char *expr, const char *id, const char *want)
{
    char *got = row_value(expr, id);

    cr_assert(got != NULL && strcmp(got, want) == 0, "%s of %s: %s, not %s", expr, id,
              got ? got : "NULL", want);
    free(got);
}

/* ---- fetch and settle ------------------------------------------------------------------- */

Test(feed_db, fetch_leases_due_rows_with_the_subject_computed_from_the_envelope)
{
    struct obx_feed *feed = open_db_feed(60, 0);
    struct obx_feed_batch b;

    helper_enqueue(conn, 3);
    fetch_ok(feed, 10, 1000, &b);
    cr_assert_eq(b.count, 3);
    for (size_t i = 0; i < b.count; i++) {
        char expect[128];

        cr_assert_str_eq(b.msgs[i].subject, "evdb.movie.review.logged");
        cr_assert_eq(b.msgs[i].deliveries, 1);
        snprintf(expect, sizeof(expect), "\"id\": \"%s\"", b.msgs[i].event_id);
        cr_assert(strstr(b.msgs[i].envelope, expect) != NULL, "%s has not the row id: %s",
                  b.msgs[i].envelope, expect);
        cr_assert_eq(b.msgs[i].envelope_len, strlen(b.msgs[i].envelope));
        expect_row("status", b.msgs[i].event_id, "pending"); /* claimed by window: unwritten */
    }
    feed->ops->batch_fini(feed, &b);
    fetch_ok(feed, 10, 0, &b);
    cr_assert_eq(b.count, 0, "claimed rows are not claimed again");
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

Test(feed_db, an_ordered_schemas_events_reach_the_consumer_with_their_aggregate_seq)
{
    struct obx_feed *feed;
    struct obx_feed_batch b;
    long long seen = 0;

    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    harness_exec(conn, "SELECT outbox.enqueue('movie', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b', "
                       "'review.logged', jsonb_build_object('n', n)) FROM generate_series(1, 3) n");
    feed = open_db_feed(60, 0);
    fetch_ok(feed, 10, 1000, &b);
    cr_assert_eq(b.count, 3);
    for (size_t i = 0; i < b.count; i++) {
        struct obx_envelope env;
        outbox_error err = {0};

        /* What the consumer parses (message_check.c): the sequence is in its event. */
        cr_assert_eq(
            obx_envelope_parse(b.msgs[i].envelope, b.msgs[i].envelope_len, SIZE_MAX, &env, &err),
            OUTBOX_OK, "%s", err.message);
        cr_expect(env.head.aggregate_seq >= 1 && env.head.aggregate_seq <= 3, "%lld",
                  env.head.aggregate_seq);
        seen |= 1LL << env.head.aggregate_seq;
        obx_envelope_fini(&env);
    }
    cr_expect_eq(seen, 2 + 4 + 8, "numbers 1, 2 and 3, once each");
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

Test(feed_db, ack_marks_the_rows_done_in_mark_mode)
{
    struct obx_feed *feed = open_db_feed(60, 0);
    struct obx_feed_batch b;

    helper_enqueue(conn, 2);
    fetch_ok(feed, 10, 1000, &b);
    cr_assert_eq(b.count, 2);
    settle_all(feed, &b, OBX_SETTLE_ACK);
    feed->ops->batch_fini(feed, &b);
    cr_assert_eq(helper_count(conn, "status = 'done' AND published_at IS NOT NULL"), 2);
    cr_assert_eq(helper_count(conn, "attempts = 0"), 2);
    feed->ops->close(feed);
}

Test(feed_db, ack_deletes_the_rows_in_prune_mode)
{
    struct obx_feed *feed = open_db_feed(60, 1);
    struct obx_feed_batch b;

    helper_enqueue(conn, 2);
    fetch_ok(feed, 10, 1000, &b);
    cr_assert_eq(b.count, 2);
    settle_all(feed, &b, OBX_SETTLE_ACK);
    feed->ops->batch_fini(feed, &b);
    cr_assert_eq(helper_count(conn, "true"), 0);
    feed->ops->close(feed);
}

Test(feed_db, term_finishes_the_row_as_done)
{
    struct obx_feed *feed = open_db_feed(60, 0);
    struct obx_feed_batch b;

    helper_enqueue(conn, 1);
    fetch_ok(feed, 10, 1000, &b);
    settle_all(feed, &b, OBX_SETTLE_TERM);
    feed->ops->batch_fini(feed, &b);
    cr_assert_eq(helper_count(conn, "status = 'done'"), 1);
    feed->ops->close(feed);
}

Test(feed_db, nak_releases_each_row_with_its_own_delay_and_spends_no_attempt)
{
    struct obx_feed *feed = open_db_feed(60, 0);
    enum obx_settle what[3] = {OBX_SETTLE_NAK, OBX_SETTLE_NAK, OBX_SETTLE_ACK};
    long long delays[3] = {0, 600000, 0};
    struct obx_feed_batch b;
    char *soon, *late, *acked;

    helper_enqueue(conn, 3);
    fetch_ok(feed, 10, 1000, &b);
    cr_assert_eq(b.count, 3);
    soon = strdup(b.msgs[0].event_id);
    late = strdup(b.msgs[1].event_id);
    acked = strdup(b.msgs[2].event_id);
    settle_ok(feed, &b, what, delays);
    feed->ops->batch_fini(feed, &b);
    expect_row("status", soon, "pending");
    expect_row("status", late, "pending");
    expect_row("status", acked, "done");
    expect_row("next_attempt_at <= now()", soon, "true");
    expect_row("next_attempt_at BETWEEN now() + interval '590 s' AND now() + interval '610 s'",
               late, "true");
    cr_assert_eq(helper_count(conn, "attempts = 0 AND last_error IS NULL"), 3, "nothing spent");
    fetch_ok(feed, 10, 1000, &b);
    cr_assert_eq(b.count, 1, "only the row without a delay is due again");
    cr_assert_str_eq(b.msgs[0].event_id, soon);
    feed->ops->batch_fini(feed, &b);
    free(soon);
    free(late);
    free(acked);
    feed->ops->close(feed);
}

Test(feed_db, two_feeds_lease_disjoint_rows)
{
    struct obx_feed *a = open_db_feed(60, 0);
    struct obx_feed *b = open_db_feed(60, 0);
    struct obx_feed_batch ba, bb;

    helper_enqueue(conn, 20);
    fetch_ok(a, 10, 0, &ba);
    fetch_ok(b, 15, 0, &bb);
    cr_assert_eq(ba.count, 10);
    cr_assert_eq(bb.count, 10, "the other ten, not more");
    for (size_t i = 0; i < ba.count; i++) {
        for (size_t j = 0; j < bb.count; j++) {
            cr_assert_str_neq(ba.msgs[i].event_id, bb.msgs[j].event_id, "leased twice");
        }
    }
    a->ops->batch_fini(a, &ba);
    b->ops->batch_fini(b, &bb);
    a->ops->close(a);
    b->ops->close(b);
}

/* ---- waiting ---------------------------------------------------------------------------- */

struct late_writer {
    char *url;
    int ok;
};

/* Waits until the feed's session sits idle after a claim (so its fetch waits), then commits
 * one event from another connection. An empty window claim ends in the read of its rows
 * (claim_window_rows.sql, after its COMMIT), and no row lease follows it when nothing came
 * back. libpq only: Criterion asserts need the test's thread. */
static void *
write_when_waiting(void *arg)
{
    struct late_writer *w = arg;
    PGconn *c = PQconnectdb(w->url);
    long long deadline = harness_now_ms() + 20000;

    while (PQstatus(c) == CONNECTION_OK && harness_now_ms() < deadline) {
        PGresult *r = PQexec(c, "SELECT count(*) FROM pg_stat_activity WHERE application_name "
                                "= 'outboxd-consumer' AND datname = current_database() "
                                "AND state = 'idle' AND query LIKE '-- claim_window_rows:%'");
        int idle = PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "1") == 0;

        PQclear(r);
        if (idle) {
            r = PQexec(c, "SELECT outbox.enqueue('movie', gen_random_uuid(), 'review.logged', "
                          "'{\"n\":1}')");
            w->ok = PQresultStatus(r) == PGRES_TUPLES_OK;
            PQclear(r);
            break;
        }
        harness_sleep_ms(20);
    }
    PQfinish(c);
    return NULL;
}

Test(feed_db, a_commit_elsewhere_ends_a_waiting_fetch_long_before_its_timeout)
{
    struct obx_feed *feed = open_db_feed(60, 0);
    struct late_writer w = {strdup(harness_db_url()), 0};
    struct obx_feed_batch b;
    pthread_t t;
    long long t0, elapsed;

    cr_assert_eq(pthread_create(&t, NULL, write_when_waiting, &w), 0);
    t0 = harness_now_ms();
    fetch_ok(feed, 10, 20000, &b);
    elapsed = harness_now_ms() - t0;
    pthread_join(t, NULL);
    cr_assert(w.ok, "the writer never saw the feed waiting, or could not enqueue");
    cr_assert_eq(b.count, 1, "the fetch ended without the new row");
    cr_assert_lt(elapsed, 10000, "woken only after %lld ms of a 20 s wait", elapsed);
    feed->ops->batch_fini(feed, &b);
    free(w.url);
    feed->ops->close(feed);
}

Test(feed_db, an_empty_fetch_waits_its_timeout_and_is_not_an_error)
{
    struct obx_feed *feed = open_db_feed(60, 0);
    struct obx_feed_batch b;
    long long t0 = harness_now_ms();

    fetch_ok(feed, 10, 400, &b);
    cr_assert_eq(b.count, 0);
    cr_assert_geq(harness_now_ms() - t0, 350);
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

/* ---- long work and crashes -------------------------------------------------------------- */

Test(feed_db, in_progress_extends_the_lease_and_a_lapsed_one_is_delivered_again)
{
    struct obx_feed *worker = open_db_feed(2, 0);
    struct obx_feed *other = open_db_feed(2, 0);
    struct obx_feed_batch held, b;
    outbox_error err = {0};
    long long stop_at;

    helper_enqueue(conn, 1);
    fetch_ok(worker, 1, 1000, &held);
    cr_assert_eq(held.count, 1);
    stop_at = harness_now_ms() + 5000; /* two and a half leases */
    while (harness_now_ms() < stop_at) {
        cr_assert_eq(worker->ops->in_progress(worker, &held, 0, &err), OUTBOX_OK, "%s",
                     err.message);
        fetch_ok(other, 1, 500, &b);
        cr_assert_eq(b.count, 0, "leased again while in progress was reported");
        other->ops->batch_fini(other, &b);
    }
    HARNESS_WAIT_UNTIL((other->ops->batch_fini(other, &b), fetch_ok(other, 1, 200, &b), b.count),
                       6000);
    cr_assert_str_eq(b.msgs[0].event_id, held.msgs[0].event_id);
    cr_assert_eq(b.msgs[0].deliveries, 2, "the lapsed lease counts as a delivery");
    cr_assert_eq(worker->ops->in_progress(worker, &held, 0, &err), OUTBOX_ECONFLICT,
                 "the old lease is gone");
    settle_all(other, &b, OBX_SETTLE_ACK);
    other->ops->batch_fini(other, &b);
    worker->ops->batch_fini(worker, &held);
    worker->ops->close(worker);
    other->ops->close(other);
}

/* ---- bad rows --------------------------------------------------------------------------- */

/* A row only a writer bypassing the constraints could commit; returns its id (freed by caller). */
static char *
insert_raw(const char *aggregate_type, const char *envelope_sql)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "WITH v AS (SELECT gen_random_uuid() AS id) "
             "INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, envelope) "
             "SELECT id, '%s', gen_random_uuid(), 'review.logged', %s FROM v RETURNING id::text",
             aggregate_type, envelope_sql);
    return harness_scalar_text(conn, sql);
}

Test(feed_db, an_invalid_row_is_quarantined_with_its_reason_and_never_blocks_the_rows_behind)
{
    struct obx_feed *feed = open_db_feed(60, 0);
    struct obx_feed_batch b;
    char *bare, *wrong_id, *mixed_bad;
    char *reason;

    /* What only an old or foreign writer could write: every event rule lives in one trigger. */
    harness_exec(conn, "DROP TRIGGER events_row_valid ON outbox.events");
    /* A lease of nothing but bad rows: the fetch must go on to the good row. */
    bare = insert_raw("movie", "'{\"rating\": 5}'::jsonb");
    wrong_id = insert_raw("movie", "jsonb_build_object('id', gen_random_uuid(), 'event_type', "
                                   "'review.logged', 'aggregate_type', 'movie', 'aggregate_id', "
                                   "gen_random_uuid(), 'occurred_at', '2026-11-29T09:41:56.123Z', "
                                   "'schema_version', 1, 'payload', '{}'::jsonb)");
    helper_enqueue(conn, 1);
    fetch_ok(feed, 2, 2000, &b);
    cr_assert_eq(b.count, 1, "the good row comes in the same fetch");
    expect_row("aggregate_type", b.msgs[0].event_id, "movie");
    settle_all(feed, &b, OBX_SETTLE_ACK);
    feed->ops->batch_fini(feed, &b);
    expect_row("status", bare, "invalid");
    reason = row_value("last_error", bare);
    cr_assert(reason != NULL && strstr(reason, "id") != NULL, "reason: %s", reason);
    free(reason);
    expect_row("status", wrong_id, "invalid");
    expect_row("last_error", wrong_id, "envelope id differs from the row id");

    /* Mixed with good rows: delivered without it, quarantined by the batch's settle. */
    mixed_bad = insert_raw("movie", "'[1, 2]'::jsonb");
    helper_enqueue(conn, 2);
    fetch_ok(feed, 10, 2000, &b);
    cr_assert_eq(b.count, 2, "both good rows, not the bad one");
    settle_all(feed, &b, OBX_SETTLE_ACK);
    feed->ops->batch_fini(feed, &b);
    expect_row("status", mixed_bad, "invalid");
    cr_assert_eq(helper_count(conn, "status = 'done'"), 3);
    cr_assert_eq(helper_count(conn, "status = 'invalid'"), 3);
    free(bare);
    free(wrong_id);
    free(mixed_bad);
    feed->ops->close(feed);
}

/* ---- outages ---------------------------------------------------------------------------- */

Test(feed_db, a_database_restart_makes_fetch_unavailable_and_then_it_recovers)
{
    struct obx_feed *feed;
    struct obx_feed_batch b;
    outbox_error err = {0};
    outbox_status st;

    harness_servers_exclusive();
    feed = open_db_feed(60, 0);
    harness_pg_stop("fast");
    st = feed->ops->fetch(feed, 10, 500, &b, &err);
    cr_assert_eq(st, OUTBOX_EUNAVAILABLE, "%s: %s", outbox_status_name(st), err.message);
    feed->ops->batch_fini(feed, &b);
    harness_pg_start();
    PQfinish(conn);
    conn = helper_connect();
    helper_enqueue(conn, 1);
    HARNESS_WAIT_UNTIL((feed->ops->batch_fini(feed, &b),
                        feed->ops->fetch(feed, 10, 200, &b, &err) == OUTBOX_OK && b.count == 1),
                       20000);
    settle_all(feed, &b, OBX_SETTLE_ACK);
    feed->ops->batch_fini(feed, &b);
    cr_assert_eq(helper_count(conn, "status = 'done'"), 1);
    feed->ops->close(feed);
}

Test(feed_db, opening_while_the_database_is_unreachable_is_unavailable)
{
    struct obx_feed_options o;
    struct obx_feed *feed = NULL;
    outbox_error err = {0};

    memset(&o, 0, sizeof(o));
    o.database_url = "postgresql://127.0.0.1:1/outbox?connect_timeout=2";
    o.lease_seconds = 60;
    o.subject_prefix = "evdb";
    cr_assert_eq(obx_feed_db_open(&o, &feed, &err), OUTBOX_EUNAVAILABLE, "%s", err.message);
    cr_assert_null(feed);
}
