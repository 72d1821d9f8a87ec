/* SPDX-License-Identifier: MIT */
/*
 * loader_pg.c - fills the outbox for benchmark cases through the C writer,
 * and reads how much of it is still to publish.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* About 400 bytes of envelope, like a typical domain event. */
const char obx_bench_payload[] =
    "{\"stars\":5,\"title\":\"Amelie\",\"review\":\"A whimsical, warm film about small "
    "kindnesses; the score is lovely and Paris has never looked better.\",\"reviewer\":"
    "{\"id\":42,\"name\":\"Sam\"},\"tags\":[\"comedy\",\"romance\",\"paris\"]}";

outbox_event *
obx_bench_event(void)
{
    outbox_event *ev = outbox_event_new();
    outbox_error err;
    char agg_text[37];

    obx_bench_random_uuid(agg_text);
    if (ev == NULL || outbox_event_set_route(ev, "movie", "review.logged", &err) != OUTBOX_OK ||
        outbox_event_set_aggregate_id(ev, agg_text, &err) != OUTBOX_OK ||
        outbox_event_set_payload_json(ev, obx_bench_payload, strlen(obx_bench_payload), &err) !=
            OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: cannot build an event\n");
        exit(1);
    }
    return ev;
}

void
obx_bench_write_batch(PGconn *conn, int count)
{
    outbox_event *events[1000];
    outbox_error err;

    if (count > 1000) {
        count = 1000;
    }
    for (int i = 0; i < count; i++) {
        events[i] = obx_bench_event();
    }
    obx_bench_exec(conn, "BEGIN");
    if (outbox_enqueue_batch(conn, events, (size_t)count, &err) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: enqueue failed: %s\n", err.message);
        exit(1);
    }
    obx_bench_exec(conn, "COMMIT");
    for (int i = 0; i < count; i++) {
        outbox_event_free(events[i]);
    }
}

void
obx_bench_preload(PGconn *conn, long long count)
{
    obx_bench_exec(conn, "TRUNCATE outbox.events");
    for (long long done = 0; done < count; done += 1000) {
        obx_bench_write_batch(conn, (int)(count - done < 1000 ? count - done : 1000));
    }
    obx_bench_exec(conn, "VACUUM ANALYZE outbox.events");
}

/*
 * The rows waiting to be published (pending or out for publishing), read
 * the way the relays find them: fresh ones through the windows' index from
 * the floor (published rows stay in that index, behind it), the ones that
 * came back through the retries' index. With the two-write claim's index
 * back (obx_bench_claim_table), through that one: the floor does not move
 * under that claim. The outbox has no index of every waiting row, and a
 * count over the table read every done row kept in mark mode, many times a
 * second, on the machine being measured. `first_only`: stop at the first
 * of each kind (is anything left?).
 */
long long
obx_bench_waiting(PGconn *conn, int first_only)
{
    char sql[640];
    const char *limit = first_only ? "LIMIT 1" : "";

    if (obx_bench_scalar(conn, "SELECT (to_regclass('outbox.events_due_idx') IS NOT NULL)::int")) {
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM (SELECT 1 FROM outbox.events WHERE published_at IS NULL "
                 "AND status IN ('pending', 'leased') %s) AS waiting",
                 limit);
        return obx_bench_scalar(conn, sql);
    }
    snprintf(sql, sizeof(sql),
             "SELECT (SELECT count(*) FROM (SELECT 1 FROM outbox.events "
             "WHERE published_at IS NULL AND next_attempt_at <= created_at "
             "AND tx >= (SELECT tx FROM outbox.relay_floor) "
             "AND status IN ('pending', 'leased') %s) AS fresh) "
             "+ (SELECT count(*) FROM (SELECT 1 FROM outbox.events "
             "WHERE published_at IS NULL AND next_attempt_at > created_at "
             "AND status IN ('pending', 'leased') %s) AS came_back)",
             limit, limit);
    return obx_bench_scalar(conn, sql);
}

long long
obx_bench_scalar(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    long long v = -1;

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    }
    PQclear(res);
    return v;
}
