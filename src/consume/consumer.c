/* SPDX-License-Identifier: MIT */
/*
 * consumer.c - the consumer loop: fetch a batch, offer it to every
 * handler through the ledger, settle each message once.
 *
 * No SQL text and no nats.c types here: the ledger and the feed do the
 * I/O. Outages are states: the loop pauses with a growing delay, logs each
 * change once, and resumes by itself; a message that could not be handled
 * because of an outage is redelivered and spends no attempt.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "consumer_internal.h"
#include "consumer_offer.h"
#include "message_check.h"
#include "parked_feed.h"
#include "store/store.h"
#include "support/log.h"
#include "support/nats_auth.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    REGISTER_EVERY_MS = 5 * 60 * 1000, /* the handlers' last_seen */
    OUTAGE_LOG_EVERY_MS = 60000,       /* a handler outage that lasts is logged again this often */
    PARK_SWEEP_EVERY_MS = 1000,        /* parked events a dead replica would have run, this late */
    PARK_SWEEP_ROUNDS = 64,            /* parked batches per handler and sweep, so feeds go on */
};

/* The ledger's connection broke: the next turn reconnects it. */
static void
drop_ledger(struct outbox_consumer *c, const outbox_error *why)
{
    obx_worker_link_down(&c->w, &c->db, why->message);
}

/*
 * The feed's server is away. The feed reconnects by itself on its next
 * call, so it is kept (closing it would strand the batch in hand); the
 * loop only records the state change and pauses - at most
 * OBX_PAUSE_CONNECTED_MAX_MS while the connection stands (a cluster
 * electing the consumer's leader; see pause.h).
 */
static void
feed_down(struct outbox_consumer *c, const outbox_error *why)
{
    obx_worker_link_down(&c->w, &c->feed_link, why->message);
    if (c->feed != NULL && c->feed->ops->connected != NULL && c->feed->ops->connected(c->feed) &&
        c->feed_link.pause_ms > OBX_PAUSE_CONNECTED_MAX_MS) {
        c->feed_link.pause_ms = OBX_PAUSE_CONNECTED_MAX_MS;
    }
}

/*
 * Records this replica's bindings in the handlers table (outboxctl
 * subjects reads them), at connect and on each maintenance pass. A failure
 * costs no event: it is logged, and a lost connection is reconnected.
 */
static void
register_handlers(struct outbox_consumer *c)
{
    struct obx_ledger_binding bindings[OBX_MAX_HANDLERS];
    char every[64]; /* {prefix}.>: a prefix is at most 32 bytes */
    int jetstream = c->w.cfg.bus != OUTBOX_BUS_DB;
    struct obx_ledger_registration r = {
        .consumer_group = c->w.cfg.consumer_name,
        .backend = jetstream ? "jetstream" : "db",
        .stream = jetstream ? c->w.cfg.stream : NULL,
        .replica = c->w.name,
        .bindings = bindings,
        .count = (size_t)c->handler_count,
    };
    outbox_error err = {0};

    snprintf(every, sizeof(every), "%s.>", c->w.cfg.subject_prefix);
    for (int h = 0; h < c->handler_count; h++) {
        bindings[h].name = c->handlers[h].name;
        bindings[h].subject_filter = c->handlers[h].filter ? c->handlers[h].filter : every;
    }
    if (obx_ledger_register(c->ledger, &r, &err) == OUTBOX_OK) {
        return;
    }
    if (err.code == OUTBOX_EUNAVAILABLE) {
        drop_ledger(c, &err);
    } else {
        obx_log(OUTBOX_LOG_WARN, "handler registration failed consumer=%s error=\"%s\" sqlstate=%s",
                c->w.name, err.message, err.sqlstate);
    }
}

static int
ensure_ledger(struct outbox_consumer *c)
{
    struct obx_store_options so = {.conninfo = c->w.cfg.database_url,
                                   .schema = c->w.cfg.schema,
                                   .application_name = "outboxd-consumer"};
    outbox_error err = {0};
    outbox_status st;
    char detail[96];

    if (c->db.up) {
        return 1;
    }
    /* Opened once; after that the same ledger (its statements rendered for the schema)
     * only reconnects. */
    st = c->ledger == NULL ? obx_ledger_open(&so, &c->ledger, &err)
                           : obx_ledger_reconnect(c->ledger, &err);
    if (st == OUTBOX_OK) {
        obx_logfmt_format(detail, sizeof(detail), "schema=%s", c->w.cfg.schema);
        obx_worker_link_up(&c->w, &c->db, "connected", detail);
        register_handlers(c);
        return c->db.up;
    }
    obx_worker_link_down(&c->w, &c->db, err.message);
    obx_worker_link_wait(&c->w, &c->db);
    return 0;
}

