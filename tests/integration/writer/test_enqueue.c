/* SPDX-License-Identifier: MIT */
/*
 * test_enqueue.c - the C writer against a real PostgreSQL: an event exists
 * if and only if the caller's transaction commits, a refused event leaves
 * that transaction usable and sends nothing, and a batch is one round trip.
 * "Sends nothing" and "one round trip" are read from libpq's wire trace.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "outbox/outbox.h"
#include "sql_gen.h"
#include "test_config.h"

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

TestSuite(enqueue, .init = setup, .fini = teardown, .timeout = 60);

static const char aggregate_id[] = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b";
static const char traceparent[] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/* ---- helpers ------------------------------------------------------------------------- */

/* A complete, valid event; tenant and subject may be NULL. */
static outbox_event *
new_event(const char *tenant_id, const char *data_subject)
{
    outbox_event *ev = outbox_event_new();
    outbox_error err;

    cr_assert_not_null(ev);
    cr_assert_eq(outbox_event_set_route(ev, "movie", "review.logged", &err), OUTBOX_OK, "%s",
                 err.message);
    cr_assert_eq(outbox_event_set_aggregate_id(ev, aggregate_id, &err), OUTBOX_OK, "%s",
                 err.message);
    cr_assert_eq(outbox_event_set_payload_json(ev, "{\"stars\": 5}", 12, &err), OUTBOX_OK, "%s",
                 err.message);
    cr_assert_eq(outbox_event_set_tenant_id(ev, tenant_id, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(outbox_event_set_data_subject(ev, data_subject, &err), OUTBOX_OK, "%s",
                 err.message);
    return ev;
}

static long long
event_count(PGconn *c)
{
    return harness_scalar_ll(c, "SELECT count(*) FROM outbox.events");
}

/* One statement with text parameters; returns the result, which must be `want`. */
static PGresult *
query(PGconn *c, ExecStatusType want, const char *sql, int n, const char *const *params)
{
    PGresult *res = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);

    cr_assert_eq(PQresultStatus(res), want, "%s: %s", sql, PQresultErrorMessage(res));
    return res;
}

/* libpq's record of every protocol message on a connection. */
struct wire_trace {
    FILE *file;
    char *text;
    size_t len;
};

static void
trace_start(PGconn *c, struct wire_trace *t)
{
    memset(t, 0, sizeof(*t));
    t->file = open_memstream(&t->text, &t->len);
    cr_assert_not_null(t->file);
    PQtrace(c, t->file);
    PQsetTraceFlags(c, PQTRACE_SUPPRESS_TIMESTAMPS);
}

static void
trace_stop(PGconn *c, struct wire_trace *t)
{
    PQuntrace(c);
    fclose(t->file);
    t->file = NULL;
}

/* How many messages the client sent of `type` ("Sync", "Query"...); NULL counts all. */
static int
trace_sent(const struct wire_trace *t, const char *type)
{
    int count = 0;

    /* Lines read "F\t<length>\t<type>[\t<arguments>]"; "B" lines are the server's. */
    for (const char *line = t->text; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        const char *name = strchr(line, '\t');

        name = name ? strchr(name + 1, '\t') : NULL;
        if (strncmp(line, "F\t", 2) == 0 && name != NULL && (end == NULL || name < end)) {
            size_t name_len = strcspn(name + 1, "\t\n");

            if (type == NULL ||
                (name_len == strlen(type) && strncmp(name + 1, type, name_len) == 0)) {
                count++;
            }
        }
        line = end ? end + 1 : NULL;
    }
    return count;
}

/* Round trips: every Sync (extended protocol) or Query (simple protocol) the client sent. */
static int
trace_round_trips(const struct wire_trace *t)
{
    return trace_sent(t, "Sync") + trace_sent(t, "Query");
}

static void
trace_free(struct wire_trace *t)
{
    free(t->text);
    t->text = NULL;
}

/* A second connection to the test's database. */
static PGconn *
connect_again(void)
{
    PGconn *c = PQconnectdb(harness_db_url());

    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    return c;
}

/* ---- transaction rules --------------------------------------------------------------- */

Test(enqueue, refuses_to_run_outside_a_transaction)
{
    outbox_event *ev = new_event(NULL, NULL);
    outbox_event *batch[] = {ev};
    struct wire_trace t;
    outbox_error err;

    trace_start(conn, &t);
    cr_assert_eq(outbox_enqueue(conn, ev, &err), OUTBOX_ENOTXN, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    cr_expect(strstr(err.message, "not inside a transaction") != NULL, "%s", err.message);
    cr_assert_eq(outbox_enqueue_batch(conn, batch, 1, &err), OUTBOX_ENOTXN, "%s", err.message);
    trace_stop(conn, &t);
    cr_expect_eq(trace_sent(&t, NULL), 0, "enqueue sent messages outside a transaction:\n%s",
                 t.text);
    cr_expect_eq(PQtransactionStatus(conn), PQTRANS_IDLE, "enqueue began a transaction");
    cr_expect_eq(event_count(conn), 0);
    trace_free(&t);
    outbox_event_free(ev);
}

Test(enqueue, refuses_to_run_in_a_failed_transaction)
{
    outbox_event *ev = new_event(NULL, NULL);
    struct wire_trace t;
    outbox_error err;

    harness_exec(conn, "BEGIN");
    PQclear(PQexec(conn, "SELECT 1 / 0"));
    cr_assert_eq(PQtransactionStatus(conn), PQTRANS_INERROR);
    trace_start(conn, &t);
    cr_assert_eq(outbox_enqueue(conn, ev, &err), OUTBOX_ENOTXN, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    trace_stop(conn, &t);
    cr_expect(strstr(err.message, "already failed") != NULL, "%s", err.message);
    cr_expect_eq(trace_sent(&t, NULL), 0, "enqueue sent messages:\n%s", t.text);
    cr_expect_eq(PQtransactionStatus(conn), PQTRANS_INERROR, "enqueue touched the transaction");
    harness_exec(conn, "ROLLBACK");
    cr_expect_eq(event_count(conn), 0);
    trace_free(&t);
    outbox_event_free(ev);
}

Test(enqueue, stores_exactly_the_envelope_it_built_as_a_pending_row)
{
    outbox_event *ev = new_event("acme", "acct-1");
    const char *json;
    size_t len;
    outbox_error err;
    PGresult *res;
    struct wire_trace t;

    cr_assert_eq(outbox_event_set_traceparent(ev, traceparent, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(outbox_event_envelope_json(ev, &json, &len, &err), OUTBOX_OK, "%s", err.message);
    harness_exec(conn, "BEGIN");
    trace_start(conn, &t);
    cr_assert_eq(outbox_enqueue(conn, ev, &err), OUTBOX_OK, "%s", err.message);
    trace_stop(conn, &t);
    /* One statement, on the caller's transaction: no BEGIN, COMMIT or SET of its own. */
    cr_expect_eq(trace_round_trips(&t), 1, "trace:\n%s", t.text);
    cr_expect_eq(trace_sent(&t, "Query"), 0, "trace:\n%s", t.text);
    cr_expect(strstr(t.text, "Parse\t \"\" ") != NULL, "a named prepared statement:\n%s", t.text);
    cr_expect_eq(PQtransactionStatus(conn), PQTRANS_INTRANS);
    harness_exec(conn, "COMMIT");

    {
        const char *params[] = {json, outbox_event_id(ev)};

        res = query(conn, PGRES_TUPLES_OK,
                    "SELECT envelope = $1::jsonb, status, attempts, aggregate_type, "
                    "aggregate_id::text, event_type, tenant_id, data_subject, "
                    "next_attempt_at <= now(), leased_until IS NULL AND lease_token IS NULL, "
                    "envelope::text "
                    "FROM outbox.events WHERE id = $2::uuid",
                    2, params);
    }
    cr_assert_eq(PQntuples(res), 1, "no row with the event's id");
    cr_expect_str_eq(PQgetvalue(res, 0, 0), "t", "stored %s\n  built %s", PQgetvalue(res, 0, 10),
                     json);
    cr_expect_str_eq(PQgetvalue(res, 0, 1), "pending");
    cr_expect_str_eq(PQgetvalue(res, 0, 2), "0");
    cr_expect_str_eq(PQgetvalue(res, 0, 3), "movie");
    cr_expect_str_eq(PQgetvalue(res, 0, 4), aggregate_id);
    cr_expect_str_eq(PQgetvalue(res, 0, 5), "review.logged");
    cr_expect_str_eq(PQgetvalue(res, 0, 6), "acme");
    cr_expect_str_eq(PQgetvalue(res, 0, 7), "acct-1");
    cr_expect_str_eq(PQgetvalue(res, 0, 8), "t", "not due at once");
    cr_expect_str_eq(PQgetvalue(res, 0, 9), "t", "born leased");
    cr_expect_eq(event_count(conn), 1);
    PQclear(res);
    trace_free(&t);
    outbox_event_free(ev);
}

Test(enqueue, leaves_no_row_when_the_transaction_rolls_back)
{
    outbox_event *ev = new_event(NULL, NULL);
    PGconn *other = connect_again();
    outbox_error err;

    harness_exec(conn, "BEGIN");
    cr_assert_eq(outbox_enqueue(conn, ev, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(event_count(conn), 1, "the transaction cannot see its own event");
    harness_exec(conn, "ROLLBACK");
    cr_expect_eq(event_count(conn), 0);
    cr_expect_eq(event_count(other), 0);
    PQfinish(other);
    outbox_event_free(ev);
}

Test(enqueue, makes_the_event_visible_to_other_connections_only_at_commit)
{
    outbox_event *ev = new_event(NULL, NULL);
    PGconn *other = connect_again();
    const char *params[] = {outbox_event_id(ev)};
    outbox_error err;
    PGresult *res;

    harness_exec(conn, "BEGIN");
    cr_assert_eq(outbox_enqueue(conn, ev, &err), OUTBOX_OK, "%s", err.message);
    cr_expect_eq(event_count(other), 0, "visible before commit");
    harness_exec(conn, "COMMIT");
    res = query(other, PGRES_TUPLES_OK, "SELECT status FROM outbox.events WHERE id = $1::uuid", 1,
                params);
    cr_expect_eq(PQntuples(res), 1, "not visible after commit");
    PQclear(res);
    PQfinish(other);
    outbox_event_free(ev);
}

/* An event whose envelope is about 2 KB. */
static outbox_event *
new_big_event(void)
{
    outbox_event *ev = new_event(NULL, NULL);
    char big[2048];
    outbox_error err;

    memset(big, 'x', sizeof(big));
    memcpy(big, "{\"t\":\"", 6);
    memcpy(big + sizeof(big) - 2, "\"}", 2);
    cr_assert_eq(outbox_event_set_payload_json(ev, big, sizeof(big), &err), OUTBOX_OK, "%s",
                 err.message);
    return ev;
}

Test(enqueue, a_refused_event_leaves_the_callers_transaction_usable)
{
    outbox_event *incomplete = outbox_event_new();
    outbox_event *oversized = new_big_event();
    outbox_event *good = new_event(NULL, NULL);
    outbox_writer *small = test_writer(NULL, 1024);
    struct wire_trace t;
    outbox_error err;

    cr_assert_eq(outbox_event_set_route(incomplete, "movie", "review.logged", &err), OUTBOX_OK);
    harness_exec(conn, "CREATE TABLE reviews (id int PRIMARY KEY, stars int)");
    harness_exec(conn, "BEGIN");
    harness_exec(conn, "INSERT INTO reviews VALUES (1, 5)");

    trace_start(conn, &t);
    cr_assert_eq(outbox_enqueue(conn, incomplete, &err), OUTBOX_EINVAL, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    cr_expect(strstr(err.message, "aggregate_id is required") != NULL, "%s", err.message);
    cr_assert_eq(outbox_writer_enqueue(small, conn, oversized, &err), OUTBOX_EINVAL, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    cr_expect(strstr(err.message, "over the limit of 1024") != NULL, "%s", err.message);
    trace_stop(conn, &t);
    cr_expect_eq(trace_sent(&t, NULL), 0, "a refused event was sent:\n%s", t.text);
    cr_assert_eq(PQtransactionStatus(conn), PQTRANS_INTRANS, "the transaction is not usable");

    harness_exec(conn, "INSERT INTO reviews VALUES (2, 4)");
    cr_assert_eq(outbox_enqueue(conn, good, &err), OUTBOX_OK, "%s", err.message);
    harness_exec(conn, "COMMIT");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM reviews"), 2);
    cr_expect_eq(event_count(conn), 1);
    trace_free(&t);
    outbox_writer_free(small);
    outbox_event_free(good);
    outbox_event_free(oversized);
    outbox_event_free(incomplete);
}

/* ---- batches ------------------------------------------------------------------------- */

enum { BATCH = 1000 };

/* What the events built, as one JSON array, to compare with what is stored. malloc'd. */
static char *
envelopes_as_array(outbox_event *const *events, size_t count)
{
    size_t cap = 3, used = 0;
    outbox_error err;
    const char *json;
    size_t len;
    char *all;

    for (size_t i = 0; i < count; i++) {
        cr_assert_eq(outbox_event_envelope_json(events[i], &json, &len, &err), OUTBOX_OK, "%s",
                     err.message);
        cap += len + 1;
    }
    all = malloc(cap);
    cr_assert_not_null(all);
    all[used++] = '[';
    for (size_t i = 0; i < count; i++) {
        outbox_event_envelope_json(events[i], &json, &len, &err);
        if (i > 0) {
            all[used++] = ',';
        }
        memcpy(all + used, json, len);
        used += len;
    }
    all[used++] = ']';
    all[used] = '\0';
    return all;
}

Test(enqueue, a_batch_inserts_every_event_in_one_round_trip)
{
    outbox_event *events[BATCH];
    struct wire_trace t;
    outbox_error err;
    char *all;
    PGresult *res;

    for (size_t i = 0; i < BATCH; i++) {
        char tenant[32];

        /* Quotes, backslashes and non-ASCII text must survive the JSON round trip. */
        snprintf(tenant, sizeof(tenant), "t\"%zu\\ \xc3\xa9", i % 7);
        events[i] = new_event(tenant, i % 2 ? "acct-1" : NULL);
    }
    all = envelopes_as_array(events, BATCH);

    harness_exec(conn, "BEGIN");
    trace_start(conn, &t);
    cr_assert_eq(outbox_enqueue_batch(conn, events, BATCH, &err), OUTBOX_OK, "%s", err.message);
    trace_stop(conn, &t);
    cr_expect_eq(trace_round_trips(&t), 1, "%d round trips for one batch", trace_round_trips(&t));
    cr_expect_eq(trace_sent(&t, "Parse"), 1, "%d statements for one batch",
                 trace_sent(&t, "Parse"));
    harness_exec(conn, "COMMIT");

    {
        const char *params[] = {all};

        res = query(conn, PGRES_TUPLES_OK,
                    "SELECT count(*) FROM jsonb_array_elements($1::jsonb) AS built "
                    "JOIN outbox.events AS e ON e.id = (built ->> 'id')::uuid "
                    "AND e.envelope = built AND e.tenant_id = built ->> 'tenant_id' "
                    "AND e.data_subject IS NOT DISTINCT FROM built ->> 'data_subject' "
                    "AND e.status = 'pending'",
                    1, params);
    }
    cr_expect_str_eq(PQgetvalue(res, 0, 0), "1000", "stored rows matching their envelope");
    cr_expect_eq(event_count(conn), BATCH);
    PQclear(res);
    free(all);
    trace_free(&t);
    for (size_t i = 0; i < BATCH; i++) {
        outbox_event_free(events[i]);
    }
}

Test(enqueue, a_batch_with_one_invalid_event_inserts_none_and_names_its_index)
{
    outbox_event *events[10];
    struct wire_trace t;
    outbox_error err;

    for (size_t i = 0; i < 10; i++) {
        events[i] = i == 7 ? outbox_event_new() : new_event(NULL, NULL);
    }
    cr_assert_eq(outbox_event_set_route(events[7], "movie", "review.logged", &err), OUTBOX_OK);
    cr_assert_eq(outbox_event_set_aggregate_id(events[7], aggregate_id, &err), OUTBOX_OK);
    harness_exec(conn, "BEGIN");
    trace_start(conn, &t);
    cr_assert_eq(outbox_enqueue_batch(conn, events, 10, &err), OUTBOX_EINVAL, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    trace_stop(conn, &t);
    cr_expect(strstr(err.message, "event 7 ") != NULL, "index not named: %s", err.message);
    cr_expect(strstr(err.message, outbox_event_id(events[7])) != NULL, "id not named: %s",
              err.message);
    cr_expect(strstr(err.message, "payload is required") != NULL, "%s", err.message);
    cr_expect_eq(trace_sent(&t, NULL), 0, "part of the batch was sent:\n%s", t.text);
    harness_exec(conn, "COMMIT");
    cr_expect_eq(event_count(conn), 0);
    trace_free(&t);
    for (size_t i = 0; i < 10; i++) {
        outbox_event_free(events[i]);
    }
}

/* ---- database errors ----------------------------------------------------------------- */

Test(enqueue, the_same_event_twice_is_a_unique_violation)
{
    outbox_event *ev = new_event(NULL, NULL);
    outbox_event *other = new_event(NULL, NULL);
    outbox_event *batch[] = {other, other};
    outbox_error err;

    harness_exec(conn, "BEGIN");
    cr_assert_eq(outbox_enqueue(conn, ev, &err), OUTBOX_OK, "%s", err.message);
    harness_exec(conn, "COMMIT");

    /* A retry after commit, as a caller that lost the COMMIT reply might do. */
    harness_exec(conn, "BEGIN");
    cr_assert_eq(outbox_enqueue(conn, ev, &err), OUTBOX_EDB, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    cr_expect_str_eq(err.sqlstate, "23505", "%s", err.message);
    cr_expect_eq(PQtransactionStatus(conn), PQTRANS_INERROR);
    harness_exec(conn, "ROLLBACK");

    /* The same event twice in one batch. */
    harness_exec(conn, "BEGIN");
    cr_assert_eq(outbox_enqueue_batch(conn, batch, 2, &err), OUTBOX_EDB, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    cr_expect_str_eq(err.sqlstate, "23505", "%s", err.message);
    harness_exec(conn, "ROLLBACK");
    cr_expect_eq(event_count(conn), 1);
    outbox_event_free(other);
    outbox_event_free(ev);
}

static int
backend_gone(PGconn *admin, int pid)
{
    char pid_text[16];
    const char *params[] = {pid_text};
    PGresult *res;
    int gone;

    snprintf(pid_text, sizeof(pid_text), "%d", pid);
    res = query(admin, PGRES_TUPLES_OK, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", 1,
                params);
    gone = strcmp(PQgetvalue(res, 0, 0), "0") == 0;
    PQclear(res);
    return gone;
}

Test(enqueue, a_broken_connection_is_reported_as_unavailable)
{
    outbox_event *ev = new_event(NULL, NULL);
    outbox_event *batch[] = {ev};
    PGconn *admin = harness_pg_connect_admin();
    int pid = PQbackendPID(conn);
    char pid_text[16];
    const char *params[] = {pid_text};
    outbox_error err;

    harness_exec(conn, "BEGIN");
    snprintf(pid_text, sizeof(pid_text), "%d", pid);
    PQclear(query(admin, PGRES_TUPLES_OK, "SELECT pg_terminate_backend($1::int)", 1, params));
    HARNESS_WAIT_UNTIL(backend_gone(admin, pid), 10000);

    cr_assert_eq(outbox_enqueue(conn, ev, &err), OUTBOX_EUNAVAILABLE, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    cr_expect_neq(err.message[0], '\0');
    cr_assert_eq(outbox_enqueue_batch(conn, batch, 1, &err), OUTBOX_EUNAVAILABLE, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    PQfinish(admin);
    outbox_event_free(ev);
}

/* ---- schemas ------------------------------------------------------------------------- */

Test(enqueue, a_writer_for_another_schema_writes_only_into_that_schema)
{
    outbox_writer *billing = NULL;
    outbox_event *one = new_event(NULL, NULL);
    outbox_event *batch[] = {new_event(NULL, NULL), new_event(NULL, NULL), new_event(NULL, NULL)};
    outbox_event *default_one = new_event(NULL, NULL);
    outbox_error err;
    int applied = -1;

    cr_assert_eq(outbox_migrate(conn, "billing_outbox", &applied, &err), OUTBOX_OK, "%s",
                 err.message);
    cr_assert_eq(applied, obx_migration_count);
    billing = test_writer("billing_outbox", 0);

    harness_exec(conn, "BEGIN");
    cr_assert_eq(outbox_writer_enqueue(billing, conn, one, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(outbox_writer_enqueue_batch(billing, conn, batch, 3, &err), OUTBOX_OK, "%s",
                 err.message);
    harness_exec(conn, "COMMIT");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM billing_outbox.events"), 4);
    cr_expect_eq(event_count(conn), 0, "the billing writer wrote into outbox.events");

    harness_exec(conn, "BEGIN");
    cr_assert_eq(outbox_enqueue(conn, default_one, &err), OUTBOX_OK, "%s", err.message);
    harness_exec(conn, "COMMIT");
    cr_expect_eq(event_count(conn), 1);
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM billing_outbox.events"), 4,
                 "the default writer wrote into billing_outbox.events");

    /* A writer for a schema that was never migrated fails in the database, not silently. */
    outbox_writer_free(billing);
    billing = test_writer("nowhere", 0);
    harness_exec(conn, "BEGIN");
    cr_expect_eq(outbox_writer_enqueue(billing, conn, one, &err), OUTBOX_EDB, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    cr_expect_str_eq(err.sqlstate, "42P01", "%s", err.message);
    harness_exec(conn, "ROLLBACK");

    outbox_writer_free(billing);
    outbox_event_free(default_one);
    for (size_t i = 0; i < 3; i++) {
        outbox_event_free(batch[i]);
    }
    outbox_event_free(one);
}
