/* SPDX-License-Identifier: MIT */
/*
 * relay.c - the relay loop: lease -> publish -> (lease next while acks
 * are in flight) -> collect -> finish.
 *
 * No SQL text and no nats.c types here: the store and the bus do the I/O.
 * The lease is committed before anything is published, and no transaction
 * is ever open across a publish. Outages are states, not errors: the loop
 * pauses with a growing delay, logs once per change, and resumes by itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/stream.h"
#include "common/error.h"
#include "relay_batch.h"
#include "relay_internal.h"
#include "support/log.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    POLL_MIN_MS = 5, /* idle poll right after work, growing to poll_max_ms */
};

static double
seconds_since(double started)
{
    return obx_monotonic_seconds() - started;
}

/* The store's connection broke: the next turn reconnects it. */
static void
drop_store(struct outbox_relay *relay, const outbox_error *why)
{
    obx_worker_link_down(&relay->w, &relay->db, why->message);
}

static int
ensure_store(struct outbox_relay *relay)
{
    struct obx_store_options so = {
        .conninfo = relay->w.cfg.database_url,
        .schema = relay->w.cfg.schema,
        .application_name = "outboxd-relay",
        .holder = relay->w.name, /* which replica holds a claim, in relay_claims */
    };
    outbox_error err = {0};
    outbox_status st;
    char detail[96];

    if (relay->db.up) {
        return 1;
    }
    /* Opened once; after that the same store (its statements rendered for the schema)
     * only reconnects. */
    st = relay->store == NULL ? obx_store_open(&so, &relay->store, &err)
                              : obx_store_reconnect(relay->store, &err);
    if (st == OUTBOX_OK) {
        obx_store_use_row_leases(relay->store, relay->two_writes);
    }
    if (st == OUTBOX_OK &&
        (!relay->w.cfg.listen || obx_store_listen(relay->store, &err) == OUTBOX_OK)) {
        obx_logfmt_format(detail, sizeof(detail), "schema=%s", relay->w.cfg.schema);
        obx_worker_link_up(&relay->w, &relay->db, "connected", detail);
        return 1;
    }
    obx_worker_link_down(&relay->w, &relay->db, err.message);
    obx_worker_link_wait(&relay->w, &relay->db);
    return 0;
}

static outbox_status
open_bus(struct outbox_relay *relay, outbox_error *err)
{
    const struct obx_config *o = &relay->w.cfg;
    struct obx_bus_options bo;

    obx_bus_options_from_config(&bo, o, relay->w.name);
    return obx_bus_open(&bo, &relay->bus, err);
}

static outbox_status
ensure_stream(struct outbox_relay *relay, outbox_error *err)
{
    struct obx_stream_options so;

    if (relay->stream_ready || relay->w.cfg.bus != OUTBOX_BUS_JETSTREAM) {
        return OUTBOX_OK;
    }
    obx_stream_options_init(&so);
    so.name = relay->w.cfg.stream;
    so.subjects_prefix = relay->w.cfg.subject_prefix;
    so.max_age_seconds = relay->w.cfg.stream_max_age_seconds;
    so.max_bytes = relay->w.cfg.stream_max_bytes;
    so.replicas = (int)relay->w.cfg.stream_replicas;
    so.duplicate_window_seconds = relay->w.cfg.duplicate_window_seconds;
    if (obx_stream_ensure(relay->bus, &so, err) != OUTBOX_OK) {
        return err->code;
    }
    relay->stream_ready = 1;
    obx_log(OUTBOX_LOG_INFO, "stream ready relay=%s stream=%s subjects=%s.>", relay->w.name,
            relay->w.cfg.stream, relay->w.cfg.subject_prefix);
    return OUTBOX_OK;
}

/*
 * The broker failed us: logged once per outage, and the next pause is
 * longer - up to OBX_PAUSE_MAX_MS while the connection itself is lost
 * (nats.c reconnects meanwhile), but at most OBX_PAUSE_CONNECTED_MAX_MS
 * while it stands (a cluster electing the stream's leader; see pause.h).
 */
static void
broker_failing(struct outbox_relay *relay, const char *why)
{
    obx_worker_link_down(&relay->w, &relay->broker, why);
    if (relay->bus != NULL && obx_bus_is_connected(relay->bus) &&
        relay->broker.pause_ms > OBX_PAUSE_CONNECTED_MAX_MS) {
        relay->broker.pause_ms = OBX_PAUSE_CONNECTED_MAX_MS;
    }
    /* A stream lost with the server's store is made again once the broker answers. */
    relay->stream_ready = 0;
}