static outbox_status
open_feed(struct outbox_consumer *c, outbox_error *err)
{
    const struct obx_config *o = &c->w.cfg;
    struct obx_feed_options fo = {
        .database_url = o->database_url,
        .schema = o->schema,
        .lease_seconds = o->lease_seconds,
        .prune = o->relay_mode == OUTBOX_RELAY_PRUNE,
        .nats_url = o->nats_url,
        .stream = o->stream,
        .subject_prefix = o->subject_prefix,
        .consumer_name = o->consumer_name,
        .ack_wait_seconds = o->ack_wait_seconds,
        .max_deliver = o->max_deliver,
        /* Enough for every replica's batch in flight, with room for redeliveries. */
        .max_ack_pending = o->batch_size * 20 > 1000 ? o->batch_size * 20 : 1000,
        .name = c->w.name,
        /* A stream the feed creates gets the relay's settings (DESIGN.md "External contract"). */
        .stream_max_age_seconds = o->stream_max_age_seconds,
        .stream_replicas = (int)o->stream_replicas,
    };

    obx_nats_auth_from_config(&fo.auth, o);
    return o->bus == OUTBOX_BUS_DB ? obx_feed_db_open(&fo, &c->feed, err)
                                   : obx_feed_nats_open(&fo, &c->feed, err);
}

static int
ensure_feed(struct outbox_consumer *c)
{
    outbox_error err = {0};
    char detail[160];

    if (c->feed != NULL) {
        return 1;
    }
    if (open_feed(c, &err) == OUTBOX_OK) {
        obx_logfmt_format(detail, sizeof(detail), "bus=%s consumer_name=%s",
                          c->w.cfg.bus == OUTBOX_BUS_DB ? "db" : "jetstream",
                          c->w.cfg.consumer_name);
        obx_worker_link_up(&c->w, &c->feed_link, "ready", detail);
        return 1;
    }
    c->feed = NULL;
    obx_worker_link_down(&c->w, &c->feed_link, err.message);
    obx_worker_link_wait(&c->w, &c->feed_link);
    return 0;
}

/*
 * Checks every message (message_check.h) and keeps its parsed envelope.
 * The ledger is keyed by the envelope's own id; a message whose
 * Nats-Msg-Id, subject or headers say otherwise than the envelope, or
 * that carries none, was not sent by a relay: it is refused - no handler
 * runs it, it is terminated, and the reason is logged and counted.
 */
static void
read_envelopes(struct outbox_consumer *c, const struct obx_feed_batch *b, struct obx_msg_verdict *v)
{
    size_t refused = 0;

    for (size_t i = 0; i < b->count; i++) {
        const struct obx_feed_msg *m = &b->msgs[i];
        outbox_error why = {0};
        enum obx_refusal r = obx_message_check(m, c->w.cfg.subject_prefix, &v[i].env, &why);

        if (r != OBX_ACCEPTED) {
            v[i].bad = 1;
            refused++;
            obx_log(OUTBOX_LOG_WARN,
                    "message refused, terminated consumer=%s check=%s reason=\"%s\" "
                    "stream_seq=%llu message_id=%.80s subject=%.255s",
                    c->w.name, obx_refusal_name(r), why.message, m->stream_seq,
                    m->event_id ? m->event_id : "", m->subject ? m->subject : "");
            continue;
        }
        v[i].event_id = v[i].env.head.id;
        v[i].aggregate_id = v[i].env.head.aggregate_id;
        c->batch_ordered += v[i].env.head.aggregate_seq > 0;
    }
    obx_worker_count(&c->w, OUTBOX_CONSUMER_REFUSED, refused);
}

