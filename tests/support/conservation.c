/* SPDX-License-Identifier: MIT */
/*
 * conservation.c - the end-to-end checker (see conservation.h), on the harness's servers.
 */
#include "conservation.h"

#include <stdio.h>
#include <stdlib.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "harness.h"
#include "stream_reader_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* A count from SQL with `handler` as $1. */
static long long
count_for(PGconn *conn, const char *sql, const char *handler)
{
    const char *params[] = {handler};
    PGresult *res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
    long long v;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(conn));
    v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}

/*
 * Business rows with neither their outbox row nor their message: prune
 * mode deletes published rows, and then the message stands for the row.
 */
static long long
count_orphan_business(PGconn *conn, const struct id_set *stream)
{
    PGresult *res = PQexec(conn, "SELECT c.id::text FROM public.committed c WHERE NOT EXISTS "
                                 "(SELECT 1 FROM outbox.events e WHERE e.id = c.id)");
    long long n = 0;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
    for (int i = 0; i < PQntuples(res); i++) {
        n += !id_set_has(stream, PQgetvalue(res, i, 0));
    }
    PQclear(res);
    return n;
}

struct conservation
conservation_measure(PGconn *conn, const char *stream, const char *const handlers[])
{
    struct conservation c = {0};
    struct id_set s;
    char err[512] = "";

    id_set_init(&s);
    cr_assert_eq(stream_read_ids(harness_nats_url(), stream, &s, err, sizeof(err)), 0,
                 "reading stream %s: %s", stream, err);
    cr_assert_eq(relay_check_run(conn, "SELECT id::text FROM public.committed", &s, &c.base, err,
                                 sizeof(err)),
                 0, "checker: %s", err);
    c.unterminated = harness_scalar_ll(
        conn, "SELECT count(*) FROM outbox.events WHERE status IN ('pending', 'leased')");
    c.orphan_events =
        harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events e WHERE NOT EXISTS "
                                "(SELECT 1 FROM public.committed c WHERE c.id = e.id)");
    c.orphan_business = count_orphan_business(conn, &s);
    id_set_fini(&s);
    c.outbox_rows = harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events");
    for (int i = 0; handlers != NULL && handlers[i] != NULL; i++) {
        c.effect_dups += count_for(conn,
                                   "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n "
                                   "FROM public.effects WHERE handler = $1 GROUP BY event_id) g",
                                   handlers[i]);
        c.unhandled += count_for(conn,
                                 "SELECT count(*) FROM public.committed c WHERE NOT EXISTS "
                                 "(SELECT 1 FROM public.effects e WHERE e.event_id = c.id "
                                 "AND e.handler = $1)",
                                 handlers[i]);
    }
    cr_log_info("conservation %s: committed=%zu stream=%zu quarantined=%zu dead=%zu lost=%zu "
                "phantom=%zu stream_dups=%zu effect_dups=%lld unhandled=%lld unterminated=%lld "
                "orphan_events=%lld orphan_business=%lld outbox_rows=%lld",
                stream, c.base.committed, c.base.stream, c.base.quarantined, c.base.dead,
                c.base.lost, c.base.phantom, c.base.stream_dups, c.effect_dups, c.unhandled,
                c.unterminated, c.orphan_events, c.orphan_business, c.outbox_rows);
    return c;
}

struct conservation
conservation_expect_zero(PGconn *conn, const char *stream, const char *const handlers[])
{
    struct conservation c = conservation_measure(conn, stream, handlers);

    cr_assert_eq(c.base.lost, 0,
                 "%zu committed events neither in the stream nor quarantined "
                 "nor dead, e.g. %s",
                 c.base.lost, c.base.lost_example);
    cr_assert_eq(c.base.phantom, 0, "%zu ids in the stream were never committed, e.g. %s",
                 c.base.phantom, c.base.phantom_example);
    cr_assert_eq(c.base.stream_dups, 0, "%zu ids are in the stream more than once, e.g. %s",
                 c.base.stream_dups, c.base.dup_example);
    cr_assert_eq(c.effect_dups, 0, "%lld handler effects ran more than once", c.effect_dups);
    cr_assert_eq(c.unhandled, 0, "%lld (event, handler) pairs never handled", c.unhandled);
    cr_assert_eq(c.unterminated, 0, "%lld outbox rows still pending or leased", c.unterminated);
    cr_assert_eq(c.orphan_events, 0, "%lld outbox rows without their business row",
                 c.orphan_events);
    cr_assert_eq(c.orphan_business, 0, "%lld business rows without their outbox row",
                 c.orphan_business);
    return c;
}
