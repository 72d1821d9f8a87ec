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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer_internal.h"
#include "error.h"
#include "log.h"
#include "pause.h"
#include "store.h"

#include "banned.h" /* last: poisons unsafe functions */

enum {
    MAINTENANCE_EVERY_MS = 5 * 60 * 1000,
    PRUNE_BATCH_ROWS = 1000,
    PRUNE_BATCHES_PER_PASS = 20,
};

void
obx_consumer_count(struct outbox_consumer *c, unsigned long long *counter, unsigned long long n)
{
    pthread_mutex_lock(&c->stats_lock);
    *counter += n;
    pthread_mutex_unlock(&c->stats_lock);
}

static void
set_flag(struct outbox_consumer *c, int *flag, int up)
{
    pthread_mutex_lock(&c->stats_lock);
    *flag = up;
    pthread_mutex_unlock(&c->stats_lock);
}

void
obx_verdict_nak(struct obx_msg_verdict *v, long long delay_ms)
{
    if (!v->nak || delay_ms < v->nak_delay_ms) {
        v->nak_delay_ms = delay_ms;
    }
    v->nak = 1;
}

static void
drop_ledger(struct outbox_consumer *c, const outbox_error *why)
{
    obx_ledger_close(c->ledger);
    c->ledger = NULL;
    if (c->stats.database_up) {
        obx_log(OUTBOX_LOG_WARN, "database unavailable consumer=%s error=\"%s\"", c->opts.name,
                why->message);
        set_flag(c, &c->stats.database_up, 0);
    }
}

/*
 * The feed's server is away. The feed reconnects by itself on its next
 * call, so it is kept (closing it would strand the batch in hand); the
 * loop only records the state change and pauses.
 */
static void
feed_down(struct outbox_consumer *c, const outbox_error *why)
{
    if (c->stats.broker_up) {
        obx_log(OUTBOX_LOG_WARN, "feed unavailable consumer=%s error=\"%s\"", c->opts.name,
                why->message);
        set_flag(c, &c->stats.broker_up, 0);
    }
    c->bus_pause_ms = obx_grow_pause(c->bus_pause_ms);
}

static void
feed_up(struct outbox_consumer *c)
{
    if (!c->stats.broker_up) {
        obx_log(OUTBOX_LOG_INFO, "feed available consumer=%s", c->opts.name);
        set_flag(c, &c->stats.broker_up, 1);
    }
    c->bus_pause_ms = 0;
}

static int
ensure_ledger(struct outbox_consumer *c)
{
    struct obx_store_options so = {.conninfo = c->opts.database_url,
                                   .schema = c->opts.schema,
                                   .application_name = "outboxd-consumer"};
    outbox_error err = {0};

    if (c->ledger != NULL) {
        return 1;
    }
    if (obx_ledger_open(&so, &c->ledger, &err) == OUTBOX_OK) {
        obx_log(OUTBOX_LOG_INFO, "database connected consumer=%s schema=%s", c->opts.name,
                c->opts.schema);
        set_flag(c, &c->stats.database_up, 1);
        c->db_pause_ms = 0;
        return 1;
    }
    if (c->db_pause_ms == 0) {
        obx_log(OUTBOX_LOG_WARN, "database unavailable consumer=%s error=\"%s\"", c->opts.name,
                err.message);
    }
    c->db_pause_ms = obx_grow_pause(c->db_pause_ms);
    obx_pause_ms(&c->stop_requested, c->db_pause_ms);
    return 0;
}

