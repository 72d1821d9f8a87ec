/* SPDX-License-Identifier: MIT */
/*
 * ordering_test.h - what the per-aggregate order tests share (issue 22,
 * FAULTS.md T29): an ordered schema, sql: handlers that record each effect
 * with its event's aggregate and aggregate_seq, and the checks that every
 * handler ran every aggregate's events in exactly seq order, each once,
 * with no gap but the ones `outboxctl dead skip` recorded for it
 * (outbox.aggregate_skips, migration 0015). Header-only (static inline)
 * because it calls the harness, which only the integration and fault
 * binaries link.
 *
 * The order of effects is the order of public.effects.seq, a sequence
 * taken when the handler's statement runs in the ledger transaction: a
 * handler that runs event n only after n-1's ledger transaction committed
 * takes a higher number for n. Outcomes are read from the database, never
 * from a consumer's own account.
 */
#ifndef OBX_TEST_ORDERING_TEST_H
#define OBX_TEST_ORDERING_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <libpq-fe.h>

#include "consume_test.h"
#include "harness.h"

/* A sql: handler that records one effect row per run, with its aggregate and number. */
#define ORDERING_EFFECT(name) name "=sql:SELECT public.ordered_effect($1, '" name "', false)"

/*
 * The same, failing the first attempt of about one event in ten, chosen by
 * a hash of the event id (so the same events on every run and replica);
 * the second attempt succeeds.
 */
#define ORDERING_FLAKY_EFFECT(name) name "=sql:SELECT public.ordered_effect($1, '" name "', true)"

/*
 * consume_test_prepare() plus: the effects table's aggregate columns; the
 * handlers' function, which also fails every attempt of an event whose
 * payload says {"poison": "<handler>"}; next_unskipped(); and ordering on.
 */
static inline void
ordering_test_prepare(PGconn *conn)
{
    consume_test_prepare(conn);
    harness_exec(conn, "ALTER TABLE public.effects ADD COLUMN aggregate_type text, "
                       "ADD COLUMN aggregate_id uuid, ADD COLUMN aggregate_seq bigint");
    harness_exec(conn, "CREATE INDEX effects_by_aggregate ON public.effects "
                       "(handler, aggregate_type, aggregate_id, seq)");
    harness_exec(conn,
                 "CREATE FUNCTION public.ordered_effect(ev jsonb, who text, flaky boolean) "
                 "RETURNS void LANGUAGE plpgsql AS $$DECLARE tries integer; BEGIN "
                 "IF ev->'payload'->>'poison' = who THEN "
                 "RAISE EXCEPTION 'event % is poison for %', ev->>'id', who; END IF; "
                 "IF flaky AND hashtext(ev->>'id')::bigint % 10 = 0 THEN "
                 "SELECT p.attempts INTO tries FROM outbox.processed_events p "
                 "WHERE p.event_id = (ev->>'id')::uuid AND p.handler = who; "
                 "IF coalesce(tries, 0) = 0 THEN "
                 "RAISE EXCEPTION 'first attempt of % fails on purpose', ev->>'id'; END IF; "
                 "END IF; "
                 "INSERT INTO public.effects (event_id, handler, aggregate_type, aggregate_id, "
                 "aggregate_seq) VALUES ((ev->>'id')::uuid, who, ev->>'aggregate_type', "
                 "(ev->>'aggregate_id')::uuid, (ev->>'aggregate_seq')::bigint); END$$");
    /*
     * The first number after `after` of an aggregate that no skip for
     * handler `who` records: one of the relay's (handler '', every
     * handler's gap) or one of `who`'s own. Read through to_jsonb() so it
     * works with and without aggregate_skips.handler (added to migration
     * 0015 after it first landed); without it every skip is everyone's.
     */
    harness_exec(conn, "CREATE FUNCTION public.next_unskipped(t text, a uuid, after bigint, "
                       "who text) RETURNS bigint LANGUAGE sql STABLE AS $$WITH RECURSIVE n(s) AS "
                       "(SELECT after + 1 UNION ALL SELECT n.s + 1 FROM n WHERE EXISTS "
                       "(SELECT 1 FROM outbox.aggregate_skips k WHERE k.aggregate_type = t "
                       "AND k.aggregate_id = a AND k.aggregate_seq = n.s "
                       "AND coalesce(to_jsonb(k)->>'handler', '') IN ('', who))) "
                       "SELECT max(s) FROM n$$");
    harness_exec(conn, "SELECT outbox.set_ordering(true)");
}

/*
 * The first row's first column of `sql`, with `arg` as $1 unless NULL;
 * malloc'd; NULL when there is no row or it is NULL.
 */
