/* SPDX-License-Identifier: MIT */
/*
 * consumer_upkeep.c - a consumer's work beside its handlers, on a thread
 * and a session of their own.
 *
 * Every few seconds: each handler's waiting dead letters and parked
 * events, and those of the handlers no daemon runs (an SQL API's). Every
 * few minutes, the retention: ledger rows finished longer ago than
 * OUTBOX_LEDGER_RETENTION_DAYS, and with no relay (OUTBOX_BUS=db, mark
 * mode) handled outbox rows past OUTBOX_RETENTION_HOURS.
 *
 * Both ran on the ledger's session between batches, the passes held to 20
 * deletes of 1,000 rows every 5 minutes so as not to hold up handling:
 * 67 rows a second a replica, while a consumer handling 1,000 events a
 * second writes as many ledger rows a second per handler, so the ledger
 * grew without end once the retention came round. Here a pass goes on
 * while its batches come full, for up to PASS_BUDGET_MS at a time, and
 * comes again at the next tick while old rows are left.
 */
#include "consumer_upkeep.h"

#include <stdint.h>
#include <string.h>

#include "common/clock.h"
#include "consumer_internal.h"
#include "store/prune_pass.h"
#include "support/log.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    TICK_MS = 1000,                     /* how often the thread looks at its schedule */
    SAMPLE_EVERY_MS = 10000,            /* the gauges' period */
    RETENTION_EVERY_MS = 5 * 60 * 1000, /* a pass's period once the old rows are gone */
    PASS_BUDGET_MS = 2000,              /* the longest one pass runs */
    PRUNE_BATCH_ROWS = 1000,            /* rows per delete, so no statement holds locks long */
};

/* The session is there and answering, or it is (re)opened now; 0 when the database is away. */
static int
ensure_session(struct obx_consumer_upkeep *u)
{
    struct obx_store_options so = {.conninfo = u->c->w.cfg.database_url,
                                   .schema = u->c->w.cfg.schema,
                                   .application_name = "outboxd-consumer-upkeep"};
    outbox_error err = {0};

    if (u->ledger_up) {
        return 1;
    }
    /* The handling loop reports outages: a gauge missed while the database is away is only
     * a gauge a few seconds older, and a retention pass runs once it is back. */
    u->ledger_up = (u->ledger == NULL ? obx_ledger_open(&so, &u->ledger, &err)
                                      : obx_ledger_reconnect(u->ledger, &err)) == OUTBOX_OK;
    return u->ledger_up;
}

static void
sample(struct obx_consumer_upkeep *u)
{
    struct outbox_consumer *c = u->c;
    const char *names[OBX_MAX_HANDLERS];
    struct obx_handler_gauges gauges[OBX_MAX_HANDLERS];
    struct obx_other_handler_gauges others[OBX_OTHER_HANDLERS_MAX];
    size_t other_count = 0;
    outbox_error err = {0};

    for (int h = 0; h < c->handler_count; h++) {
        names[h] = c->handlers[h].name;
    }
    if (obx_ledger_handler_gauges(u->ledger, names, (size_t)c->handler_count, gauges, &err) !=
        OUTBOX_OK) {
        u->ledger_up = err.code != OUTBOX_EUNAVAILABLE;
        return;
    }
    /* An SQL API's handlers have no daemon: their dead letters show here. A
     * failure keeps the last sample; the next tries again. */
    if (obx_ledger_other_handler_gauges(u->ledger, names, (size_t)c->handler_count, others,
                                        &other_count, &err) != OUTBOX_OK) {
        if (err.code == OUTBOX_EUNAVAILABLE) {
            u->ledger_up = 0;
            return;
        }
        obx_log(OUTBOX_LOG_WARN, "cannot read other handlers' gauges consumer=%s error=\"%s\"",
                c->w.name, err.message);
        other_count = SIZE_MAX;
    }
    pthread_mutex_lock(&c->w.stats_lock);
    if (other_count != SIZE_MAX) {
        memcpy(c->others, others, other_count * sizeof(others[0]));
        c->other_count = other_count;
    }
    for (int h = 0; h < c->handler_count; h++) {
        c->handler_stats[h][OUTBOX_HANDLER_DEAD_LETTERS] =
            (unsigned long long)gauges[h].dead_letters;
        c->handler_stats[h][OUTBOX_HANDLER_PARKED] = (unsigned long long)gauges[h].parked;
        c->handler_stats[h][OUTBOX_HANDLER_OLDEST_PARKED_SECONDS] =
            (unsigned long long)gauges[h].oldest_parked_seconds;
    }
    pthread_mutex_unlock(&c->w.stats_lock);
}