/*
 * The broker looks usable: connected, and for JetStream the stream checked.
 * After a failed publish, a connection that is merely still open does not
 * count as recovered: only a publish that lands resets the pause, so a
 * broker that accepts connections but refuses publishes is retried on the
 * growing pause, not every few milliseconds.
 */
static int
ensure_bus(struct outbox_relay *relay)
{
    outbox_error err = {0};
    outbox_status st = OUTBOX_OK;

    if (relay->bus == NULL) {
        st = open_bus(relay, &err);
    }
    if (st == OUTBOX_OK && !obx_bus_is_connected(relay->bus)) {
        st = obx_fail(&err, OUTBOX_EUNAVAILABLE, "reconnecting");
    }
    if (st == OUTBOX_OK) {
        st = ensure_stream(relay, &err);
    }
    if (st != OUTBOX_OK) {
        broker_failing(relay, err.message);
        return 0;
    }
    /* Connected and the stream checked: the broker answers, so the relay is ready even with
     * nothing to publish; the pause stands until a publish lands (publish_batch). */
    obx_worker_link_answers(&relay->w, &relay->broker, "connected", NULL);
    return 1;
}

/* Leases a batch; an empty lease on any failure (the store is dropped if it broke). */
static void
lease_batch(struct outbox_relay *relay, struct obx_lease *lease)
{
    outbox_error err = {0};
    double started;
    outbox_status st;

    memset(lease, 0, sizeof(*lease));
    if (!relay->db.up) {
        return;
    }
    started = obx_monotonic_seconds();
    st = obx_store_lease(relay->store, relay->w.cfg.batch_size, relay->w.cfg.lease_seconds,
                         relay->w.cfg.max_lease_expiries, lease, &err);
    obx_worker_observe(&relay->w, OUTBOX_RELAY_LEASE_SECONDS, seconds_since(started));
    if (st != OUTBOX_OK) {
        memset(lease, 0, sizeof(*lease));
        if (err.code == OUTBOX_EUNAVAILABLE) {
            drop_store(relay, &err);
        } else {
            obx_log(OUTBOX_LOG_ERROR, "lease failed relay=%s error=\"%s\" sqlstate=%s",
                    relay->w.name, err.message, err.sqlstate);
        }
        return;
    }
    if (lease->count > 0) {
        obx_log(OUTBOX_LOG_DEBUG, "lease batch relay=%s rows=%zu lease_token=%s", relay->w.name,
                lease->count, lease->token);
    }
    /* The store logs each quarantined row with its event id. */
    obx_worker_count(&relay->w, OUTBOX_RELAY_DEAD, (unsigned long long)lease->quarantined);
    obx_worker_count(&relay->w, OUTBOX_RELAY_LEASE_EXPIRIES, (unsigned long long)lease->taken_over);
    obx_worker_count(&relay->w, OUTBOX_RELAY_LEASED, lease->count);
}

/* Rows published that the stream already had: JetStream deduplicated them. */
static size_t
batch_duplicates(const struct obx_relay_batch *b)
{
    size_t duplicates = 0;

    for (size_t i = 0; i < b->count; i++) {
        duplicates += b->rows[i].outcome == OBX_ROW_DONE && b->rows[i].duplicate;
    }
    return duplicates;
}

static void
count_outcomes(struct outbox_relay *relay, const struct obx_relay_batch *b,
               const struct obx_finish_counts *c, size_t duplicates)
{
    const struct obx_worker_add adds[] = {
        {OUTBOX_RELAY_PUBLISHED, c->done},
        {OUTBOX_RELAY_DUPLICATES, duplicates},
        {OUTBOX_RELAY_RETRIED, c->retried},
        {OUTBOX_RELAY_DEAD, c->dead},
        {OUTBOX_RELAY_INVALID, c->invalid},
        {OUTBOX_RELAY_RELEASED, c->released},
        {OUTBOX_RELAY_LOST, c->lost},
        {OUTBOX_RELAY_BATCHES, c->released < b->count}, /* a batch only handed back is not one */
    };

    obx_worker_count_all(&relay->w, adds, sizeof(adds) / sizeof(adds[0]));
}