static inline char *
ordering_test_text(PGconn *conn, const char *sql, const char *arg)
{
    const char *params[] = {arg};
    PGresult *res = PQexecParams(conn, sql, arg != NULL, NULL, params, NULL, NULL, 0);
    char *v = NULL;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(conn));
    if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0)) {
        v = strdup(PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return v;
}

/* Fails the test with `breach` (malloc'd, freed here) unless it is NULL. */
static inline void
ordering_test_expect_none(char *breach)
{
    char message[1024];

    if (breach == NULL) {
        return;
    }
    snprintf(message, sizeof(message), "%s", breach);
    free(breach);
    cr_assert_fail("%s", message);
}

/*
 * The writers' side: every committed event has a number, and each
 * aggregate's committed events are numbered 1..N, each number once, with
 * N its counter's last number (a rolled-back transaction gave its numbers
 * back). Returns how many aggregates have committed events.
 */
static inline long long
ordering_test_expect_numbered(PGconn *conn)
{
    long long unnumbered = harness_scalar_ll(
        conn, "SELECT count(*) FROM public.committed c JOIN outbox.events e ON e.id = c.id "
              "WHERE e.aggregate_seq IS NULL");
    char *bad = ordering_test_text(
        conn,
        "SELECT format('numbers are not 1..N in commit order: aggregate %s %s: %s committed events "
        "numbered %s distinct, from %s "
        "to %s; its counter gave %s (%s aggregates so)', aggregate_type, aggregate_id, n, "
        "d, lo, hi, last_seq, count(*) OVER ()) FROM (SELECT e.aggregate_type, "
        "e.aggregate_id, count(*) AS n, count(DISTINCT e.aggregate_seq) AS d, "
        "min(e.aggregate_seq) AS lo, max(e.aggregate_seq) AS hi, max(h.last_seq) AS "
        "last_seq FROM public.committed c JOIN outbox.events e ON e.id = c.id LEFT JOIN "
        "outbox.aggregate_heads h USING (aggregate_type, aggregate_id) GROUP BY 1, 2) AS a "
        "WHERE NOT (d = n AND lo = 1 AND hi = n AND last_seq = n) LIMIT 1",
        NULL);

    cr_assert_eq(unnumbered, 0, "%lld committed events have no aggregate_seq", unnumbered);
    ordering_test_expect_none(bad);
    return harness_scalar_ll(conn, "SELECT count(DISTINCT (e.aggregate_type, e.aggregate_id)) "
                                   "FROM public.committed c JOIN outbox.events e ON e.id = c.id");
}

/*
 * Whether `handler` ran each aggregate's events in exactly seq order: each
 * effect comes after its predecessor's with nothing between them but
 * skipped numbers (so never twice, never backwards), every effect is of
 * the number its event was given, and the last effect is N, the
 * aggregate's committed events, or only skipped numbers follow it. NULL if
 * so, else the first breach, naming the handler, the aggregate, the
 * expected and the seen number (malloc'd).
 */
static inline char *
ordering_test_first_breach(PGconn *conn, const char *handler)
{
    char *breach, *wrong;

    wrong = ordering_test_text(
        conn,
        "SELECT format('handler %s, aggregate %s %s: the effect of event %s has seq %s, its "
        "event was given %s', f.handler, f.aggregate_type, f.aggregate_id, f.event_id, "
        "f.aggregate_seq, e.aggregate_seq) FROM public.effects f JOIN outbox.events e ON "
        "e.id = f.event_id WHERE f.handler = $1 AND (f.aggregate_seq IS DISTINCT FROM "
        "e.aggregate_seq OR f.aggregate_id IS DISTINCT FROM e.aggregate_id) LIMIT 1",
        handler);
    if (wrong != NULL) {
        return wrong;
    }
    breach = ordering_test_text(
        conn,
        "WITH f AS (SELECT aggregate_type, aggregate_id, aggregate_seq AS got, seq, "
        "coalesce(lag(aggregate_seq) OVER w, 0) AS prev, row_number() OVER w AS pos "
        "FROM public.effects WHERE handler = $1 WINDOW w AS (PARTITION BY aggregate_type, "
        "aggregate_id ORDER BY seq)), b AS (SELECT *, public.next_unskipped(aggregate_type, "
        "aggregate_id, prev, $1) AS expected FROM f WHERE got <> prev + 1) "
        "SELECT format('handler %s, aggregate %s %s: effect %s of the aggregate, after seq %s, "
        "expected seq %s, got seq %s (%s effects out of order, in %s aggregates)', $1, "
        "aggregate_type, aggregate_id, pos, prev, expected, got, count(*) OVER (), "
        "(SELECT count(DISTINCT (aggregate_type, aggregate_id)) FROM b b2 WHERE b2.got <= "
        "b2.prev OR b2.expected < b2.got)) FROM b WHERE got <= prev OR expected < got "
        "ORDER BY seq LIMIT 1",
        handler);
    if (breach != NULL) {
        return breach;
    }
    return ordering_test_text(
        conn,
        "WITH n AS (SELECT e.aggregate_type, e.aggregate_id, count(*) AS n FROM "
        "public.committed c JOIN outbox.events e ON e.id = c.id WHERE e.aggregate_seq IS NOT "
        "NULL GROUP BY 1, 2), h AS (SELECT aggregate_type, aggregate_id, max(aggregate_seq) AS "
        "last, count(*) AS runs FROM public.effects WHERE handler = $1 GROUP BY 1, 2), m AS ("
        "SELECT n.*, coalesce(h.last, 0) AS last, coalesce(h.runs, 0) AS runs, "
        "public.next_unskipped(n.aggregate_type, n.aggregate_id, coalesce(h.last, 0), $1) AS "
        "expected FROM n LEFT JOIN h USING (aggregate_type, aggregate_id)) "
        "SELECT format('handler %s, aggregate %s %s: %s events committed, the handler ran %s, "
        "the last seq %s; expected seq %s next, got none (%s aggregates incomplete)', $1, "
        "aggregate_type, aggregate_id, n, runs, last, expected, count(*) OVER ()) FROM m "
        "WHERE expected <= n ORDER BY aggregate_type, aggregate_id LIMIT 1",
        handler);
}

/* Fails the test at the first breach of ordering_test_first_breach(). */
static inline void
ordering_test_expect_in_order(PGconn *conn, const char *handler)
{
    ordering_test_expect_none(ordering_test_first_breach(conn, handler));
}

#endif