static outbox_status
open_feed(struct outbox_consumer *c, outbox_error *err)
{
    const outbox_consumer_options *o = &c->opts;
    struct obx_feed_options fo = {
        .database_url = o->database_url,
        .schema = o->schema,
        .lease_seconds = o->lease_seconds,
        .prune = o->mode == OUTBOX_RELAY_PRUNE,
        .nats_url = o->nats_url,
        .stream = o->stream,
        .subject_prefix = o->subject_prefix,
        .consumer_name = o->consumer_name,
        .ack_wait_seconds = o->ack_wait_seconds,
        .max_deliver = o->max_deliver,
        /* Enough for every replica's batch in flight, with room for redeliveries. */
        .max_ack_pending = o->batch_size * 20 > 1000 ? o->batch_size * 20 : 1000,
        .name = o->name,
        .creds_file = o->nats_creds_file,
        .tls_ca_file = o->nats_tls_ca_file,
        .tls_cert_file = o->nats_tls_cert_file,
        .tls_key_file = o->nats_tls_key_file,
        /* A stream the feed creates gets the relay's settings (DESIGN.md "External contract"). */
        .stream_max_age_seconds = o->stream_max_age_seconds,
    };

    return o->bus == OUTBOX_BUS_DB ? obx_feed_db_open(&fo, &c->feed, err)
                                   : obx_feed_nats_open(&fo, &c->feed, err);
}

static int
ensure_feed(struct outbox_consumer *c)
{
    outbox_error err = {0};

    if (c->feed != NULL) {
        return 1;
    }
    if (open_feed(c, &err) == OUTBOX_OK) {
        obx_log(OUTBOX_LOG_INFO, "feed ready consumer=%s bus=%s consumer_name=%s", c->opts.name,
                c->opts.bus == OUTBOX_BUS_DB ? "db" : "jetstream", c->opts.consumer_name);
        set_flag(c, &c->stats.broker_up, 1);
        c->bus_pause_ms = 0;
        return 1;
    }
    c->feed = NULL;
    if (c->bus_pause_ms == 0) {
        obx_log(OUTBOX_LOG_WARN, "feed unavailable consumer=%s error=\"%s\"", c->opts.name,
                err.message);
    }
    c->bus_pause_ms = obx_grow_pause(c->bus_pause_ms);
    obx_pause_ms(&c->stop_requested, c->bus_pause_ms);
    return 0;
}

/*
 * Parses every envelope: the ledger is keyed by the envelope's own id, not
 * by Nats-Msg-Id, so an event republished under a new message id (a replay
 * outside the duplicate window) is still recognized as handled. A message
 * that is not a valid envelope cannot be claimed, so nothing may run it.
 */