/* Logs what an operator must see: quarantined rows and lost leases. */
static void
log_outcomes(struct outbox_relay *relay, const struct obx_lease *lease,
             const struct obx_relay_batch *b, const struct obx_finish_counts *c, size_t duplicates)
{
    for (size_t i = 0; i < b->count; i++) {
        if (b->rows[i].outcome == OBX_ROW_INVALID) {
            obx_log(OUTBOX_LOG_WARN,
                    "row quarantined as invalid relay=%s event_id=%s reason=\"%s\"", relay->w.name,
                    obx_lease_id(lease, i), b->rows[i].reason);
        } else if (b->rows[i].outcome == OBX_ROW_RETRY) {
            obx_log(OUTBOX_LOG_INFO,
                    "publish rejected relay=%s event_id=%s attempts=%d reason=\"%s\"",
                    relay->w.name, obx_lease_id(lease, i), obx_lease_attempts(lease, i) + 1,
                    b->rows[i].reason);
        }
    }
    if (duplicates > 0) {
        /* A lease that ran out after its publish (a crashed or stalled relay). */
        obx_log(OUTBOX_LOG_INFO, "published again rows the stream already had relay=%s rows=%zu",
                relay->w.name, duplicates);
    }
    if (c->dead > 0) {
        obx_log(OUTBOX_LOG_WARN, "rows dead-lettered after max attempts relay=%s rows=%zu",
                relay->w.name, c->dead);
    }
    if (c->lost > 0) {
        obx_log(OUTBOX_LOG_WARN, "lease lost before finish relay=%s rows=%zu", relay->w.name,
                c->lost);
    }
}

/*
 * After a lost connection, reconnects until `deadline_ms` (monotonic).
 * Returns 1 with a store, 0 when time ran out or a stop was requested.
 */
static int
reconnect_until(struct outbox_relay *relay, long long deadline_ms)
{
    while (!obx_worker_stopping(&relay->w) && obx_monotonic_ms() < deadline_ms) {
        if (ensure_store(relay)) {
            return 1;
        }
    }
    return relay->db.up;
}

static outbox_status
finish_once(struct outbox_relay *relay, const struct obx_lease *lease,
            const struct obx_relay_batch *b, const struct obx_finish_options *fo,
            struct obx_finish_counts *counts, outbox_error *err)
{
    double started;
    outbox_status st;

    memset(counts, 0, sizeof(*counts));
    obx_error_reset(err);
    if (!relay->db.up) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "no database connection");
    }
    started = obx_monotonic_seconds();
    st = obx_store_finish(relay->store, lease, b->outcomes, b->reasons, fo, counts, err);
    obx_worker_observe(&relay->w, OUTBOX_RELAY_FINISH_SECONDS, seconds_since(started));
    return st;
}

/*
 * Writes the outcomes of a batch. The finish is one statement guarded by
 * the lease token, so after a lost connection it is retried as is while
 * the lease still holds: rows already published must not fall back to
 * their lease expiry, which would count against them. Rows a lost commit
 * already finished come back as `lost`.
 */
static void
finish_batch(struct outbox_relay *relay, const struct obx_lease *lease, struct obx_relay_batch *b,
             int release_delay_ms)
{
    struct obx_finish_options fo = {
        .mode = relay->w.cfg.relay_mode == OUTBOX_RELAY_PRUNE ? OBX_FINISH_PRUNE : OBX_FINISH_MARK,
        .max_attempts = relay->w.cfg.max_attempts,
        .release_delay_ms = release_delay_ms,
        .backoff_base_ms = relay->w.cfg.backoff_base_ms,
        .backoff_cap_ms = relay->w.cfg.backoff_cap_ms,
        .stream_seqs = b->stream_seqs,
    };
    /* Leave a margin: a retry that lands after the lease ends changes nothing anyway. */
    long long deadline_ms = obx_monotonic_ms() + (long long)relay->w.cfg.lease_seconds * 1000 / 2;
    struct obx_finish_counts counts;
    outbox_error err = {0};
    outbox_status st;
    size_t duplicates;

    if (lease->count == 0) {
        return;
    }
    st = finish_once(relay, lease, b, &fo, &counts, &err);
    while (st == OUTBOX_EUNAVAILABLE) {
        drop_store(relay, &err);
        if (!reconnect_until(relay, deadline_ms)) {
            return; /* the rows fall back to their lease expiry */
        }
        st = finish_once(relay, lease, b, &fo, &counts, &err);
    }
    if (st != OUTBOX_OK) {
        obx_log(OUTBOX_LOG_ERROR, "finish failed relay=%s error=\"%s\" sqlstate=%s", relay->w.name,
                err.message, err.sqlstate);
        return;
    }
    duplicates = batch_duplicates(b);
    count_outcomes(relay, b, &counts, duplicates);
    log_outcomes(relay, lease, b, &counts, duplicates);
}