/* Every message comes back later; the ledger turns what was settled into skips. */
static void
redeliver_all(struct obx_feed_batch *b, struct obx_msg_verdict *v)
{
    for (size_t i = 0; i < b->count; i++) {
        obx_verdict_nak(&v[i], OBX_LEDGER_OUTAGE_RETRY_MS);
    }
}

/*
 * Handler runs the database failed under spend nothing and come back, so
 * only the log and outage_retries show them: at the first, then every
 * OUTAGE_LOG_EVERY_MS while they go on, and once when runs go through again.
 */
static void
log_outage(struct outbox_consumer *c, int h, const struct obx_offer_tally *t)
{
    long long now = obx_monotonic_ms();

    if (t->outages == 0) {
        if (c->outage_since_ms != 0 && t->handled > 0) {
            obx_log(OUTBOX_LOG_INFO,
                    "handler runs go through again consumer=%s handler=%s after_seconds=%lld "
                    "runs_given_back=%llu",
                    c->w.name, c->handlers[h].name, (now - c->outage_since_ms) / 1000,
                    c->outage_runs);
            c->outage_since_ms = 0;
        }
        return;
    }
    if (c->outage_since_ms == 0) {
        c->outage_since_ms = now;
        c->outage_runs = 0;
        c->outage_logged_ms = 0;
    }
    c->outage_runs += t->outages;
    if (c->outage_logged_ms == 0 || now - c->outage_logged_ms >= OUTAGE_LOG_EVERY_MS) {
        c->outage_logged_ms = now;
        obx_log(OUTBOX_LOG_WARN,
                "handler runs given back, the database failed under them (no attempt spent) "
                "consumer=%s handler=%s for_seconds=%lld runs_given_back=%llu error=\"%s\"",
                c->w.name, c->handlers[h].name, (now - c->outage_since_ms) / 1000, c->outage_runs,
                t->outage_reason);
    }
}

/* The offer's counts reach the statistics under one lock. */
static void
add_tally(struct outbox_consumer *c, int h, const struct obx_offer_tally *t)
{
    const struct obx_worker_add adds[] = {
        {OUTBOX_CONSUMER_CLAIMS, t->claims},
        {OUTBOX_CONSUMER_CONFLICTS, t->conflicts},
        {OUTBOX_CONSUMER_HANDLED, t->handled},
        {OUTBOX_CONSUMER_SKIPPED, t->skipped},
        {OUTBOX_CONSUMER_DEFERRED, t->deferred},
        {OUTBOX_CONSUMER_FAILED, t->failed},
        {OUTBOX_CONSUMER_RETRIED, t->retried},
        {OUTBOX_CONSUMER_DEAD, t->dead},
        {OUTBOX_CONSUMER_LEDGER_ERRORS, t->ledger_errors},
        {OUTBOX_CONSUMER_OUTAGE_RETRIES, t->outages},
        {OUTBOX_CONSUMER_CLAIMS_LOST, t->lost},
    };

    log_outage(c, h, t);
    obx_worker_count_all(&c->w, adds, sizeof(adds) / sizeof(adds[0]));
    pthread_mutex_lock(&c->w.stats_lock);
    c->handler_stats[h][OUTBOX_HANDLER_HANDLED] += t->handled;
    c->handler_stats[h][OUTBOX_HANDLER_FAILED] += t->failed;
    pthread_mutex_unlock(&c->w.stats_lock);
}

/*
 * Every handler, in registration order; a ledger outage stops the rest for
 * this batch. An offer that failed part way may have left events it had
 * freed but not settled: the whole batch is redelivered, never acked past them.
 */
static void
offer_to_handlers(struct outbox_consumer *c, struct obx_feed_batch *b, struct obx_msg_verdict *v)
{
    for (int h = 0; h < c->handler_count; h++) {
        struct obx_offer_env env = {.ledger = c->ledger,
                                    .feed = c->feed,
                                    .cfg = &c->w.cfg,
                                    .jitter_seed = &c->jitter_seed,
                                    .keeper = c->keeper};
        struct obx_offer_tally tally = {0};
        outbox_error err = {0};
        outbox_status st;

        if (!c->db.up) {
            redeliver_all(b, v);
            obx_worker_count(&c->w, OUTBOX_CONSUMER_LEDGER_ERRORS, b->count);
            return;
        }
        st = obx_consumer_offer(&env, &c->handlers[h], b, v, &tally, &err);
        add_tally(c, h, &tally);
        if (st != OUTBOX_OK) {
            redeliver_all(b, v);
            if (err.code == OUTBOX_EUNAVAILABLE) {
                drop_ledger(c, &err);
            } else {
                obx_log(OUTBOX_LOG_ERROR,
                        "ledger error consumer=%s handler=%s error=\"%s\" "
                        "sqlstate=%s",
                        c->w.name, c->handlers[h].name, err.message, err.sqlstate);
            }
        }
    }
}