/* One batch of a ledger pass. */
static outbox_status
ledger_batch(void *arg, int limit, struct obx_prune_cursor *cursor, size_t *deleted,
             outbox_error *err)
{
    struct obx_consumer_upkeep *u = arg;

    return obx_ledger_prune(u->ledger, u->c->w.cfg.ledger_retention_days * 86400, limit, cursor,
                            deleted, err);
}

/* One batch of an outbox pass. */
static outbox_status
outbox_batch(void *arg, int limit, struct obx_prune_cursor *cursor, size_t *deleted,
             outbox_error *err)
{
    struct obx_consumer_upkeep *u = arg;

    return obx_store_prune_done(u->store, (int)u->c->w.cfg.retention_hours * 3600, limit, cursor,
                                deleted, err);
}

/*
 * With no relay (OUTBOX_BUS=db, mark mode) the consumers are the ones who
 * remove handled outbox rows after the retention, through a store session
 * of the upkeep's, opened at the first pass and kept while it answers (a
 * pass comes every second while old rows are left). Returns 1 when old
 * rows may be left.
 */
static int
outbox_pass(struct obx_consumer_upkeep *u)
{
    const struct obx_config *cfg = &u->c->w.cfg;
    struct obx_store_options so = {.conninfo = cfg->database_url,
                                   .schema = cfg->schema,
                                   .application_name = "outboxd-consumer-upkeep"};
    outbox_error err = {0};
    int left = 0;

    if (cfg->bus != OUTBOX_BUS_DB || cfg->relay_mode != OUTBOX_RELAY_MARK ||
        (u->store == NULL && obx_store_open(&so, &u->store, &err) != OUTBOX_OK)) {
        return 0;
    }
    if (obx_prune_pass(outbox_batch, u, PRUNE_BATCH_ROWS, PASS_BUDGET_MS, &u->side.stop, &left,
                       &err) != OUTBOX_OK &&
        err.code == OUTBOX_EUNAVAILABLE) {
        obx_store_close(u->store); /* opened again at the next pass */
        u->store = NULL;
    }
    return left;
}

/* The ledger's pass, then the outbox's; the next comes at the next tick while rows are left. */
static void
retention_passes(struct obx_consumer_upkeep *u)
{
    outbox_error err = {0};
    int left = 0;

    if (obx_prune_pass(ledger_batch, u, PRUNE_BATCH_ROWS, PASS_BUDGET_MS, &u->side.stop, &left,
                       &err) != OUTBOX_OK) {
        if (err.code == OUTBOX_EUNAVAILABLE) {
            u->ledger_up = 0;
            return; /* again once the session is back */
        }
        obx_log(OUTBOX_LOG_ERROR, "ledger retention pass failed consumer=%s error=\"%s\"",
                u->c->w.name, err.message);
    }
    left |= outbox_pass(u);
    u->next_retention_ms = obx_monotonic_ms() + (left ? TICK_MS : RETENTION_EVERY_MS);
}

static void *
run(void *arg)
{
    struct obx_consumer_upkeep *u = arg;

    while (!atomic_load(&u->side.stop)) {
        long long now = obx_monotonic_ms();

        if (ensure_session(u) && now >= u->next_sample_ms) {
            u->next_sample_ms = now + SAMPLE_EVERY_MS;
            sample(u);
        }
        if (u->ledger_up && now >= u->next_retention_ms) {
            retention_passes(u);
        }
        obx_pause_ms(&u->side.stop, TICK_MS);
    }
    return NULL;
}

int
obx_consumer_upkeep_start(struct obx_consumer_upkeep *u, struct outbox_consumer *c)
{
    *u = (struct obx_consumer_upkeep){.c = c};
    return obx_side_thread_start(&u->side, run, u);
}

void
obx_consumer_upkeep_stop(struct obx_consumer_upkeep *u)
{
    obx_side_thread_stop(&u->side);
    obx_ledger_close(u->ledger);
    u->ledger = NULL;
    u->ledger_up = 0;
    obx_store_close(u->store);
    u->store = NULL;
}