/* Hands a leased but unpublished batch back at once (stop, or the broker is gone). */
static void
release_lease(struct outbox_relay *relay, const struct obx_lease *lease, int delay_ms,
              const char *reason)
{
    struct obx_relay_batch b;
    outbox_error err = {0};

    if (lease->count == 0) {
        return;
    }
    if (obx_relay_batch_prepare(&b, lease, relay->w.cfg.subject_prefix, SIZE_MAX, &err) !=
        OUTBOX_OK) {
        return; /* out of memory: the lease expires by itself */
    }
    obx_relay_batch_set_all(&b, OBX_ROW_RELEASE, reason);
    finish_batch(relay, lease, &b, delay_ms);
    obx_relay_batch_fini(&b);
}

/* The reason of the first message the broker could not take (an outage), or NULL. */
static const char *
first_unavailable(const struct obx_relay_batch *b)
{
    for (size_t k = 0; k < b->msg_count; k++) {
        if (b->results[k].outcome == OBX_PUBLISH_UNAVAILABLE) {
            return b->results[k].reason;
        }
    }
    return NULL;
}

/*
 * The crash-loop test's poison row (FAULTS T10): a relay that leases an
 * event of this type dies before it can finish, as if the row crashed it.
 */
static void
crash_if_asked(struct outbox_relay *relay, const struct obx_relay_batch *b)
{
    const char *poison = relay->hooks.crash_on_event_type;

    for (size_t i = 0; poison[0] != '\0' && i < b->count; i++) {
        if (b->rows[i].env.head.event_type != NULL &&
            strcmp(b->rows[i].env.head.event_type, poison) == 0) {
            obx_log(OUTBOX_LOG_ERROR, "crashing on purpose relay=%s event_type=%s", relay->w.name,
                    poison);
            abort();
        }
    }
}

/*
 * The republish test's hook (FAULTS T05's worst moment): the broker has
 * stored a batch the database does not know is published. It fires on the
 * Nth batch with a first-time ack, so the republish of a crashed batch
 * (all duplicates) is finished and the run moves on, and rows leased
 * ahead when it fires rarely lose a lease twice.
 */
static void
crash_after_publish_if_asked(struct outbox_relay *relay, const struct obx_relay_batch *b)
{
    for (size_t k = 0; relay->hooks.crash_after_publish > 0 && k < b->msg_count; k++) {
        if (b->results[k].outcome == OBX_PUBLISH_OK && !b->results[k].duplicate) {
            if (++relay->fresh_batches == relay->hooks.crash_after_publish) {
                obx_log(OUTBOX_LOG_ERROR, "crashing on purpose after publish relay=%s",
                        relay->w.name);
                abort();
            }
            return;
        }
    }
}

/*
 * Publishes `cur`, leasing `next` while its acks are in flight, then
 * finishes `cur`. Returns 1 when the broker failed the batch for a
 * transport reason (the caller pauses).
 */
