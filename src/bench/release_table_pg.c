/* SPDX-License-Identifier: MIT */
/*
 * release_table_pg.c - the outbox table as each claim's release made it,
 * so that the two-write claim is measured as it shipped.
 *
 * The two-write claim (leased each row with an update, then finished it)
 * ran on migration 0009's table: fillfactor 60, events_due_idx over every
 * waiting row, retention's off-key-range index on published_at, and no
 * window or retry index. Run on this release's table instead it would be
 * given what made the one-write claim cheaper (a finish that changes no
 * indexed column, room on each page for a batch's new versions), and the
 * comparison would measure the table, not the claim. This release's
 * indexes and fillfactor are read from the catalog on first use and put
 * back for the one-write cases, so they follow the migrations unchanged.
 *
 * That release had no per-aggregate ordering, so it had none of ordering's
 * indexes either; the two-write cases get those of this release
 * (aggregate_seq's and the rows waiting for their head), which ordering
 * on (the default) uses. Without them, every batch's wake-up read the
 * whole table (about 14 ms a batch of 500 on 50,000 rows, ~27 us an
 * event): the cost of a missing index, not of the claim, which made the
 * two-write baseline look dearer than it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* This release's indexes of outbox.events (but its primary key), and its fillfactor. */
static PGresult *current_indexes;
static char current_fillfactor[16];

/* The two-write release's indexes, from migrations 0001 and 0009 (history: never edited). */
static const char *const two_write_indexes[] = {
    "CREATE INDEX events_due_idx ON outbox.events (next_attempt_at) WHERE published_at IS NULL",
    "CREATE INDEX events_off_key_order_idx ON outbox.events (published_at) "
    "WHERE outbox.uuid_v7_after(id, published_at)",
};

static void
remember_current(PGconn *conn)
{
    PGresult *res;

    if (current_indexes != NULL) {
        return;
    }
    current_indexes = PQexec(conn, "SELECT indexname, indexdef FROM pg_indexes "
                                   "WHERE schemaname = 'outbox' AND tablename = 'events' "
                                   "AND indexname <> 'events_pkey' ORDER BY indexname");
    if (PQresultStatus(current_indexes) != PGRES_TUPLES_OK || PQntuples(current_indexes) == 0) {
        fprintf(stderr, "outbox-bench: cannot read the outbox's indexes: %s", PQerrorMessage(conn));
        exit(1);
    }
    res = PQexec(conn, "SELECT coalesce((SELECT split_part(o, '=', 2) FROM pg_class AS c, "
                       "unnest(c.reloptions) AS o WHERE c.oid = 'outbox.events'::regclass "
                       "AND o LIKE 'fillfactor=%'), '100')");
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        fprintf(stderr, "outbox-bench: cannot read the outbox's fillfactor: %s",
                PQerrorMessage(conn));
        exit(1);
    }
    snprintf(current_fillfactor, sizeof(current_fillfactor), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
}

/* One of per-aggregate ordering's indexes (migrations 0014 and 0016), which both claims use. */
static int
ordering_index(const char *name)
{
    return strcmp(name, "events_aggregate_seq_idx") == 0 ||
           strcmp(name, "events_waiting_for_head_idx") == 0;
}

/* Drops every index of outbox.events but its primary key. */
static void
drop_indexes(PGconn *conn)
{
    obx_bench_exec(conn, "DO $$DECLARE i text; BEGIN FOR i IN SELECT indexname FROM pg_indexes "
                         "WHERE schemaname = 'outbox' AND tablename = 'events' "
                         "AND indexname <> 'events_pkey' LOOP "
                         "EXECUTE format('DROP INDEX outbox.%I', i); END LOOP; END$$");
}

void
obx_bench_claim_table(PGconn *conn, int two_writes)
{
    char sql[64];

    remember_current(conn);
    obx_bench_exec(conn, "TRUNCATE outbox.events"); /* each case loads its own rows */
    drop_indexes(conn);
    snprintf(sql, sizeof(sql), "ALTER TABLE outbox.events SET (fillfactor = %s)",
             two_writes ? "60" : current_fillfactor);
    obx_bench_exec(conn, sql);
    if (two_writes) {
        for (size_t i = 0; i < sizeof(two_write_indexes) / sizeof(two_write_indexes[0]); i++) {
            obx_bench_exec(conn, two_write_indexes[i]);
        }
    }
    for (int i = 0; i < PQntuples(current_indexes); i++) {
        if (!two_writes || ordering_index(PQgetvalue(current_indexes, i, 0))) {
            obx_bench_exec(conn, PQgetvalue(current_indexes, i, 1));
        }
    }
}