/*
 * One settle per message: redeliver if any handler must see it again, else
 * done. Returns the feed's status; the caller drops an unavailable feed
 * only after finishing the batch, whose messages still use its connection.
 */
static outbox_status
settle(struct obx_feed *feed, struct obx_feed_batch *b, const struct obx_msg_verdict *v,
       outbox_error *err)
{
    enum obx_settle *what = calloc(b->count, sizeof(*what));
    long long *delay = calloc(b->count, sizeof(*delay));
    long long now_ms = obx_monotonic_ms();
    outbox_status st;

    if (what == NULL || delay == NULL) {
        free(what);
        free(delay);
        return OUTBOX_OK; /* out of memory: the server redelivers after ack_wait */
    }
    for (size_t i = 0; i < b->count; i++) {
        what[i] = OBX_SETTLE_ACK;
        if (v[i].nak) {
            what[i] = OBX_SETTLE_NAK;
            /* A retry keeps its schedule however long the batch ran after it failed. */
            delay[i] = obx_verdict_nak_delay_left(&v[i], now_ms);
        } else if (v[i].bad || (v[i].matched > 0 && v[i].dead == v[i].matched)) {
            what[i] = OBX_SETTLE_TERM;
        }
    }
    st = feed->ops->settle(feed, b, what, delay, err);
    free(what);
    free(delay);
    return st;
}

/* The handlers' registrations say every few minutes that their bindings are alive. */
static void
maybe_register_handlers(struct outbox_consumer *c)
{
    long long now = obx_monotonic_ms();

    if (now < c->next_register_ms || !c->db.up) {
        return;
    }
    c->next_register_ms = now + REGISTER_EVERY_MS;
    register_handlers(c); /* last_seen: the bindings are alive */
}

/*
 * FAULTS T07: a replica killed after its ledger commit and before its acks.
 * The redelivery must find every handled event done and run nothing twice.
 */
static void
crash_if_asked(struct outbox_consumer *c)
{
    if (c->hooks.crash_after_ledger_commit &&
        outbox_consumer_stat(c, OUTBOX_CONSUMER_HANDLED) > 0) {
        obx_log(OUTBOX_LOG_ERROR, "crashing on purpose after the ledger commit consumer=%s",
                c->w.name);
        abort();
    }
}

static void
set_handling(struct outbox_consumer *c, int on)
{
    pthread_mutex_lock(&c->w.stats_lock);
    c->handling = on;
    pthread_mutex_unlock(&c->w.stats_lock);
}

/* Handles and settles one batch; returns settle's status (OUTBOX_OK if it never came to it). */
static outbox_status
handle_batch(struct outbox_consumer *c, struct obx_feed_batch *b, outbox_error *err)
{
    struct obx_msg_verdict *v = calloc(b->count, sizeof(*v));
    double started;
    outbox_status st;

    if (v == NULL) {
        return OUTBOX_OK; /* redelivered after ack_wait */
    }
    started = obx_monotonic_seconds();
    obx_worker_count(&c->w, OUTBOX_CONSUMER_FETCHED, b->count);
    set_handling(c, 1);
    read_envelopes(c, b, v);
    offer_to_handlers(c, b, v);
    crash_if_asked(c);
    set_handling(c, 0); /* the ledger holds every outcome now; settling is a courtesy */
    st = settle(c->feed, b, v, err);
    obx_worker_observe(&c->w, OUTBOX_CONSUMER_BATCH_SECONDS, obx_monotonic_seconds() - started);
    for (size_t i = 0; i < b->count; i++) {
        obx_envelope_fini(&v[i].env);
    }
    free(v);
    return st;
}

/*
 * One parked batch of handler `h` (parked_feed.h): its events whose
 * predecessor is now done or skipped, offered to that handler only, through
 * the ledger like delivered messages, then settled (ack removes the parked
 * row). Returns how many it took; 0 when none, or the ledger failed.
 */