static int
publish_batch(struct outbox_relay *relay, const struct obx_lease *cur, struct obx_lease *next)
{
    size_t max_body = obx_bus_body_limit(obx_bus_max_payload(relay->bus));
    struct obx_relay_batch b;
    outbox_error err = {0};
    int transport_failed = 0;
    char why[256] = "publish failed";
    double started;
    size_t granted = 0;

    memset(next, 0, sizeof(*next));
    if (obx_relay_batch_prepare(&b, cur, relay->w.cfg.subject_prefix, max_body, &err) !=
        OUTBOX_OK) {
        return 0; /* out of memory: the lease expires and another turn retries */
    }
    crash_if_asked(relay, &b);
    if (b.msg_count > 0 && relay->gate.acquire != NULL) {
        granted = relay->gate.acquire(relay->gate.ctx, b.msg_count, &relay->w.stop_requested);
        if (granted == 0) { /* stopped while waiting for room: the rows go back at once */
            obx_relay_batch_set_all(&b, OBX_ROW_RELEASE, "relay stopping");
            finish_batch(relay, cur, &b, 0);
            obx_relay_batch_fini(&b);
            return 0;
        }
    }
    started = obx_monotonic_seconds();
    if (b.msg_count > 0 && obx_bus_send(relay->bus, b.msgs, b.msg_count, &err) != OUTBOX_OK) {
        obx_log(OUTBOX_LOG_ERROR, "publish failed relay=%s error=\"%s\"", relay->w.name,
                err.message);
        obx_relay_batch_set_all(&b, OBX_ROW_RELEASE, err.message);
        transport_failed = 1;
    } else {
        if (!obx_worker_stopping(&relay->w)) {
            lease_batch(relay, next); /* overlaps with the acks of `cur` */
        }
        if (b.msg_count > 0) {
            obx_bus_collect(relay->bus, b.results, b.msg_count, &err);
            obx_worker_observe(&relay->w, OUTBOX_RELAY_PUBLISH_SECONDS, seconds_since(started));
        }
        obx_relay_batch_apply_results(&b);
        if (first_unavailable(&b) != NULL) {
            /* Named in the log: an election's "no responders" reads unlike a lost server. */
            snprintf(why, sizeof(why), "publish failed: %s", first_unavailable(&b));
            transport_failed = 1;
        }
        crash_after_publish_if_asked(relay, &b);
    }
    if (granted > 0) {
        relay->gate.release(relay->gate.ctx, granted); /* every ack is in, or never will be */
    }
    if (transport_failed) {
        broker_failing(relay, why);
    } else if (b.msg_count > 0) {
        obx_worker_link_up(&relay->w, &relay->broker, "connected", NULL);
    }
    finish_batch(relay, cur, &b, transport_failed ? relay->broker.pause_ms : 0);
    obx_relay_batch_fini(&b);
    return transport_failed;
}

/* Nothing was due: wait for a wake-up or the next poll, whichever comes first. */
static void
wait_for_work(struct outbox_relay *relay, int idle_ms)
{
    outbox_error err = {0};
    int woken = 0;

    if (relay->w.cfg.listen && relay->db.up) {
        if (obx_store_wait(relay->store, idle_ms, &woken, &err) != OUTBOX_OK &&
            err.code == OUTBOX_EUNAVAILABLE) {
            drop_store(relay, &err);
        }
        return;
    }
    obx_pause_ms(&relay->w.stop_requested, idle_ms);
}

static void
run_loop(struct outbox_relay *relay)
{
    struct obx_lease cur = {0}, next = {0};
    int idle_ms = POLL_MIN_MS;
    /* The lease made while the last batch's acks were in flight found nothing due. */
    int found_nothing = 0;

    while (!obx_worker_stopping(&relay->w)) {
        if (!ensure_store(relay)) {
            continue;
        }
        if (!ensure_bus(relay)) {
            /* A batch leased before the broker went away goes back, deferred, rather than
             * wait out the outage under a lease that would expire and count against it. */
            release_lease(relay, &cur, relay->broker.pause_ms, "broker unavailable");
            obx_lease_fini(&cur);
            obx_pause_ms(&relay->w.stop_requested, relay->broker.pause_ms);
            continue;
        }
        if (cur.count == 0) {
            obx_lease_fini(&cur);
            /* Listening, a lease right after one that found nothing would find only what
             * committed since, and those commits are announced (by their own wake-up, or by
             * the commit of the writer transaction holding the wake-up lock; the poll
             * covers the rest), which ends the wait at once: so wait first. At a few events
             * a second per database (most outboxes, most of the time) that is one
             * statement in three or four. */
            if (!(found_nothing && relay->w.cfg.listen && relay->db.up)) {
                lease_batch(relay, &cur);
            }
            found_nothing = 0;
        }
        if (cur.count == 0) {
            wait_for_work(relay, idle_ms);
            idle_ms =
                idle_ms * 2 > relay->w.cfg.poll_max_ms ? relay->w.cfg.poll_max_ms : idle_ms * 2;
            continue;
        }
        idle_ms = POLL_MIN_MS;
        if (publish_batch(relay, &cur, &next)) {
            /* The broker is away: hand the next batch back too, then wait. */
            release_lease(relay, &next, relay->broker.pause_ms, "broker unavailable");
            obx_lease_fini(&next);
            obx_log(OUTBOX_LOG_WARN, "publishing paused relay=%s pause_ms=%d", relay->w.name,
                    relay->broker.pause_ms);
            obx_pause_ms(&relay->w.stop_requested, relay->broker.pause_ms);
        }
        obx_lease_fini(&cur);
        found_nothing = next.count == 0;
        cur = next;
        memset(&next, 0, sizeof(next));
    }
    /* Stopping: a batch leased but not yet published goes back at once. */
    release_lease(relay, &cur, 0, "relay stopping");
    obx_lease_fini(&cur);
}

