/* SPDX-License-Identifier: MIT */
/*
 * store_int.h - the insides of a store, shared by store_conn_pg.c (the
 * connection and the wake-up) and store_pg.c (lease, finish, prune).
 */
#ifndef OBX_STORE_INT_H
#define OBX_STORE_INT_H

#include <libpq-fe.h>

#include "store.h"
#include "support/pg_conn.h"

/* The store's statements, rendered for its schema at open. */
enum obx_store_sql {
    OBX_STORE_LEASE,
    OBX_STORE_FINISH_ROWS,
    OBX_STORE_DONE_PRUNE,
    OBX_STORE_DONE_MARK,
    OBX_STORE_PRUNE,
    OBX_STORE_LISTEN,
    OBX_STORE_SESSION,
    OBX_STORE_EXTEND,
    OBX_STORE_HEALTH,
    OBX_STORE_CLAIM_CURSOR,
    OBX_STORE_CLAIM_TAKEOVER,
    OBX_STORE_CLAIM_WINDOW,
    OBX_STORE_CLAIM_WINDOW_ROWS,
    OBX_STORE_WAKE_SUCCESSORS,
    OBX_STORE_LEASE_ALL, /* lease_batch.sql for every due row: the bench's old claim */
    OBX_STORE_SQL_COUNT
};

struct obx_store {
    struct obx_pg_session pg;   /* the connection and the statements of enum obx_store_sql */
    char *schema;               /* owned, unquoted: the wake-up channel is derived from it */
    int listening;              /* LISTEN was asked for: repeated after a reconnect */
    char *holder;               /* owned: the replica name a window claim records */
    int row_leases_only;        /* the bench's comparison: no window claims */
    long long row_lease_due_ms; /* monotonic time the row lease goes first again */
    int retries_due;            /* the last claim saw a row that came back due: lease it */
    int lease_limit;            /* the last lease's batch limit: how many successors to wake */
    int lease_seconds;          /* the last lease's: how long the woken rows are leased */
    int max_lease_expiries;     /* the last lease's: a woken row past it is not leased */
    PGresult *woken;            /* rows the last wake-up leased: the next lease's batch */
};

/* What the window claim's takeover step found (claim_takeover.sql). */
struct obx_claim_takeover {
    int given_back;  /* rows of claims that ran out, given back to the row lease */
    int retries_due; /* some row that came back is due, those included */
};

/*
 * Claims up to `limit` fresh rows by commit window (claim_window.sql), in
 * one transaction of one round trip, after giving back the rows of window
 * claims that ran out (`*found` says how many, and whether the row lease
 * has rows due). On OUTBOX_OK `*rows` is the
 * claim's result in lease_batch.sql's columns (no rows: nothing fresh),
 * for the caller to take and PQclear().
 */
outbox_status obx_store_claim_window(struct obx_store *store, int limit, int claim_seconds,
                                     PGresult **rows, struct obx_claim_takeover *found,
                                     outbox_error *err);

/*
 * After a finish: leases to this store the runs of rows that waited for
 * the ordered heads the lease published (outcome done), kept for the next
 * obx_store_lease(), and makes the other rows that waited for them due
 * now, with the row lease going first. Failures are logged only: waiting
 * rows are looked at again after a while in any case (migration 0016).
 */
void obx_store_wake_successors(struct obx_store *store, const struct obx_lease *lease,
                               const enum obx_row_outcome *outcomes, const unsigned char *held);

/*
 * The rows the last wake-up leased, as `*out` (1), or 0 when there are
 * none, or more than `limit` (then they are given back, due); either way
 * the store no longer keeps them.
 */
int obx_store_take_woken(struct obx_store *store, int limit, struct obx_lease *out);

/*
 * Gives back the rows the last wake-up leased that no lease took (the
 * store is closing): pending and due now, no attempt spent.
 */
void obx_store_release_woken(struct obx_store *store);

/*
 * The published rows of an ordered aggregate that follow one of its rows
 * the same lease did not publish (a failed head and the numbers sent with
 * it): 1 per such row, in a calloc'd array the caller frees, or NULL when
 * there is none (or no memory: then nothing is held back). Such a row went
 * out before its predecessor; it is recorded as waiting for its head
 * (finish_rows.sql's `wait`), not as published, so the numbers after it
 * keep waiting too and it goes out again, in order, after the head. The
 * stream's duplicate window drops that second copy; consumers' ledgers
 * keep the order in any case.
 */
unsigned char *obx_store_held_rows(const struct obx_lease *lease,
                                   const enum obx_row_outcome *outcomes);

#endif