static size_t
sweep_parked_batch(struct outbox_consumer *c, int h)
{
    struct obx_feed *pf =
        obx_parked_feed_open(c->ledger, c->handlers[h].name, (int)c->w.cfg.ledger_lease_seconds);
    struct obx_feed_batch b = {0};
    struct obx_msg_verdict *v = NULL;
    struct obx_offer_tally tally = {0};
    outbox_error err = {0};
    size_t taken = 0;

    if (pf == NULL) {
        return 0;
    }
    obx_worker_count(&c->w, OUTBOX_CONSUMER_PARKED_TAKES, 1);
    if (pf->ops->fetch(pf, (size_t)c->w.cfg.batch_size, 0, &b, &err) != OUTBOX_OK || b.count == 0 ||
        (v = calloc(b.count, sizeof(*v))) == NULL) {
        if (err.code == OUTBOX_EUNAVAILABLE) {
            drop_ledger(c, &err);
        }
        pf->ops->batch_fini(pf, &b);
        pf->ops->close(pf);
        return 0;
    }
    taken = b.count;
    if (c->hooks.crash_after_parked_take) {
        obx_log(OUTBOX_LOG_ERROR, "crashing on purpose after a parked take consumer=%s taken=%zu",
                c->w.name, taken);
        abort();
    }
    set_handling(c, 1); /* handlers run: a stop waits for them as for a fetched batch */
    read_envelopes(c, &b, v);
    {
        struct obx_offer_env env = {.ledger = c->ledger,
                                    .feed = pf,
                                    .cfg = &c->w.cfg,
                                    .jitter_seed = &c->jitter_seed,
                                    .keeper = c->keeper};

        if (obx_consumer_offer(&env, &c->handlers[h], &b, v, &tally, &err) != OUTBOX_OK) {
            redeliver_all(&b, v); /* the parked rows stay; their lease runs out */
            if (err.code == OUTBOX_EUNAVAILABLE) {
                drop_ledger(c, &err);
            }
            taken = 0;
        }
    }
    set_handling(c, 0);
    add_tally(c, h, &tally);
    if (taken > 0 && settle(pf, &b, v, &err) != OUTBOX_OK && err.code == OUTBOX_EUNAVAILABLE) {
        drop_ledger(c, &err);
        taken = 0;
    }
    for (size_t i = 0; i < b.count; i++) {
        obx_envelope_fini(&v[i].env);
    }
    free(v);
    pf->ops->batch_fini(pf, &b);
    pf->ops->close(pf);
    return taken;
}

/*
 * Which handlers have parked events to take (waiting[h]), by one probe for
 * all of them, read fresh at each sweep: a view kept from an earlier look
 * (the gauges' sample) could miss an event another replica parked since,
 * and leave it to wait for the next look. If the probe fails otherwise
 * than by a lost connection, every handler is swept, as without it.
 */
static void
parked_waiting(struct outbox_consumer *c, int *waiting)
{
    const char *names[OBX_MAX_HANDLERS];
    outbox_error err = {0};

    for (int h = 0; h < c->handler_count; h++) {
        names[h] = c->handlers[h].name;
    }
    if (obx_ledger_parked_waiting(c->ledger, names, (size_t)c->handler_count, waiting, &err) ==
        OUTBOX_OK) {
        return;
    }
    if (err.code == OUTBOX_EUNAVAILABLE) {
        drop_ledger(c, &err);
        return;
    }
    for (int h = 0; h < c->handler_count; h++) {
        waiting[h] = 1;
    }
}

/*
 * Parked events run as soon as their predecessor is done, by whichever
 * replica finishes it: after a batch with ordered events (its done marks
 * are committed by now), and every PARK_SWEEP_EVERY_MS, for a replica that
 * died between a done mark and its sweep. Only handlers with parked events
 * are taken from: a schema without ordering costs one probe a second.
 * Each handler's ready events are taken batch after batch, since running
 * one readies the next.
 */