outbox_status
outbox_relay_new(const outbox_config *cfg, outbox_relay **out, outbox_error *err)
{
    struct outbox_relay *relay;
    outbox_status st;

    obx_error_reset(err);
    relay = calloc(1, sizeof(*relay));
    if (relay == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "relay: out of memory");
    }
    st = obx_worker_init(&relay->w, "relay", OBX_FOR_RELAY, OBX_RELAY_STAT_COUNT,
                         OBX_RELAY_HISTOGRAM_COUNT, cfg, obx_relay_config_check, err);
    if (st != OUTBOX_OK) {
        outbox_relay_free(relay);
        return st;
    }
    relay->db = (struct obx_worker_link){.what = "database", .stat_up = OUTBOX_RELAY_DATABASE_UP};
    relay->broker = (struct obx_worker_link){.what = "broker", .stat_up = OUTBOX_RELAY_BROKER_UP};
    *out = relay;
    return OUTBOX_OK;
}

void
outbox_relay_free(outbox_relay *relay)
{
    if (relay != NULL) {
        obx_store_close(relay->store);
        obx_bus_close(relay->bus);
        obx_worker_fini(&relay->w);
        free(relay);
    }
}

outbox_status
outbox_relay_run(outbox_relay *relay, outbox_error *err)
{
    int upkeep_rc;

    obx_error_reset(err);
    obx_log(OUTBOX_LOG_INFO,
            "relay starting relay=%s schema=%s mode=%s bus=%s stream=%s batch_size=%lld "
            "lease_seconds=%lld",
            relay->w.name, relay->w.cfg.schema,
            relay->w.cfg.relay_mode == OUTBOX_RELAY_PRUNE ? "prune" : "mark",
            relay->w.cfg.bus == OUTBOX_BUS_NATS_CORE ? "nats-core" : "jetstream",
            relay->w.cfg.stream, relay->w.cfg.batch_size, relay->w.cfg.lease_seconds);
    upkeep_rc = relay->no_upkeep ? 0 : obx_relay_upkeep_start(&relay->upkeep, &relay->w);
    if (upkeep_rc != 0) {
        obx_log(OUTBOX_LOG_ERROR, "cannot start the upkeep thread relay=%s errno=%d", relay->w.name,
                upkeep_rc);
    }
    run_loop(relay);
    obx_relay_upkeep_stop(&relay->upkeep);
    obx_store_close(relay->store);
    relay->store = NULL;
    obx_bus_close(relay->bus);
    relay->bus = NULL;
    relay->stream_ready = 0;
    obx_log(OUTBOX_LOG_INFO, "relay stopped relay=%s", relay->w.name);
    return OUTBOX_OK;
}

void
obx_relay_set_gate(outbox_relay *relay, const struct obx_relay_gate *gate)
{
    relay->gate = gate != NULL ? *gate : (struct obx_relay_gate){0};
}

void
obx_relay_use_two_writes(outbox_relay *relay, int on)
{
    relay->two_writes = on != 0;
}

void
obx_relay_skip_upkeep(outbox_relay *relay, int on)
{
    relay->no_upkeep = on != 0;
}

void
outbox_relay_stop(outbox_relay *relay)
{
    obx_worker_request_stop(&relay->w);
}

unsigned long long
outbox_relay_stat(outbox_relay *relay, outbox_relay_stat_id id)
{
    return obx_worker_stat(&relay->w, (int)id);
}

size_t
outbox_relay_histogram(outbox_relay *relay, outbox_relay_histogram_id id,
                       unsigned long long *counts, size_t cap, double *sum_seconds)
{
    return obx_worker_histogram(&relay->w, (int)id, counts, cap, sum_seconds);
}
