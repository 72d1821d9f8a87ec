/* SPDX-License-Identifier: MIT */
/*
 * relay_upkeep.c - a relay's work beside its claims, on a thread and a
 * session of their own.
 *
 * The gauges an operator alerts on come from one query every few seconds:
 * what waits, what a republish could duplicate, dead row versions and the
 * last vacuum, and how much of the claim index a lease reads. In mark mode
 * the retention pass deletes published rows older than the retention.
 *
 * Both ran on the claim loop's session, and the relay claimed nothing while
 * they did: the sample took 0.1-1.8 s a call on a bloated table under load.
 * The pass was held to 20 batches of 1,000 rows every 30 s so as not to
 * stall claims, which is 667 rows a second a relay: an outbox written at
 * 10,000 events a second grew without end. Here a pass goes on while its
 * batches come full, for up to PASS_BUDGET_MS at a time.
 */
#include "relay_upkeep.h"

#include "common/clock.h"
#include "store/prune_pass.h"
#include "support/log.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    SAMPLE_EVERY_MS = 5000,     /* the gauges' period */
    RETENTION_EVERY_MS = 30000, /* a pass's period once the old rows are gone */
    PASS_BUDGET_MS = 2000,      /* the longest a pass runs before the next sample */
    PRUNE_BATCH_ROWS = 1000,    /* rows per delete, so no statement holds locks long */
};

/* The session is there and answering, or it is (re)opened now; 0 when the database is away. */
static int
ensure_session(struct obx_relay_upkeep *u)
{
    struct obx_store_options so = {
        .conninfo = u->w->cfg.database_url,
        .schema = u->w->cfg.schema,
        .application_name = "outboxd-relay-upkeep", /* it claims nothing: no holder */
    };
    outbox_error err = {0};

    if (u->store_up) {
        return 1;
    }
    /* The claim loop reports outages: a gauge missed while the database is away is only a
     * gauge a few seconds older, and a retention pass runs once it is back. */
    u->store_up = (u->store == NULL ? obx_store_open(&so, &u->store, &err)
                                    : obx_store_reconnect(u->store, &err)) == OUTBOX_OK;
    return u->store_up;
}

static void
sample(struct obx_relay_upkeep *u)
{
    struct obx_worker *w = u->w;
    struct obx_store_health h;
    outbox_error err = {0};
    long long scans, reads, fetches;

    if (obx_store_health(u->store, &h, &err) != OUTBOX_OK) {
        u->store_up = err.code != OUTBOX_EUNAVAILABLE;
        return;
    }
    scans = h.claim_index_scans - u->last.claim_index_scans;
    reads = h.claim_index_reads - u->last.claim_index_reads;
    fetches = h.claim_index_fetches - u->last.claim_index_fetches;
    if (u->last.claim_index_scans > 0 && scans > 0 && reads >= 0) {
        obx_worker_gauge(w, OUTBOX_RELAY_INDEX_ENTRIES_PER_LEASE,
                         (unsigned long long)(reads / scans));
    }
    if (u->last.claim_index_scans > 0 && scans > 0 && fetches >= 0) {
        obx_worker_gauge(w, OUTBOX_RELAY_ROWS_SCANNED_PER_LEASE,
                         (unsigned long long)(fetches / scans));
    }
    obx_worker_gauge(w, OUTBOX_RELAY_OLDEST_DUE_SECONDS, (unsigned long long)h.oldest_due_s);
    obx_worker_gauge(w, OUTBOX_RELAY_OLDEST_UNCONFIRMED_SECONDS,
                     (unsigned long long)h.oldest_unconfirmed_s);
    obx_worker_gauge(w, OUTBOX_RELAY_TABLE_DEAD_TUPLES, (unsigned long long)h.dead_tuples);
    obx_worker_gauge(w, OUTBOX_RELAY_TABLE_LAST_VACUUM_UNIX,
                     (unsigned long long)h.last_vacuum_unix);
    obx_worker_gauge(w, OUTBOX_RELAY_DEAD_LETTERS, (unsigned long long)h.dead_letters);
    obx_worker_gauge(w, OUTBOX_RELAY_XMIN_HORIZON_AGE_SECONDS, (unsigned long long)h.horizon_age_s);
    obx_worker_gauge(w, OUTBOX_RELAY_CLAIM_OPEN_SECONDS, (unsigned long long)h.claim_open_s);
    obx_worker_gauge(w, OUTBOX_RELAY_BLOCKED_AGGREGATES, (unsigned long long)h.blocked_aggregates);
    u->last = h;
}

/* One batch of a pass: outbox rows published more than the retention ago. */
static outbox_status
prune_batch(void *arg, int limit, struct obx_prune_cursor *cursor, size_t *deleted,
            outbox_error *err)
{
    struct obx_relay_upkeep *u = arg;

    return obx_store_prune_done(u->store, u->w->cfg.retention_hours * 3600, limit, cursor, deleted,
                                err);
}

/*
 * Mark mode keeps published rows for replay; a pass removes them after the
 * retention. Old rows left at the budget's end: the next pass comes after
 * the next sample, not in half a minute.
 */
static void
retention_pass(struct obx_relay_upkeep *u)
{
    struct obx_worker *w = u->w;
    outbox_error err = {0};
    int left = 0;

    if (w->cfg.relay_mode != OUTBOX_RELAY_MARK || obx_monotonic_ms() < u->next_retention_ms) {
        return;
    }
    if (obx_prune_pass(prune_batch, u, PRUNE_BATCH_ROWS, PASS_BUDGET_MS, &u->side.stop, &left,
                       &err) != OUTBOX_OK) {
        if (err.code == OUTBOX_EUNAVAILABLE) {
            u->store_up = 0;
        } else {
            obx_log(OUTBOX_LOG_ERROR, "retention pass failed relay=%s error=\"%s\" sqlstate=%s",
                    w->name, err.message, err.sqlstate);
        }
    }
    u->next_retention_ms = left ? 0 : obx_monotonic_ms() + RETENTION_EVERY_MS;
}

static void *
run(void *arg)
{
    struct obx_relay_upkeep *u = arg;

    while (!atomic_load(&u->side.stop)) {
        if (ensure_session(u)) {
            sample(u);
        }
        if (u->store_up) {
            retention_pass(u);
        }
        obx_pause_ms(&u->side.stop, SAMPLE_EVERY_MS);
    }
    return NULL;
}

int
obx_relay_upkeep_start(struct obx_relay_upkeep *u, struct obx_worker *w)
{
    *u = (struct obx_relay_upkeep){.w = w};
    return obx_side_thread_start(&u->side, run, u);
}

void
obx_relay_upkeep_stop(struct obx_relay_upkeep *u)
{
    obx_side_thread_stop(&u->side);
    obx_store_close(u->store);
    u->store = NULL;
    u->store_up = 0;
}