static void
read_envelopes(struct outbox_consumer *c, const struct obx_feed_batch *b, struct obx_msg_verdict *v)
{
    for (size_t i = 0; i < b->count; i++) {
        const struct obx_feed_msg *m = &b->msgs[i];
        outbox_error err = {0};

        if (m->envelope == NULL || obx_envelope_parse(m->envelope, m->envelope_len, SIZE_MAX,
                                                      &v[i].env, &err) != OUTBOX_OK) {
            v[i].bad = 1;
            obx_log(OUTBOX_LOG_WARN,
                    "message is not a valid envelope, terminated consumer=%s message_id=%s "
                    "subject=%s reason=\"%s\"",
                    c->opts.name, m->event_id ? m->event_id : "", m->subject ? m->subject : "",
                    err.message);
            continue;
        }
        v[i].event_id = v[i].env.id;
        v[i].aggregate_id = v[i].env.aggregate_id;
    }
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
 * Every handler, in registration order; a ledger outage stops the rest for
 * this batch. An offer that failed part way may have left events it had
 * freed but not settled: the whole batch is redelivered, never acked past them.
 */
static void
offer_to_handlers(struct outbox_consumer *c, struct obx_feed_batch *b, struct obx_msg_verdict *v)
{
    for (int h = 0; h < c->handler_count; h++) {
        outbox_error err = {0};

        if (c->ledger == NULL) {
            redeliver_all(b, v);
            obx_consumer_count(c, &c->stats.ledger_errors, b->count);
            return;
        }
        if (obx_consumer_offer(c, &c->handlers[h], b, v, &err) != OUTBOX_OK) {
            redeliver_all(b, v);
            if (err.code == OUTBOX_EUNAVAILABLE) {
                drop_ledger(c, &err);
            } else {
                obx_log(OUTBOX_LOG_ERROR,
                        "ledger error consumer=%s handler=%s error=\"%s\" "
                        "sqlstate=%s",
                        c->opts.name, c->handlers[h].name, err.message, err.sqlstate);
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
settle(struct outbox_consumer *c, struct obx_feed_batch *b, const struct obx_msg_verdict *v,
       outbox_error *err)
{
    enum obx_settle *what = calloc(b->count, sizeof(*what));
    long long *delay = calloc(b->count, sizeof(*delay));
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
            delay[i] = v[i].nak_delay_ms;
        } else if (v[i].bad || (v[i].matched > 0 && v[i].dead == v[i].matched)) {
            what[i] = OBX_SETTLE_TERM;
        }
    }
    st = c->feed->ops->settle(c->feed, b, what, delay, err);
    free(what);
    free(delay);
    return st;
}

/*
 * With no relay (OUTBOX_BUS=db, mark mode) the consumers are the ones who
 * remove handled outbox rows after the retention, through a short-lived
 * store connection.
 */
static void
prune_outbox(struct outbox_consumer *c)
{
    struct obx_store_options so = {.conninfo = c->opts.database_url,
                                   .schema = c->opts.schema,
                                   .application_name = "outboxd-consumer"};
    struct obx_store *store = NULL;
    size_t deleted = PRUNE_BATCH_ROWS;
    outbox_error err = {0};

    if (c->opts.bus != OUTBOX_BUS_DB || c->opts.mode != OUTBOX_RELAY_MARK ||
        obx_store_open(&so, &store, &err) != OUTBOX_OK) {
        return;
    }
    for (int i = 0; i < PRUNE_BATCHES_PER_PASS && deleted == PRUNE_BATCH_ROWS; i++) {
        if (obx_store_prune_done(store, c->opts.retention_seconds, PRUNE_BATCH_ROWS, &deleted,
                                 &err) != OUTBOX_OK) {
            break;
        }
    }
    obx_store_close(store);
}

/* Ledger rows (and, on the DB backend, outbox rows) older than the retention go. */
static void
maybe_maintain(struct outbox_consumer *c)
{
    long long now = obx_monotonic_ms();
    size_t deleted = PRUNE_BATCH_ROWS;
    outbox_error err = {0};

    if (now < c->next_maintenance_ms || c->ledger == NULL) {
        return;
    }
    c->next_maintenance_ms = now + MAINTENANCE_EVERY_MS;
    for (int i = 0; i < PRUNE_BATCHES_PER_PASS && deleted == PRUNE_BATCH_ROWS; i++) {
        if (obx_ledger_prune(c->ledger, c->opts.ledger_retention_seconds, PRUNE_BATCH_ROWS,
                             &deleted, &err) != OUTBOX_OK) {
            if (err.code == OUTBOX_EUNAVAILABLE) {
                drop_ledger(c, &err);
            }
            return;
        }
    }
    prune_outbox(c);
}

/*
 * FAULTS T07: a replica killed after its ledger commit and before its acks.
 * The redelivery must find every handled event done and run nothing twice.
 */
static void
crash_if_asked(struct outbox_consumer *c)
{
    outbox_consumer_stats st;

    outbox_consumer_stats_get(c, &st);
    if (c->opts.crash_after_ledger_commit && st.handled > 0) {
        obx_log(OUTBOX_LOG_ERROR, "crashing on purpose after the ledger commit consumer=%s",
                c->opts.name);
        abort();
    }
}

/* Handles and settles one batch; returns settle's status (OUTBOX_OK if it never came to it). */
static outbox_status
handle_batch(struct outbox_consumer *c, struct obx_feed_batch *b, outbox_error *err)
{
    struct obx_msg_verdict *v = calloc(b->count, sizeof(*v));
    outbox_status st;

    if (v == NULL) {
        return OUTBOX_OK; /* redelivered after ack_wait */
    }
    obx_consumer_count(c, &c->stats.fetched, b->count);
    read_envelopes(c, b, v);
    offer_to_handlers(c, b, v);
    crash_if_asked(c);
    st = settle(c, b, v, err);
    for (size_t i = 0; i < b->count; i++) {
        obx_envelope_fini(&v[i].env);
    }
    free(v);
    return st;
}

static void
run_loop(struct outbox_consumer *c)
{
    while (!c->stop_requested) {
        struct obx_feed_batch batch = {0};
        outbox_error err = {0};

        if (!ensure_ledger(c) || !ensure_feed(c)) {
            continue;
        }
        maybe_maintain(c);
        if (c->feed->ops->fetch(c->feed, (size_t)c->opts.batch_size, c->opts.poll_max_ms, &batch,
                                &err) != OUTBOX_OK) {
            feed_down(c, &err);
            obx_pause_ms(&c->stop_requested, c->bus_pause_ms);
            continue;
        }
        feed_up(c);
        if (batch.count > 0 && handle_batch(c, &batch, &err) != OUTBOX_OK &&
            err.code == OUTBOX_EUNAVAILABLE) {
            feed_down(c, &err); /* unsettled messages come back after ack_wait or the lease */
        }
        c->feed->ops->batch_fini(c->feed, &batch);
    }
}

outbox_status
outbox_consumer_new(const outbox_consumer_options *opts, outbox_consumer **out, outbox_error *err)
{
    struct outbox_consumer *c;
    outbox_status st;

    obx_error_reset(err);
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "consumer: out of memory");
    }
    st = obx_consumer_options_adopt(c, opts, err);
    if (st != OUTBOX_OK) {
        obx_owned_strings_fini(&c->owned);
        free(c);
        return st;
    }
    pthread_mutex_init(&c->stats_lock, NULL);
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
    }
    obx_owned_strings_fini(&c->owned);
    pthread_mutex_destroy(&c->stats_lock);
    free(c);
}

