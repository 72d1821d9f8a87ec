/* SPDX-License-Identifier: MIT */
/*
 * aged_rows.h - makes fresh rows look two hours old, for the retention
 * tests. Header-only (static inline) because it calls the harness, which
 * only the integration and fault binaries link.
 */
#ifndef OBX_TEST_AGED_ROWS_H
#define OBX_TEST_AGED_ROWS_H

#include <stdio.h>

#include "harness.h"

/*
 * Ages every pending row written within the last hour by two hours and sets
 * it to `status`: a v7 id of that time (pruning walks the id range, and the
 * envelope's id must match the row's), created_at, and for 'done' the
 * published_at, as if it had been published back then.
 */
static inline void
aged_rows_from_pending(PGconn *conn, const char *status)
{
    char sql[768];

    snprintf(sql, sizeof(sql),
             "WITH aged AS (SELECT id, outbox.uuid_v7(now() - interval '2 hours') AS new_id "
             "FROM outbox.events WHERE status = 'pending' "
             "AND created_at > now() - interval '1 hour') "
             "UPDATE outbox.events e SET id = a.new_id, "
             "envelope = jsonb_set(e.envelope, '{id}', to_jsonb(a.new_id::text)), "
             "status = '%s', published_at = CASE WHEN '%s' = 'done' "
             "THEN now() - interval '2 hours' END, created_at = now() - interval '2 hours' "
             "FROM aged a WHERE e.id = a.id",
             status, status);
    harness_exec(conn, sql);
}

#endif
