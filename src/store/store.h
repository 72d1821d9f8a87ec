/* SPDX-License-Identifier: MIT */
/*
 * store.h - the relay's (and the DB-only feed's) view of the outbox table.
 *
 * Leasing stamps a batch of due rows with one fresh lease token and a
 * lease end in database time, and commits before anything is published.
 * Every later write is guarded by that token: a replica whose lease ran
 * out changes nothing, and learns how many rows it still held.
 *
 * A store owns one PostgreSQL connection and belongs to one thread. Every
 * function resets `err`; a lost connection is OUTBOX_EUNAVAILABLE from
 * then on, until obx_store_reconnect() succeeds (no attempt is spent).
 */
#ifndef OBX_STORE_H
#define OBX_STORE_H

#include <stddef.h>

#include "envelope/envelope.h"
#include "outbox/outbox.h"

struct obx_store_options {
    const char *conninfo;         /* libpq URL or key=value string */
    const char *schema;           /* "outbox" */
    const char *application_name; /* shown in pg_stat_activity, e.g. "outboxd-relay" */
    const char *holder;           /* names its window claims (OUTBOX_NAME); NULL: the above */
};

struct obx_store;

/*
 * Connects, with keepalives and connect/TCP timeouts that notice a dead
 * server within seconds unless the conninfo says otherwise. Returns
 * OUTBOX_EUNAVAILABLE when the server cannot be reached.
 */
outbox_status obx_store_open(const struct obx_store_options *opts, struct obx_store **out,
                             outbox_error *err);
void obx_store_close(struct obx_store *store);

/* Drops a broken connection and connects again, and LISTENs again if it was. */
outbox_status obx_store_reconnect(struct obx_store *store, outbox_error *err);

/* The leased batch. Caller memory, emptied by obx_store_lease() even when it fails;
 * rows stay valid until obx_lease_fini(). */
struct obx_lease {
    void *rows;      /* owned: the PGresult */
    char token[37];  /* the batch's lease token */
    size_t count;    /* rows leased (to publish) */
    int quarantined; /* rows set dead by this call: leases ran out too often */
    int taken_over;  /* rows whose lease had run out (another holder died or stalled),
                      * leased again or quarantined by this call */
};

/*
 * Leases up to `limit` due rows for `lease_seconds`. Fresh rows are
 * claimed by commit window (claim_window.sql): no write to them, a
 * relay_claims row records the batch, and the finish's write is the only
 * one per row. Rows that came back (retries, releases, requeues, window
 * claims run out) are leased row by row (lease_batch.sql): pending rows
 * whose next_attempt_at has come, and leased rows whose lease ran out
 * (those count a lease expiry; at `max_lease_expiries` the row goes dead
 * with reason lease_expired_without_outcome and a dead_letters row
 * instead). The row lease goes first when the window is empty and at
 * least once a second, so a busy window cannot starve a retry.
 */
outbox_status obx_store_lease(struct obx_store *store, int limit, int lease_seconds,
                              int max_lease_expiries, struct obx_lease *out, outbox_error *err);
void obx_lease_fini(struct obx_lease *lease);

/*
 * Nonzero: every lease is a row lease (lease_batch.sql: a committed write
 * per row, then the finish's), as before window claims. For outbox-bench's
 * comparison of the two in one run; nothing else calls it.
 */
void obx_store_use_row_leases(struct obx_store *store, int on);

/*
 * The plan of obx_store_lease(store, limit, ...) in this store's session,
 * its planner settings included: EXPLAIN (FORMAT JSON) text, malloc'ed into
 * `*json`. With `analyze` the lease really runs, with actual row counts and
 * buffers in the plan, inside a transaction that is rolled back: nothing
 * stays leased. For tests and diagnosis; the relay never calls it.
 */
outbox_status obx_store_lease_plan(struct obx_store *store, int limit, int analyze, char **json,
                                   outbox_error *err);
/* The same for the window claim (claim_window.sql), under the cursor's lock; always rolled back. */
outbox_status obx_store_claim_plan(struct obx_store *store, int limit, int analyze, char **json,
                                   outbox_error *err);
/* The same for the claim's takeover of claims run out (claim_takeover.sql), likewise. */
outbox_status obx_store_takeover_plan(struct obx_store *store, int analyze, char **json,
                                      outbox_error *err);
/* The same for obx_store_health()'s sample. */
outbox_status obx_store_health_plan(struct obx_store *store, int analyze, char **json,
                                    outbox_error *err);
/* The same for a pass's first batch of obx_store_prune_done() (rolled back too). */
outbox_status obx_store_prune_plan(struct obx_store *store, int retention_seconds, int limit,
                                   int analyze, char **json, outbox_error *err);

/* Row accessors; `i` < lease->count. Borrowed until obx_lease_fini(). */
const char *obx_lease_id(const struct obx_lease *lease, size_t i);
const char *obx_lease_envelope(const struct obx_lease *lease, size_t i, size_t *len);
int obx_lease_attempts(const struct obx_lease *lease, size_t i);
/*
 * The row's columns the envelope must repeat, those the lease query
 * returned by name (event_type, aggregate_type, aggregate_id, tenant_id,
 * data_subject); the id is obx_lease_id's.
 */
