/* SPDX-License-Identifier: MIT */
/*
 * test_ledger_round.c - an external handler's ledger round
 * (obx_ledger_mark_done_and_claim): the done marks of the runs that ended
 * and the claims of those that start commit in one transaction, marks
 * first, so the next event of an ordered aggregate whose event just ended
 * is claimed to run, not parked; and the round's claims are committed and
 * held like any claim.
 */
#include <criterion/criterion.h>
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
    conn = harness_pg_connect_fresh_ordered();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ledger_round, .init = setup, .fini = teardown, .timeout = 120);

/* Two ordered events of one new aggregate, as the consumer hands them to the ledger. */
struct pair {
    char ids[2][37];
    char agg[37];
    char *envelopes[2];
    struct obx_ledger_event events[2];
};

static void
pair_new(struct pair *p)
{
    PGresult *res;

    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(outbox.enqueue('order', a.id, 'changed', "
                                         "'{}')) FROM (SELECT gen_random_uuid() AS id) AS a, "
                                         "generate_series(1, 2)"),
                 2);
    res = PQexec(conn, "SELECT id, aggregate_id, aggregate_seq, envelope::text FROM outbox.events "
                       "WHERE aggregate_id = (SELECT aggregate_id FROM outbox.events "
                       "ORDER BY id DESC LIMIT 1) ORDER BY aggregate_seq");
    cr_assert_eq(PQntuples(res), 2, "%s", PQerrorMessage(conn));
    for (int i = 0; i < 2; i++) {
        snprintf(p->ids[i], sizeof(p->ids[i]), "%s", PQgetvalue(res, i, 0));
        snprintf(p->agg, sizeof(p->agg), "%s", PQgetvalue(res, i, 1));
        p->envelopes[i] = strdup(PQgetvalue(res, i, 3));
        p->events[i] = (struct obx_ledger_event){
            .event_id = p->ids[i],
            .envelope = p->envelopes[i],
            .aggregate_seq = strtoll(PQgetvalue(res, i, 2), NULL, 10),
            .aggregate_type = "order",
            .aggregate_id = p->agg,
            .message_id = p->ids[i],
            .subject = "outbox.order.changed",
        };
    }
    PQclear(res);
}

static void
pair_free(struct pair *p)
{
    free(p->envelopes[0]);
    free(p->envelopes[1]);
}

/* The handler's order starts now, as a consumer's registration makes it. */
static void
register_handler(struct obx_ledger *ledger, const char *name)
{
    struct obx_ledger_binding b = {.name = name, .subject_filter = "outbox.>"};
    struct obx_ledger_registration r = {
        .consumer_group = "G", .backend = "db", .replica = "test", .bindings = &b, .count = 1};
    outbox_error err;

    LEDGER_OK(obx_ledger_register(ledger, &r, &err));
}

static long long
rows(const char *handler, const char *event_id, const char *status)
{
    char where[256];

    snprintf(where, sizeof(where), "handler = '%s' AND event_id = '%s' AND status = '%s'", handler,
             event_id, status);
    return helper_count(conn, "processed_events", where);
}

Test(ledger_round, the_done_mark_goes_first_so_the_next_event_of_its_aggregate_runs)
{
    struct obx_ledger *ledger = helper_ledger_open("round-test");
    struct pair p;
    struct obx_claim first, next, again;
    size_t marked = 0;
    outbox_error err;

    register_handler(ledger, "hook");
    pair_new(&p);
    LEDGER_OK(obx_ledger_claim(ledger, "hook", &p.events[0], 1, 30, 1000, &first, &err));
    cr_assert_eq(first.state, OBX_CLAIM_RUN);
    LEDGER_OK(obx_ledger_mark_done_and_claim(ledger, "hook", &p.events[0], &first, 1, &marked,
                                             &p.events[1], 1, 30, 1000, &next, &err));
    cr_assert_eq(marked, 1, "the first event's done mark changed its row");
    cr_assert_eq(next.state, OBX_CLAIM_RUN, "its successor runs (state %d), not parked",
                 (int)next.state);
    cr_assert_eq(rows("hook", p.ids[0], "done"), 1);
    cr_assert_eq(rows("hook", p.ids[1], "in_progress"), 1);
    cr_assert_eq(helper_count(conn, "parked_events", "true"), 0);
    cr_assert_eq(obx_ledger_txn_state(ledger), OBX_LEDGER_TXN_NONE, "the round committed");
    /* Committed, and fenced: another claim finds it held by the round's owner. */
    LEDGER_OK(obx_ledger_claim(ledger, "hook", &p.events[1], 1, 30, 0, &again, &err));
    cr_assert_eq(again.state, OBX_CLAIM_BUSY);
    pair_free(&p);
    obx_ledger_close(ledger);
}

/*
 * A round's claim carries the events' messages only after a claim that
 * parked some; one without them that parks an event gives it its message
 * before the round commits. Either way the parked event is kept whole.
 */
Test(ledger_round, an_event_a_round_parks_is_kept_with_its_message)
{
    struct obx_ledger *ledger = helper_ledger_open("round-test");
    struct pair a, b;
    struct obx_claim first, early, again;
    size_t marked = 0;
    outbox_error err;
    char where[512];

    register_handler(ledger, "hook");
    pair_new(&a);
    pair_new(&b);
    LEDGER_OK(obx_ledger_claim(ledger, "hook", &a.events[0], 1, 30, 1000, &first, &err));
    cr_assert_eq(first.state, OBX_CLAIM_RUN);
    /* a's first done, b's second claimed before b's first: it parks, with no message sent. */
    LEDGER_OK(obx_ledger_mark_done_and_claim(ledger, "hook", &a.events[0], &first, 1, &marked,
                                             &b.events[1], 1, 30, 0, &early, &err));
    cr_assert_eq(marked, 1);
    cr_assert_eq(early.state, OBX_CLAIM_PARKED, "got state %d", (int)early.state);
    cr_assert_eq(obx_ledger_txn_state(ledger), OBX_LEDGER_TXN_NONE, "the round committed");
    snprintf(where, sizeof(where),
             "handler = 'hook' AND event_id = '%s' AND message_id = '%s' "
             "AND subject = 'outbox.order.changed' AND envelope = '%s'",
             b.ids[1], b.ids[1], b.envelopes[1]);
    cr_assert_eq(helper_count(conn, "parked_events", where), 1,
                 "parked with its message id, subject and envelope");
    /* The next round carries the messages (the last claim parked); a's first is done. */
    LEDGER_OK(obx_ledger_claim(ledger, "hook", &b.events[0], 1, 30, 1000, &first, &err));
    LEDGER_OK(obx_ledger_mark_done_and_claim(ledger, "hook", &b.events[0], &first, 1, &marked,
                                             &a.events[1], 1, 30, 0, &again, &err));
    cr_assert_eq(again.state, OBX_CLAIM_RUN, "a's first is done: its second runs");
    cr_assert_eq(rows("hook", b.ids[0], "done"), 1);
    cr_assert_eq(obx_ledger_txn_state(ledger), OBX_LEDGER_TXN_NONE);
    pair_free(&a);
    pair_free(&b);
    obx_ledger_close(ledger);
}
