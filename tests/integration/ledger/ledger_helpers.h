/* SPDX-License-Identifier: MIT */
/*
 * ledger_helpers.h - small steps the ledger tests share: a ledger on this
 * test's fresh database, sample events from the SQL writer, claims that
 * must succeed, and ledger rows read back. Header-only (static inline) so
 * each test binary stays one file.
 */
#ifndef OBX_TEST_LEDGER_HELPERS_H
#define OBX_TEST_LEDGER_HELPERS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ledger/ledger.h"

/* Sample events: ids and envelopes as the consumer would hand them over. */
struct helper_events {
    size_t count;
    struct obx_ledger_event *events; /* point into ids/envelopes */
    char (*ids)[37];
    char **envelopes;
};

/* A ledger on the database harness_pg_connect_fresh() made for this test. */
static inline struct obx_ledger *
helper_ledger_open(const char *application_name)
{
    struct obx_store_options opts = {
        .conninfo = harness_db_url(),
        .schema = "outbox",
        .application_name = application_name,
    };
    struct obx_ledger *ledger = NULL;
    outbox_error err;
    outbox_status status = obx_ledger_open(&opts, &ledger, &err);

    cr_assert_eq(status, OUTBOX_OK, "obx_ledger_open: %s: %s", outbox_status_name(status),
                 err.message);
    return ledger;
}

/* Another connection to this test's database; the caller PQfinish()es it. */
static inline PGconn *
helper_connect(void)
{
    PGconn *c = PQconnectdb(harness_db_url());

    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect: %s", PQerrorMessage(c));
    return c;
}

/* Enqueues `n` events through outbox.enqueue() and reads them back in id order. */
static inline struct helper_events
helper_events_new(PGconn *conn, int n)
{
    struct helper_events ev = {0};
    char sql[256];
    PGresult *res;

    snprintf(sql, sizeof(sql),
             "SELECT count(outbox.enqueue('movie', gen_random_uuid(), 'review.logged', "
             "'{\"n\":1}')) FROM generate_series(1, %d)",
             n);
    cr_assert_eq(harness_scalar_ll(conn, sql), n);
    res = PQexec(conn, "SELECT id, envelope::text FROM outbox.events ORDER BY id");
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
    ev.count = (size_t)PQntuples(res);
    ev.events = calloc(ev.count + 1, sizeof(*ev.events));
    ev.ids = calloc(ev.count + 1, sizeof(*ev.ids));
    ev.envelopes = calloc(ev.count + 1, sizeof(*ev.envelopes));
    cr_assert(ev.events != NULL && ev.ids != NULL && ev.envelopes != NULL);
    for (size_t i = 0; i < ev.count; i++) {
        snprintf(ev.ids[i], sizeof(ev.ids[i]), "%s", PQgetvalue(res, (int)i, 0));
        ev.envelopes[i] = strdup(PQgetvalue(res, (int)i, 1));
        ev.events[i].event_id = ev.ids[i];
        ev.events[i].envelope = ev.envelopes[i];
    }
    PQclear(res);
    return ev;
}

static inline void
helper_events_free(struct helper_events *ev)
{
    for (size_t i = 0; i < ev->count; i++) {
        free(ev->envelopes[i]);
    }
    free(ev->envelopes);
    free(ev->ids);
    free(ev->events);
    memset(ev, 0, sizeof(*ev));
}

/* Claims and asserts the call succeeded; returns a calloc'd array the caller frees. */
static inline struct obx_claim *
helper_claim(struct obx_ledger *ledger, const char *handler, const struct obx_ledger_event *events,
             size_t count, int lease_seconds)
{
    struct obx_claim *claims = calloc(count + 1, sizeof(*claims));
    outbox_error err;
    outbox_status status;

    cr_assert_not_null(claims);
    status = obx_ledger_claim(ledger, handler, events, count, lease_seconds, 1000, claims, &err);
    cr_assert_eq(status, OUTBOX_OK, "obx_ledger_claim: %s: %s", outbox_status_name(status),
                 err.message);
    return claims;
}

/* Claims one event and returns its result. */
static inline struct obx_claim
helper_claim_one(struct obx_ledger *ledger, const char *handler,
                 const struct obx_ledger_event *event, int lease_seconds)
{
    struct obx_claim *claims = helper_claim(ledger, handler, event, 1, lease_seconds);
    struct obx_claim claim = claims[0];

    free(claims);
    return claim;
}

