/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_race.c - replicas racing for the same events: two ledgers
 * claim the same 500 events at once, inside transactions that also write
 * the handler's effect, and every effect happens exactly once; outside
 * transactions every event runs for exactly one of them.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ledger/ledger.h"
#include "ledger_helpers.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    /* No unique constraint: a duplicated effect must show up as a second row. */
    harness_exec(conn, "CREATE TABLE public.effects (event_id uuid, doc jsonb)");
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ledger_race, .init = setup, .fini = teardown, .timeout = 120);

enum { EVENTS = 500, CHUNK = 50, RACE_MS = 60000 };

static const char insert_effect[] =
    "INSERT INTO public.effects (event_id, doc) VALUES (($1->>'id')::uuid, $1)";

struct racer {
    struct obx_ledger *ledger;
    const struct helper_events *ev;
    pthread_barrier_t *start;
    int transactional;
    char settled[EVENTS]; /* 1 once this racer saw the event run or done */
    size_t ran, busy;
    char failure[600]; /* "" unless a call failed; asserted on the test's thread */
};

static int
racer_fail(struct racer *r, const char *what, const outbox_error *err)
{
    snprintf(r->failure, sizeof(r->failure), "%s: %s", what, err->message);
    obx_ledger_rollback(r->ledger);
    return -1;
}

/* Runs the handler for every RUN claim of the chunk (in the open transaction, if any). */
static int
run_chunk(struct racer *r, const struct obx_ledger_event *events, struct obx_claim *claims,
          size_t n)
{
    size_t runs = 0, marked = 0;
    outbox_error err;

    for (size_t i = 0; i < n; i++) {
        if (claims[i].state != OBX_CLAIM_RUN) {
            continue;
        }
        runs++;
        if (r->transactional &&
            obx_ledger_run_sql(r->ledger, insert_effect, events[i].envelope, &err) != OUTBOX_OK) {
            return racer_fail(r, "run_sql", &err);
        }
    }
    if (obx_ledger_mark_done(r->ledger, "projector", events, claims, n, &marked, &err) !=
        OUTBOX_OK) {
        return racer_fail(r, "mark_done", &err);
    }
    if (marked != runs) {
        snprintf(r->failure, sizeof(r->failure), "marked %zu of %zu claims", marked, runs);
        return -1;
    }
    return 0;
}

/* One pass over the events this racer has not seen settled; returns how many are left. */
static int
race_round(struct racer *r)
{
    struct obx_ledger_event events[CHUNK];
    size_t index[CHUNK], left = 0;
    struct obx_claim claims[CHUNK];
    outbox_error err;

    for (size_t from = 0; from < EVENTS; from += CHUNK) {
        size_t n = 0;

        for (size_t i = from; i < from + CHUNK; i++) {
            if (!r->settled[i]) {
                index[n] = i;
                events[n++] = r->ev->events[i];
            }
        }
        if (n == 0) {
            continue;
        }
        if (r->transactional && obx_ledger_begin(r->ledger, &err) != OUTBOX_OK) {
            return racer_fail(r, "begin", &err);
        }
        if (obx_ledger_claim(r->ledger, "projector", events, n, 60, 100, claims, &err) !=
            OUTBOX_OK) {
            return racer_fail(r, "claim", &err);
        }
        if (run_chunk(r, events, claims, n) != 0) {
            return -1;
        }
        if (r->transactional && obx_ledger_commit(r->ledger, &err) != OUTBOX_OK) {
            return racer_fail(r, "commit", &err);
        }
        for (size_t i = 0; i < n; i++) {
            int settled = claims[i].state == OBX_CLAIM_RUN || claims[i].state == OBX_CLAIM_DONE;

            r->settled[index[i]] = (char)settled;
            r->ran += claims[i].state == OBX_CLAIM_RUN;
            r->busy += !settled;
            left += !settled;
        }
    }
    return (int)left;
}

static void *
race(void *arg)
{
    struct racer *r = arg;
    long long deadline_ms;
    int left = 1;

    pthread_barrier_wait(r->start);
    deadline_ms = harness_now_ms() + RACE_MS;
    /* Busy events are claimed again at once: the race, not the deferral, is under test. */
    while (left > 0 && harness_now_ms() < deadline_ms) {
        left = race_round(r);
    }
    if (left > 0 && r->failure[0] == '\0') {
        snprintf(r->failure, sizeof(r->failure), "%d events never settled", left);
    }
    return NULL;
}

static void
run_racers(struct racer racers[2], const struct helper_events *ev, int transactional)
{
    pthread_barrier_t start;
    pthread_t threads[2];

    cr_assert_eq(pthread_barrier_init(&start, NULL, 2), 0);
    for (int i = 0; i < 2; i++) {
        memset(&racers[i], 0, sizeof(racers[i]));
        racers[i].ledger = helper_ledger_open(i == 0 ? "ledger-race-a" : "ledger-race-b");
        racers[i].ev = ev;
        racers[i].start = &start;
        racers[i].transactional = transactional;
    }
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(pthread_create(&threads[i], NULL, race, &racers[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
    }
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 2; i++) {
        obx_ledger_close(racers[i].ledger);
        cr_assert_str_empty(racers[i].failure, "racer %d: %s", i, racers[i].failure);
    }
    cr_log_info("ran %zu + %zu, busy %zu + %zu", racers[0].ran, racers[1].ran, racers[0].busy,
                racers[1].busy);
}

Test(ledger_race, two_replicas_in_transactions_make_each_effect_exactly_once)
{
    struct helper_events ev = helper_events_new(conn, EVENTS);
    struct racer racers[2];

    cr_assert_eq(ev.count, EVENTS);
    run_racers(racers, &ev, 1);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects"), EVENTS);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM (SELECT event_id FROM "
                                         "public.effects GROUP BY event_id HAVING count(*) > 1) d"),
                 0, "no effect twice");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(DISTINCT f.event_id) FROM public.effects f "
                                         "JOIN outbox.events e ON e.id = f.event_id"),
                 EVENTS, "every event's effect");
    cr_assert_eq(helper_count(conn, "processed_events", "status = 'done'"), EVENTS);
    cr_assert_eq(racers[0].ran + racers[1].ran, EVENTS, "each event ran for one replica");
    helper_events_free(&ev);
}

Test(ledger_race, two_replicas_claiming_outside_transactions_run_each_event_once)
{
    struct helper_events ev = helper_events_new(conn, EVENTS);
    struct racer racers[2];

    run_racers(racers, &ev, 0);
    cr_assert_eq(racers[0].ran + racers[1].ran, EVENTS, "each event ran for one replica");
    cr_assert_eq(helper_count(conn, "processed_events", "status = 'done'"), EVENTS);
    helper_events_free(&ev);
}
