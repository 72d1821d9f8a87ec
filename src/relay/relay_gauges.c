/* SPDX-License-Identifier: MIT */
/*
 * relay_gauges.c - the gauges an operator alerts on, from one query every
 * few seconds: what waits, what a republish could duplicate, dead row
 * versions and the last vacuum, and how much of the claim index a lease
 * reads.
 *
 * The sample has its own thread and session. On the claim loop's session it
 * held up every claim behind it: on a bloated table under load the query
 * took 0.1-1.8 s, and the relay claimed nothing meanwhile.
 */
#include "relay_gauges.h"

#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { SAMPLE_EVERY_MS = 5000 };

/* The session is there and answering, or it is (re)opened now; 0 when the database is away. */
static int
ensure_session(struct obx_relay_gauges *g)
{
    struct obx_store_options so = {
        .conninfo = g->w->cfg.database_url,
        .schema = g->w->cfg.schema,
        .application_name = "outboxd-relay-gauges",
        .holder = g->w->name,
    };
    outbox_error err = {0};

    if (g->store_up) {
        return 1;
    }
    /* The loop's own link reports outages: a gauge missed while the database is away is
     * only a gauge a few seconds older. */
    g->store_up = (g->store == NULL ? obx_store_open(&so, &g->store, &err)
                                    : obx_store_reconnect(g->store, &err)) == OUTBOX_OK;
    return g->store_up;
}

static void
sample(struct obx_relay_gauges *g)
{
    struct obx_worker *w = g->w;
    struct obx_store_health h;
    outbox_error err = {0};
    long long scans, reads, fetches;

    if (!ensure_session(g)) {
        return;
    }
    if (obx_store_health(g->store, &h, &err) != OUTBOX_OK) {
        g->store_up = err.code != OUTBOX_EUNAVAILABLE;
        return;
    }
    scans = h.claim_index_scans - g->last.claim_index_scans;
    reads = h.claim_index_reads - g->last.claim_index_reads;
    fetches = h.claim_index_fetches - g->last.claim_index_fetches;
    if (g->last.claim_index_scans > 0 && scans > 0 && reads >= 0) {
        obx_worker_gauge(w, OUTBOX_RELAY_INDEX_ENTRIES_PER_LEASE,
                         (unsigned long long)(reads / scans));
    }
    if (g->last.claim_index_scans > 0 && scans > 0 && fetches >= 0) {
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
    g->last = h;
}

static void *
run(void *arg)
{
    struct obx_relay_gauges *g = arg;

    while (!obx_worker_stopping(g->w)) {
        sample(g);
        obx_pause_ms(&g->w->stop_requested, SAMPLE_EVERY_MS);
    }
    return NULL;
}

int
obx_relay_gauges_start(struct obx_relay_gauges *g, struct obx_worker *w)
{
    int rc;

    *g = (struct obx_relay_gauges){.w = w};
    rc = pthread_create(&g->thread, NULL, run, g);
    g->started = rc == 0;
    return rc;
}

void
obx_relay_gauges_stop(struct obx_relay_gauges *g)
{
    if (g->started) {
        pthread_join(g->thread, NULL);
        g->started = 0;
    }
    obx_store_close(g->store);
    g->store = NULL;
    g->store_up = 0;
}