static void
maybe_sweep_parked(struct outbox_consumer *c, int after_ordered)
{
    long long now = obx_monotonic_ms();
    int waiting[OBX_MAX_HANDLERS] = {0};

    if (!after_ordered && now < c->next_sweep_ms) {
        return;
    }
    c->next_sweep_ms = now + PARK_SWEEP_EVERY_MS;
    parked_waiting(c, waiting);
    for (int h = 0; h < c->handler_count; h++) {
        for (int round = 0;
             waiting[h] && round < PARK_SWEEP_ROUNDS && c->db.up && !obx_worker_stopping(&c->w);
             round++) {
            if (sweep_parked_batch(c, h) == 0) {
                break;
            }
        }
    }
}

static void
run_loop(struct outbox_consumer *c)
{
    while (!obx_worker_stopping(&c->w)) {
        struct obx_feed_batch batch = {0};
        outbox_error err = {0};

        if (!ensure_ledger(c)) {
            continue;
        }
        maybe_sweep_parked(c, 0); /* parked events need no broker: they run while it is away */
        if (!ensure_feed(c)) {
            continue;
        }
        maybe_register_handlers(c);
        if (c->feed->ops->fetch(c->feed, (size_t)c->w.cfg.batch_size, c->w.cfg.poll_max_ms, &batch,
                                &err) != OUTBOX_OK) {
            feed_down(c, &err);
            obx_worker_link_wait(&c->w, &c->feed_link);
            continue;
        }
        obx_worker_link_up(&c->w, &c->feed_link, "available", NULL);
        c->batch_ordered = 0;
        if (batch.count > 0 && handle_batch(c, &batch, &err) != OUTBOX_OK &&
            err.code == OUTBOX_EUNAVAILABLE) {
            feed_down(c, &err); /* unsettled messages come back after ack_wait or the lease */
        }
        c->feed->ops->batch_fini(c->feed, &batch);
        if (c->batch_ordered > 0 && c->db.up) {
            maybe_sweep_parked(c, 1);
        }
    }
}

/*
 * External handlers run between a committed claim and its done mark, so
 * their claims must be renewed while they run (claim_keeper.h); the
 * transactional ones hold theirs in the open transaction.
 */
static void
start_keeper(struct outbox_consumer *c)
{
    struct obx_store_options so = {.conninfo = c->w.cfg.database_url,
                                   .schema = c->w.cfg.schema,
                                   .application_name = "outboxd-claim-keeper"};

    for (int h = 0; h < c->handler_count; h++) {
        if (obx_handler_is_external(&c->handlers[h])) {
            c->keeper = obx_claim_keeper_start(&so);
            return;
        }
    }
}

outbox_status
outbox_consumer_new(const outbox_config *cfg, outbox_consumer **out, outbox_error *err)
{
    struct outbox_consumer *c;
    outbox_status st;

    obx_error_reset(err);
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "consumer: out of memory");
    }
    st = obx_worker_init(&c->w, "consumer", OBX_FOR_CONSUMER, OBX_CONSUMER_STAT_COUNT,
                         OBX_CONSUMER_HISTOGRAM_COUNT, cfg, obx_consumer_config_check, err);
    if (st != OUTBOX_OK) {
        outbox_consumer_free(c);
        return st;
    }
    c->db = (struct obx_worker_link){.what = "database", .stat_up = OUTBOX_CONSUMER_DATABASE_UP};
    c->feed_link = (struct obx_worker_link){.what = "feed", .stat_up = OUTBOX_CONSUMER_BROKER_UP};
    /* Replicas started together must not draw the same retry delays. */
    c->jitter_seed =
        (unsigned int)getpid() ^ (unsigned int)obx_monotonic_ms() ^ (unsigned int)(uintptr_t)c;
    *out = c;
    return OUTBOX_OK;
}

void
outbox_consumer_free(outbox_consumer *c)
{
    if (c == NULL) {
        return;
    }
    obx_ledger_close(c->ledger);
    if (c->feed != NULL) {
        c->feed->ops->close(c->feed);
    }
    for (int i = 0; i < c->handler_count; i++) {
        free(c->handlers[i].filter);
        free(c->handlers[i].statement);
        free(c->handlers[i].owned_ctx);
    }
    obx_worker_fini(&c->w);
    free(c);
}