outbox_status
outbox_consumer_run(outbox_consumer *c, outbox_error *err)
{
    obx_error_reset(err);
    if (c->handler_count == 0) {
        return obx_fail(err, OUTBOX_EINVAL, "consumer has no handlers");
    }
    obx_log(OUTBOX_LOG_INFO, "consumer starting consumer=%s bus=%s handlers=%d batch_size=%d",
            c->opts.name, c->opts.bus == OUTBOX_BUS_DB ? "db" : "jetstream", c->handler_count,
            c->opts.batch_size);
    run_loop(c);
    obx_ledger_close(c->ledger);
    c->ledger = NULL;
    if (c->feed != NULL) {
        c->feed->ops->close(c->feed);
        c->feed = NULL;
    }
    obx_log(OUTBOX_LOG_INFO, "consumer stopped consumer=%s", c->opts.name);
    return OUTBOX_OK;
}

void
outbox_consumer_stop(outbox_consumer *c)
{
    c->stop_requested = 1;
}

void
outbox_consumer_stats_get(outbox_consumer *c, outbox_consumer_stats *out)
{
    pthread_mutex_lock(&c->stats_lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->stats_lock);
}

const char *
outbox_delivery_event_id(const outbox_delivery *d)
{
    return d->event_id;
}

const char *
outbox_delivery_subject(const outbox_delivery *d)
{
    return d->msg->subject;
}

const char *
outbox_delivery_envelope(const outbox_delivery *d, size_t *len)
{
    if (len != NULL) {
        *len = d->msg->envelope_len;
    }
    return d->msg->envelope;
}

int
outbox_delivery_attempts(const outbox_delivery *d)
{
    return d->attempts;
}