/* Marks the RUN claims done; returns how many rows changed. */
static inline size_t
helper_mark_done(struct obx_ledger *ledger, const char *handler,
                 const struct obx_ledger_event *events, const struct obx_claim *claims,
                 size_t count)
{
    size_t marked = 0;
    outbox_error err;
    outbox_status status =
        obx_ledger_mark_done(ledger, handler, events, claims, count, &marked, &err);

    cr_assert_eq(status, OUTBOX_OK, "obx_ledger_mark_done: %s: %s", outbox_status_name(status),
                 err.message);
    return marked;
}

/* Failure policy with a 1 s backoff base, so tests read delays in seconds. */
static inline struct obx_failure_policy
helper_policy(int max_attempts)
{
    struct obx_failure_policy policy = {
        .max_attempts = max_attempts,
        .backoff_base_ms = 1000,
        .backoff_cap_ms = 300000,
    };

    return policy;
}

/* Records a failure and asserts the call succeeded. */
static inline struct obx_failure_result
helper_fail(struct obx_ledger *ledger, const char *handler, const struct obx_ledger_event *event,
            const struct obx_claim *claim, const char *reason, int max_attempts)
{
    struct obx_failure_policy policy = helper_policy(max_attempts);
    struct obx_failure_result result;
    outbox_error err;
    outbox_status status =
        obx_ledger_record_failure(ledger, handler, event, claim, reason, &policy, &result, &err);

    cr_assert_eq(status, OUTBOX_OK, "obx_ledger_record_failure: %s: %s", outbox_status_name(status),
                 err.message);
    return result;
}

/* Asserts a ledger call returned OUTBOX_OK; needs `outbox_error err` in scope. */
#define LEDGER_OK(call)                                                   \
    do {                                                                  \
        outbox_status ledger_ok_status_ = (call);                         \
        cr_assert_eq(ledger_ok_status_, OUTBOX_OK, "%s: %s: %s", #call,   \
                     outbox_status_name(ledger_ok_status_), err.message); \
    } while (0)

/* A one-value query about one (event, handler) row: `expr` over outbox.processed_events. */
static inline long long
helper_row_ll(PGconn *conn, const char *expr, const char *event_id, const char *handler)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "SELECT %s FROM outbox.processed_events WHERE event_id = '%s' AND handler = '%s'",
             expr, event_id, handler);
    return harness_scalar_ll(conn, sql);
}

/* Same, as text (malloc'd, NULL for SQL NULL); the caller frees it. */
static inline char *
helper_row_text(PGconn *conn, const char *expr, const char *event_id, const char *handler)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "SELECT %s FROM outbox.processed_events WHERE event_id = '%s' AND handler = '%s'",
             expr, event_id, handler);
    return harness_scalar_text(conn, sql);
}

/* SELECT count(*) FROM outbox.<table> WHERE <where>. */
static inline long long
helper_count(PGconn *conn, const char *table, const char *where)
{
    char sql[1024];

    snprintf(sql, sizeof(sql), "SELECT count(*) FROM outbox.%s WHERE %s", table, where);
    return harness_scalar_ll(conn, sql);
}

/*
 * One of the current transaction's counters of outbox.`table` so far
 * (pg_stat_xact_user_tables: seq_tup_read, idx_tup_fetch, n_tup_upd, ...),
 * for the plan tests, which count the rows a statement read: the view adds
 * the counts not yet sent to the server's statistics, so two readings in
 * one transaction give what ran between them.
 */
static inline long long
helper_xact_counter(PGconn *conn, const char *table, const char *column)
{
    char sql[256];

    snprintf(sql, sizeof(sql),
             "SELECT coalesce(%s, 0) FROM pg_stat_xact_user_tables WHERE schemaname = 'outbox' "
             "AND relname = '%s'",
             column, table);
    return harness_scalar_ll(conn, sql);
}

/* `rows` finished claims of `handler` (done, each its own event): a ledger that has run a while. */
static inline void
helper_finished_claims(PGconn *conn, const char *handler, int rows)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "INSERT INTO outbox.processed_events (event_id, handler, status, started_at, "
             "finished_at) SELECT gen_random_uuid(), '%s', 'done', now(), now() "
             "FROM generate_series(1, %d)",
             handler, rows);
    harness_exec(conn, sql);
}

/*
 * The same `rows`, analyzed when half of them were there: statistics a
 * growing ledger has between two runs of autovacuum.
 */
static inline void
helper_finished_claims_analyzed_at_half(PGconn *conn, const char *handler, int rows)
{
    helper_finished_claims(conn, handler, rows / 2);
    harness_exec(conn, "ANALYZE outbox.processed_events");
    helper_finished_claims(conn, handler, rows - rows / 2);
}

#endif
