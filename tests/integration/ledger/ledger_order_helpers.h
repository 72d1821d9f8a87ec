/* SPDX-License-Identifier: MIT */
/*
 * ledger_order_helpers.h - what the ordered ledger tests share: ordered
 * events of new aggregates read back as the consumer hands them over, a
 * handler registered (its order starts then), its progress read back, and a
 * batch claimed as done in a transaction of its own.
 * Header-only, like ledger_helpers.h.
 */
#ifndef OBX_TEST_LEDGER_ORDER_HELPERS_H
#define OBX_TEST_LEDGER_ORDER_HELPERS_H

#include "ledger_helpers.h"

/* Ordered events read back from the outbox, as the consumer hands them to the ledger. */
struct helper_ordered {
    size_t count;
    struct obx_ledger_event *events;
    char (*ids)[37];
    char (*aggs)[37];
    char **envelopes;
};

/* Enqueues `per` events for each of `aggs` new aggregates; reads all back by aggregate, seq. */
static inline struct helper_ordered
helper_ordered_new(PGconn *conn, int aggs, int per)
{
    struct helper_ordered o = {0};
    char sql[512];
    PGresult *res;

    snprintf(sql, sizeof(sql),
             "SELECT count(outbox.enqueue('order', a.id, 'changed', '{}')) "
             "FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, %d)) AS a, "
             "generate_series(1, %d)",
             aggs, per);
    cr_assert_eq(harness_scalar_ll(conn, sql), (long long)aggs * per);
    res = PQexec(conn, "SELECT id, aggregate_id, aggregate_seq, envelope::text FROM outbox.events "
                       "WHERE aggregate_seq IS NOT NULL ORDER BY aggregate_id, aggregate_seq");
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
    o.count = (size_t)PQntuples(res);
    o.events = calloc(o.count + 1, sizeof(*o.events));
    o.ids = calloc(o.count + 1, sizeof(*o.ids));
    o.aggs = calloc(o.count + 1, sizeof(*o.aggs));
    o.envelopes = calloc(o.count + 1, sizeof(*o.envelopes));
    cr_assert(o.events && o.ids && o.aggs && o.envelopes);
    for (size_t i = 0; i < o.count; i++) {
        snprintf(o.ids[i], sizeof(o.ids[i]), "%s", PQgetvalue(res, (int)i, 0));
        snprintf(o.aggs[i], sizeof(o.aggs[i]), "%s", PQgetvalue(res, (int)i, 1));
        o.envelopes[i] = strdup(PQgetvalue(res, (int)i, 3));
        o.events[i] = (struct obx_ledger_event){
            .event_id = o.ids[i],
            .envelope = o.envelopes[i],
            .aggregate_seq = strtoll(PQgetvalue(res, (int)i, 2), NULL, 10),
            .aggregate_type = "order",
            .aggregate_id = o.aggs[i],
            .message_id = o.ids[i],
            .subject = "outbox.order.changed",
        };
    }
    PQclear(res);
    return o;
}

static inline void
helper_ordered_free(struct helper_ordered *o)
{
    for (size_t i = 0; i < o->count; i++) {
        free(o->envelopes[i]);
    }
    free(o->envelopes);
    free(o->aggs);
    free(o->ids);
    free(o->events);
    memset(o, 0, sizeof(*o));
}

/* The handler's order starts now, as a consumer's registration makes it. */
static inline void
helper_register_ordered(struct obx_ledger *ledger, const char *name)
{
    struct obx_ledger_binding b = {.name = name, .subject_filter = "outbox.>"};
    struct obx_ledger_registration r = {
        .consumer_group = "G", .backend = "db", .replica = "test", .bindings = &b, .count = 1};
    outbox_error err;

    LEDGER_OK(obx_ledger_register(ledger, &r, &err));
}

/* The last number `handler` is done with in `agg` (-1: no progress row). */
static inline long long
helper_progress(PGconn *conn, const char *handler, const char *agg)
{
    char sql[256];

    snprintf(sql, sizeof(sql),
             "SELECT coalesce(max(last_seq), -1) FROM outbox.handler_progress "
             "WHERE handler = '%s' AND aggregate_id = '%s'",
             handler, agg);
    return harness_scalar_ll(conn, sql);
}

/* Claims `n` events as done for "audit" in one transaction and commits; the states in `claims`. */
static inline void
helper_claim_batch(struct obx_ledger *ledger, const struct obx_ledger_event *batch, size_t n,
                   struct obx_claim *claims)
{
    outbox_error err;

    LEDGER_OK(obx_ledger_begin(ledger, &err));
    LEDGER_OK(obx_ledger_claim_as_done(ledger, "audit", batch, n, 1000, claims, &err));
    LEDGER_OK(obx_ledger_commit(ledger, &err));
}

#endif