void obx_lease_row(const struct obx_lease *lease, size_t i, struct obx_envelope_row *out);
/* Leases of this row that ran out before this one (0 on a first lease). */
int obx_lease_expiries(const struct obx_lease *lease, size_t i);

enum obx_row_outcome {
    OBX_ROW_DONE,    /* published: prune or mark done */
    OBX_ROW_RETRY,   /* rejected: attempts + 1, backoff, or dead at max_attempts */
    OBX_ROW_RELEASE, /* not published for a transport reason: pending again, no attempt */
    OBX_ROW_INVALID, /* can never be published: status invalid with the reason */
};

enum obx_finish_mode { OBX_FINISH_MARK, OBX_FINISH_PRUNE };

struct obx_finish_options {
    enum obx_finish_mode mode;
    int max_attempts;     /* OUTBOX_MAX_ATTEMPTS */
    int release_delay_ms; /* how long released rows wait before they are due again */
    int backoff_base_ms;  /* retry delay after the first failure (OBX_BACKOFF_BASE_MS) */
    int backoff_cap_ms;   /* longest retry delay before jitter (OBX_BACKOFF_CAP_MS) */
    /* NULL: every released row waits release_delay_ms. Otherwise one delay per
     * leased row, used by its RELEASE outcome (the DB feed's NAKs); cut to
     * 0..ten years. */
    const long long *release_delays_ms;
    /* NULL: no sequences. Otherwise one per leased row: the stream sequence a
     * DONE row was stored at (0: unknown), recorded as its stream_seq. */
    const long long *stream_seqs;
};

struct obx_finish_counts {
    size_t done, retried, dead, released, invalid;
    size_t lost; /* rows whose lease token no longer matched: someone else holds them */
};

/*
 * Applies one outcome per leased row (`outcomes[i]`, `reasons[i]` for
 * row i; reasons may be NULL for DONE/RELEASE) in one round trip, guarded
 * by the lease token. Reasons are cut at 1024 bytes; control characters,
 * and non-ASCII bytes of a reason that is not UTF-8, become '?'.
 */
outbox_status obx_store_finish(struct obx_store *store, const struct obx_lease *lease,
                               const enum obx_row_outcome *outcomes, const char *const *reasons,
                               const struct obx_finish_options *opts,
                               struct obx_finish_counts *counts, outbox_error *err);

/*
 * Extends the lease of row `i` to `lease_seconds` from now (database
 * time), for work that outlasts the lease. OUTBOX_ECONFLICT when the row
 * is no longer held by this lease (it ran out and was leased again).
 */
outbox_status obx_store_extend(struct obx_store *store, const struct obx_lease *lease, size_t i,
                               int lease_seconds, outbox_error *err);

/*
 * Where a retention pass has got to. Each batch of a pass goes on from the
 * key the one before stopped at, so the rows a pass keeps at the old end
 * (dead, invalid, waiting) are stepped over once a pass, not once a batch.
 * Zero it at each pass's start: a row kept by this pass may be done by the
 * next one.
 */
struct obx_prune_cursor {
    char after[37]; /* a uuid's text; "" from the oldest key */
};

/*
 * Deletes up to `limit` done rows published more than `retention_seconds`
 * ago, from `cursor` on, and moves `cursor` to where it stopped. NULL
 * `cursor`: one batch from the oldest row.
 */
outbox_status obx_store_prune_done(struct obx_store *store, int retention_seconds, int limit,
                                   struct obx_prune_cursor *cursor, size_t *deleted,
                                   outbox_error *err);

/* The outbox's state as its gauges show it; a value PostgreSQL does not know yet reads 0. */
struct obx_store_health {
    long long oldest_due_s;         /* age of the oldest row due now */
    long long oldest_unconfirmed_s; /* age of the oldest leased row */
    long long dead_tuples;          /* pg_stat_user_tables.n_dead_tup */
    long long last_vacuum_unix;     /* last vacuum or autovacuum, Unix seconds */
    long long claim_index_reads;    /* entries read from the claim index, ever */
    long long claim_index_scans;    /* scans of it, ever */
    long long claim_index_fetches;  /* live table rows those scans fetched, ever */
    long long dead_letters;         /* the relay's own, not requeued */
    long long horizon_age_s;        /* oldest xmin holder: session or prepared transaction */
    long long claim_open_s;         /* the oldest window claim's age */
    long long blocked_aggregates;   /* ordered aggregates held by a dead head */
};

/* One sample (outbox_health.sql). */
outbox_status obx_store_health(struct obx_store *store, struct obx_store_health *out,
                               outbox_error *err);

/*
 * LISTEN for the wake-up channel of this schema, then wait up to
 * `timeout_ms` for a notification or data on the socket. Returns OUTBOX_OK
 * whether woken or timed out; `*woken` says which.
 */
outbox_status obx_store_listen(struct obx_store *store, outbox_error *err);
outbox_status obx_store_wait(struct obx_store *store, int timeout_ms, int *woken,
                             outbox_error *err);

#endif