outbox_status
outbox_consumer_run(outbox_consumer *c, outbox_error *err)
{
    int upkeep_rc;

    obx_error_reset(err);
    if (c->handler_count == 0) {
        return obx_fail(err, OUTBOX_EINVAL, "consumer has no handlers");
    }
    obx_log(OUTBOX_LOG_INFO, "consumer starting consumer=%s bus=%s handlers=%d batch_size=%lld",
            c->w.name, c->w.cfg.bus == OUTBOX_BUS_DB ? "db" : "jetstream", c->handler_count,
            c->w.cfg.batch_size);
    start_keeper(c);
    upkeep_rc = obx_consumer_upkeep_start(&c->upkeep, c);
    if (upkeep_rc != 0) {
        obx_log(OUTBOX_LOG_ERROR, "cannot start the upkeep thread consumer=%s errno=%d", c->w.name,
                upkeep_rc);
    }
    run_loop(c);
    obx_consumer_upkeep_stop(&c->upkeep); /* a pass in progress ends at its next batch */
    if (c->hooks.stall_on_stop_ms > 0) {
        obx_log(OUTBOX_LOG_INFO, "stalling on stop on purpose consumer=%s ms=%d", c->w.name,
                c->hooks.stall_on_stop_ms);
        obx_sleep_ms(c->hooks.stall_on_stop_ms);
    }
    obx_claim_keeper_stop(c->keeper);
    c->keeper = NULL;
    obx_ledger_close(c->ledger);
    c->ledger = NULL;
    c->db.up = 0;
    if (c->feed != NULL) {
        c->feed->ops->close(c->feed);
        c->feed = NULL;
    }
    obx_log(OUTBOX_LOG_INFO, "consumer stopped consumer=%s", c->w.name);
    return OUTBOX_OK;
}

void
outbox_consumer_stop(outbox_consumer *c)
{
    obx_worker_request_stop(&c->w);
}

int
outbox_consumer_handling(outbox_consumer *c)
{
    int on;

    pthread_mutex_lock(&c->w.stats_lock);
    on = c->handling;
    pthread_mutex_unlock(&c->w.stats_lock);
    return on;
}

unsigned long long
outbox_consumer_stat(outbox_consumer *c, outbox_consumer_stat_id id)
{
    return obx_worker_stat(&c->w, (int)id);
}

size_t
outbox_consumer_histogram(outbox_consumer *c, outbox_consumer_histogram_id id,
                          unsigned long long *counts, size_t cap, double *sum_seconds)
{
    return obx_worker_histogram(&c->w, (int)id, counts, cap, sum_seconds);
}

unsigned long long
outbox_consumer_handler_stat(outbox_consumer *c, const char *handler, outbox_handler_stat_id id)
{
    unsigned long long v = 0;

    if (handler == NULL || (unsigned)id >= OBX_HANDLER_STAT_COUNT) {
        return 0;
    }
    for (int h = 0; h < c->handler_count; h++) {
        if (strcmp(c->handlers[h].name, handler) == 0) {
            pthread_mutex_lock(&c->w.stats_lock);
            v = c->handler_stats[h][id];
            pthread_mutex_unlock(&c->w.stats_lock);
            return v;
        }
    }
    pthread_mutex_lock(&c->w.stats_lock);
    for (size_t i = 0; i < c->other_count; i++) {
        const struct obx_handler_gauges *g = &c->others[i].gauges;

        if (strcmp(c->others[i].name, handler) != 0) {
            continue;
        }
        v = id == OUTBOX_HANDLER_DEAD_LETTERS ? (unsigned long long)g->dead_letters
            : id == OUTBOX_HANDLER_PARKED     ? (unsigned long long)g->parked
            : id == OUTBOX_HANDLER_OLDEST_PARKED_SECONDS
                ? (unsigned long long)g->oldest_parked_seconds
                : 0;
    }
    pthread_mutex_unlock(&c->w.stats_lock);
    return v;
}

const char *
outbox_consumer_ledger_handler(outbox_consumer *c, size_t i, char *buf, size_t cap)
{
    const char *name = NULL;

    if (buf == NULL || cap == 0) {
        return NULL;
    }
    pthread_mutex_lock(&c->w.stats_lock);
    if (i < c->other_count) {
        snprintf(buf, cap, "%s", c->others[i].name);
        name = buf;
    }
    pthread_mutex_unlock(&c->w.stats_lock);
    return name;
}
