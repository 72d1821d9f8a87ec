/* SPDX-License-Identifier: MIT */
/*
 * external.c - an external handler (a C callback, exec:, http:) over an
 * offer: each event's claim commits before its run outside any transaction,
 * and its `done` mark (guarded by the owner token) commits in a later round
 * with the others that ended meanwhile and the claims of the runs to come:
 * one transaction and one commit a round, written by a thread of its own
 * while the runs go on. Claims are taken ahead of their runs and renewed by
 * the keeper while they wait, so a run that ends is followed at once.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "offer_internal.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/*
 * The claim was lost while the handler ran (taken over, or not renewed in
 * time) and the handler stopped: not its failure, so nothing is recorded
 * and no attempt spent. The release, guarded by the owner token, changes
 * nothing if another replica owns the claim, and frees it at once if the
 * keeper only could not reach the database.
 */
static outbox_status
settle_lost(struct offer *o, size_t k, outbox_error *err)
{
    obx_log(OUTBOX_LOG_WARN,
            "claim lost before done, handler stopped (no attempt spent) event_id=%s handler=%s",
            o->events[k].event_id, o->h->name);
    obx_verdict_nak(verdict(o, k), OBX_LEDGER_OUTAGE_RETRY_MS);
    o->tally->lost += 1;
    return obx_ledger_release(o->env->ledger, o->h->name, &o->events[k], &o->claims[k], 0, err);
}

/* The runs of an external kind going on, by slot. */
struct runs {
    struct outbox_delivery *d;     /* per slot: what its run reads, valid until it ends */
    struct obx_claim_watch *watch; /* per slot: its claim's renewal */
    int *kept;                     /* per slot: its keeper entry, or -1 */
    unsigned char *state;          /* per slot: RUN_* */
    struct obx_run_end *ends;      /* wait()'s reports */
    size_t *done_slots;            /* runs that ended DONE, their marks not written yet */
    size_t done_count;             /* of done_slots */
    size_t going;                  /* runs started and not ended */
    size_t next;                   /* the first slot not yet claimed */
    size_t *ahead;                 /* claimed ahead, not started yet: a FIFO of slots */
    size_t ahead_first, ahead_count;
    size_t *round_done;        /* the done marks the ledger round in flight writes */
    struct obx_run_end *later; /* runs that ended during a round, settled after it */
    size_t later_count;
    long long held_until_ms; /* when the batch's messages are next said to be in progress */
};

/*
 * RUN_AHEAD: claimed (and renewed by the keeper), its run not started yet.
 * RUN_ENDED: its run ended without DONE while a ledger round was written;
 * its outcome is recorded after that round.
 */
enum { RUN_WAITING, RUN_CLAIMING, RUN_AHEAD, RUN_GOING, RUN_STOPPED, RUN_ENDED, RUN_OVER };

enum { WAIT_ROUND_MS = 50 }; /* claims are checked for loss between rounds */

enum { AHEAD_WINDOWS = 8 }; /* claims taken ahead: up to this many in-flight windows */

enum { ROUND_POLL_MS = 1 }; /* while a round is written: how often it is checked for its end */

static int
runs_init(struct runs *r, size_t count, size_t in_flight)
{
    r->d = calloc(count, sizeof(*r->d));
    r->watch = calloc(count, sizeof(*r->watch));
    r->kept = calloc(count, sizeof(*r->kept));
    r->state = calloc(count, sizeof(*r->state));
    r->ends = calloc(in_flight, sizeof(*r->ends));
    r->done_slots = calloc(count, sizeof(*r->done_slots));
    r->ahead = calloc(count, sizeof(*r->ahead));
    r->round_done = calloc(count, sizeof(*r->round_done));
    r->later = calloc(count, sizeof(*r->later));
    return r->d && r->watch && r->kept && r->state && r->ends && r->done_slots && r->ahead &&
                   r->round_done && r->later
               ? 0
               : -1;
}

static void
runs_fini(struct runs *r)
{
    free(r->d);
    free(r->watch);
    free(r->kept);
    free(r->state);
    free(r->ends);
    free(r->done_slots);
    free(r->ahead);
    free(r->round_done);
    free(r->later);
}

/*
 * The next slot to claim and run, or o->count when none can start now.
 * Slots are sorted by aggregate: an event waits while the one before it
 * of the same aggregate runs, so an aggregate never has two runs going
 * and its events start in the order they came.
 */
static size_t
next_startable(const struct offer *o, const struct runs *r)
{
    for (size_t k = r->next; k < o->count; k++) {
        if (r->state[k] != RUN_WAITING) {
            continue;
        }
        if (k == 0 || r->state[k - 1] == RUN_OVER ||
            strcmp(verdict((struct offer *)o, k)->aggregate_id,
                   verdict((struct offer *)o, k - 1)->aggregate_id) != 0) {
            return k;
        }
    }
    return o->count;
}

/*
 * Keeps slot k, its claim (sent at `claimed_ms`) just committed, ready to
 * start: the keeper renews the claim from now on, not from its start, so
 * a claim that waits for room in the window is as safe as a running one.
 */
static void
keep_ahead(struct offer *o, struct runs *r, size_t k, long long claimed_ms)
{
    int lease = (int)o->env->cfg->ledger_lease_seconds;

    obx_claim_watch_init(&r->watch[k], claimed_ms, lease);
    r->kept[k] = obx_claim_keeper_watch(o->env->keeper, o->h->name, &o->events[k], &o->claims[k],
                                        lease, claimed_ms, &r->watch[k]);
    r->state[k] = RUN_AHEAD;
    r->ahead[(r->ahead_first + r->ahead_count++) % o->count] = k;
}

/* The oldest slot claimed ahead, taken out of the queue; o->count when there is none. */
static size_t
take_ahead(const struct offer *o, struct runs *r)
{
    size_t k;

    if (r->ahead_count == 0) {
        return o->count;
    }
    k = r->ahead[r->ahead_first];
    r->ahead_first = (r->ahead_first + 1) % o->count;
    r->ahead_count--;
    return k;
}

/* Starts slot k's run, claimed ahead. */
static void
begin_run(struct offer *o, struct runs *r, size_t k)
{
    r->d[k] = delivery_of(o, k);
    r->d[k].watch = &r->watch[k];
    r->state[k] = RUN_GOING;
    r->going++;
    o->h->ops->start(o->h->ctx, (unsigned long)k, &r->d[k]);
}

/* The done marks of `slots`, in one statement guarded by each owner token; not acted on. */
static outbox_status
mark_done_rows(struct offer *o, const size_t *slots, size_t n, size_t *marked, outbox_error *err)
{
    struct obx_ledger_event *events = calloc(n, sizeof(*events));
    struct obx_claim *claims = calloc(n, sizeof(*claims));
    outbox_status st;

    *marked = 0;
    if (events == NULL || claims == NULL) {
        st = obx_fail(err, OUTBOX_ENOMEM, "consumer: out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            events[i] = o->events[slots[i]];
            claims[i] = o->claims[slots[i]];
        }
        st = obx_ledger_mark_done(o->env->ledger, o->h->name, events, claims, n, marked, err);
    }
    free(events);
    free(claims);
    return st;
}

/*
 * What the done marks of `slots` came to: with `st` failed, they were not
 * recorded, so their messages come back (the ledger then says done or runs
 * them again); a mark that found its claim taken over changed nothing, and
 * the new owner decides.
 */
static void
apply_done_marks(struct offer *o, const size_t *slots, size_t n, size_t marked, outbox_status st)
{
    if (st != OUTBOX_OK) {
        for (size_t i = 0; i < n; i++) {
            obx_verdict_nak(verdict(o, slots[i]), OBX_LEDGER_OUTAGE_RETRY_MS);
            o->results[slots[i]] = OUTBOX_HANDLER_RETRY;
            o->tally->ledger_errors += 1;
        }
    } else if (marked < n && n == 1) {
        obx_log(OUTBOX_LOG_WARN, "claim lost before done event_id=%s handler=%s",
                o->events[slots[0]].event_id, o->h->name);
    } else if (marked < n) {
        obx_log(OUTBOX_LOG_WARN, "claim lost before done handler=%s lost=%zu of=%zu", o->h->name,
                n - marked, n);
    }
}

/* Slots that can start now, up to `room`, held back from the next pick; returns how many. */
static size_t
pick_startable(struct offer *o, struct runs *r, size_t room, struct obx_ledger_event *events,
               size_t *picked)
{
    size_t n = 0, k;

    while (n < room && (k = next_startable(o, r)) < o->count) {
        r->state[k] = RUN_CLAIMING; /* holds back the next event of its aggregate */
        events[n] = o->events[k];
        picked[n++] = k;
    }
    return n;
}

/* Starts the runs the ledger said to run; with `st` failed, nothing was claimed. */
static void
apply_claims(struct offer *o, struct runs *r, const size_t *picked, const struct obx_claim *claims,
             size_t n, long long claimed_ms, outbox_status st)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = picked[i];

        if (st != OUTBOX_OK) {
            r->state[k] = RUN_WAITING; /* not claimed: it is redelivered */
            continue;
        }
        o->claims[k] = claims[i];
        obx_offer_claim_states_in(o, k, k + 1);
        if (o->claims[k].state == OBX_CLAIM_RUN) {
            keep_ahead(o, r, k, claimed_ms);
        } else {
            r->state[k] = RUN_OVER;
        }
    }
}

/*
 * One ledger round: the done marks of the runs that ended before it, and
 * the claims of the events picked to run next. Written by a thread of its
 * own while the runs go on (round_begin, round_end); the loop does not use
 * the ledger meanwhile.
 */
struct round {
    struct offer *o;
    const size_t *done_slots; /* runs.round_done */
    size_t done_n;
    struct obx_ledger_event *events; /* the claims: picked[i] is events[i]'s slot */
    struct obx_claim *claims;
    size_t *picked;
    size_t n;
    long long claimed_ms; /* before the server's now(): see claim_keeper.c */
    size_t marked;
    outbox_status done_st, claim_st;
    outbox_error derr, cerr;
    pthread_t thread;
    int threaded;       /* its thread runs: round_end joins it */
    atomic_int written; /* its writes are over */
};

/*
 * The two ledger writes of a round, in one transaction when there are
 * both: the done marks of the runs that ended, then the claims of up to
 * `n` events, sent as one round trip. One commit makes both durable, so a
 * round waits for one WAL flush instead of two, and each stays
 * synchronous: a claim is durable before its run starts, a done mark
 * before its message is acked. The marks go first, so an ordered event
 * whose predecessor just ended is claimed after that one is done. If that
 * fails on a live connection (a claim's error), the marks are written
 * alone.
 */
static void
write_round(struct round *rd)
{
    struct offer *o = rd->o;
    struct obx_ledger *ledger = o->env->ledger;
    int lease = (int)o->env->cfg->ledger_lease_seconds;
    struct obx_ledger_event *done_events = NULL;
    struct obx_claim *done_claims = NULL;

    rd->done_st = rd->claim_st = OUTBOX_OK;
    if (rd->done_n == 0 || rd->n == 0) {
        if (rd->done_n > 0) {
            rd->done_st = mark_done_rows(o, rd->done_slots, rd->done_n, &rd->marked, &rd->derr);
        }
        if (rd->n > 0) {
            rd->claim_st = obx_ledger_claim(ledger, o->h->name, rd->events, rd->n, lease,
                                            CLAIM_LOCK_WAIT_MS, rd->claims, &rd->cerr);
        }
        return;
    }
    done_events = calloc(rd->done_n, sizeof(*done_events));
    done_claims = calloc(rd->done_n, sizeof(*done_claims));
    if (done_events == NULL || done_claims == NULL) {
        rd->claim_st = obx_fail(&rd->cerr, OUTBOX_ENOMEM, "consumer: out of memory");
    } else {
        for (size_t i = 0; i < rd->done_n; i++) {
            done_events[i] = o->events[rd->done_slots[i]];
            done_claims[i] = o->claims[rd->done_slots[i]];
        }
        rd->claim_st = obx_ledger_mark_done_and_claim(
            ledger, o->h->name, done_events, done_claims, rd->done_n, &rd->marked, rd->events,
            rd->n, lease, CLAIM_LOCK_WAIT_MS, rd->claims, &rd->cerr);
    }
    free(done_events);
    free(done_claims);
    if (rd->claim_st == OUTBOX_OK) {
        return; /* committed together */
    }
    rd->done_st = rd->cerr.code == OUTBOX_EUNAVAILABLE
                      ? obx_fail(&rd->derr, OUTBOX_EUNAVAILABLE, "%s", rd->cerr.message)
                      : mark_done_rows(o, rd->done_slots, rd->done_n, &rd->marked, &rd->derr);
}

static void *
round_main(void *arg)
{
    struct round *rd = arg;

    write_round(rd);
    atomic_store(&rd->written, 1);
    return NULL;
}

/*
 * Starts a round: the done marks waiting in r->done_slots and the claims
 * of up to `room` slots that can start next. With `threaded`, it is
 * written by a thread of its own (else, or if that thread cannot start,
 * here): the runs going on meanwhile are not held up by its commit.
 */
static void
round_begin(struct offer *o, struct runs *r, size_t room, int threaded, struct round *rd)
{
    size_t *swap = r->round_done;

    *rd = (struct round){.o = o, .claimed_ms = obx_monotonic_ms()};
    atomic_init(&rd->written, 0);
    rd->events = calloc(room > 0 ? room : 1, sizeof(*rd->events));
    rd->claims = calloc(room > 0 ? room : 1, sizeof(*rd->claims));
    rd->picked = calloc(room > 0 ? room : 1, sizeof(*rd->picked));
    r->round_done = r->done_slots; /* the marks it writes; new ones gather meanwhile */
    r->done_slots = swap;
    rd->done_slots = r->round_done;
    rd->done_n = r->done_count;
    r->done_count = 0;
    if (rd->events == NULL || rd->claims == NULL || rd->picked == NULL) {
        rd->done_st = rd->claim_st = obx_fail(&rd->derr, OUTBOX_ENOMEM, "consumer: out of memory");
        atomic_store(&rd->written, 1);
        return;
    }
    rd->n = pick_startable(o, r, room, rd->events, rd->picked);
    rd->threaded = threaded && pthread_create(&rd->thread, NULL, round_main, rd) == 0;
    if (!rd->threaded) {
        round_main(rd);
    }
}

/*
 * Ends a round: waits for it to be written, records its done marks and
 * keeps the runs the ledger said to run in the queue claimed ahead. The
 * first failure is returned (in `err`); the done marks and claims it cost
 * are given back (redelivered, nothing spent).
 */
static outbox_status
round_end(struct offer *o, struct runs *r, struct round *rd, outbox_error *err)
{
    if (rd->threaded) {
        pthread_join(rd->thread, NULL);
    }
    apply_done_marks(o, rd->done_slots, rd->done_n, rd->marked, rd->done_st);
    apply_claims(o, r, rd->picked, rd->claims, rd->n, rd->claimed_ms, rd->claim_st);
    free(rd->events);
    free(rd->claims);
    free(rd->picked);
    if (rd->done_st != OUTBOX_OK) {
        *err = rd->derr;
        return rd->done_st;
    }
    if (rd->claim_st != OUTBOX_OK) {
        *err = rd->cerr;
    }
    return rd->claim_st;
}

/*
 * Records how run k ended, at once: its failure or retry, or for a DONE
 * sets `*done` (its mark goes with the next round's claims, one
 * transaction). With `broken` the ledger is away: nothing can be
 * recorded, and the message comes back later with nothing spent.
 */
static outbox_status
settle_end(struct offer *o, struct runs *r, const struct obx_run_end *e, int broken, int *done,
           outbox_error *err)
{
    size_t k = (size_t)e->tag;

    *done = 0;
    obx_claim_keeper_unwatch(o->env->keeper, r->kept[k]);
    r->state[k] = RUN_OVER;
    r->going--;
    o->results[k] = e->result;
    o->retry_ms[k] = e->retry_ms;
    o->dead_now[k] = (unsigned char)e->dead_now;
    obx_offer_keep_reason(o, k, &e->err);
    if (broken) {
        obx_verdict_nak(verdict(o, k), OBX_LEDGER_OUTAGE_RETRY_MS);
        o->tally->ledger_errors += 1;
        o->results[k] = OUTBOX_HANDLER_RETRY; /* not counted as handled: its done is not written */
        return OUTBOX_OK;
    }
    if (e->result != OUTBOX_HANDLER_DONE && obx_claim_watch_lost(&r->watch[k])) {
        return settle_lost(o, k, err);
    }
    if (e->result != OUTBOX_HANDLER_DONE) {
        return obx_offer_settle_unhandled(o, k, err);
    }
    *done = 1;
    return OUTBOX_OK;
}

/*
 * Records the ends of one wait; the first ledger failure makes `*broken`.
 * The DONE ones wait in r->done_slots for the next ledger round.
 */
static void
settle_round(struct offer *o, struct runs *r, size_t n, int *broken, outbox_status *st,
             outbox_error *err)
{
    for (size_t i = 0; i < n; i++) {
        outbox_error serr = {0};
        int done = 0;

        if (settle_end(o, r, &r->ends[i], *broken, &done, &serr) != OUTBOX_OK && !*broken) {
            *broken = 1;
            *st = serr.code;
            *err = serr;
        }
        if (done) {
            r->done_slots[r->done_count++] = (size_t)r->ends[i].tag;
        }
    }
}

/*
 * Starts runs claimed ahead while the window has room, as soon as runs
 * end, without a ledger round between. A claim found lost while it waited
 * (taken over, or not renewed in time) is not run: it is given back with
 * nothing spent, as a run stopped for that would be; while a round is
 * written (`may_write` 0) it waits at the head of the queue for that.
 */
static outbox_status
start_ahead(struct offer *o, struct runs *r, size_t limit, int may_write, outbox_error *err)
{
    outbox_status st = OUTBOX_OK;
    size_t k;

    while (r->going < limit && r->ahead_count > 0) {
        if (!obx_claim_watch_lost(&r->watch[r->ahead[r->ahead_first]])) {
            begin_run(o, r, take_ahead(o, r));
            continue;
        }
        if (!may_write) {
            break;
        }
        k = take_ahead(o, r);
        obx_claim_keeper_unwatch(o->env->keeper, r->kept[k]);
        r->state[k] = RUN_OVER;
        o->results[k] = OUTBOX_HANDLER_RETRY; /* not run: not handled */
        obx_log(OUTBOX_LOG_WARN,
                "claim taken ahead lost before its run, not started (no attempt spent) "
                "event_id=%s handler=%s",
                o->events[k].event_id, o->h->name);
        obx_verdict_nak(verdict(o, k), OBX_LEDGER_OUTAGE_RETRY_MS);
        o->tally->lost += 1;
        if (st == OUTBOX_OK) {
            /* Guarded by the owner token: frees it at once if it is still ours. */
            st = obx_ledger_release(o->env->ledger, o->h->name, &o->events[k], &o->claims[k], 0,
                                    err);
        }
    }
    return st;
}

/*
 * The ends of one wait while a round is written: a DONE waits for the
 * next round's marks as usual; any other end needs the ledger, so it is
 * held (RUN_ENDED) and recorded by settle_later after the round.
 */
static void
settle_in_round(struct offer *o, struct runs *r, size_t n, int broken)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = (size_t)r->ends[i].tag;
        outbox_error serr = {0};
        int done = 0;

        if (r->ends[i].result != OUTBOX_HANDLER_DONE && !broken) {
            r->state[k] = RUN_ENDED; /* still counted going: its outcome is not written */
            r->later[r->later_count++] = r->ends[i];
            continue;
        }
        (void)settle_end(o, r, &r->ends[i], broken, &done, &serr); /* writes nothing */
        if (done) {
            r->done_slots[r->done_count++] = k;
        }
    }
}

/* Records the ends held while a round was written; the first ledger failure makes `*broken`. */
static void
settle_later(struct offer *o, struct runs *r, int *broken, outbox_status *st, outbox_error *err)
{
    for (size_t i = 0; i < r->later_count; i++) {
        outbox_error serr = {0};
        int done = 0;

        if (settle_end(o, r, &r->later[i], *broken, &done, &serr) != OUTBOX_OK && !*broken) {
            *broken = 1;
            *st = serr.code;
            *err = serr;
        }
    }
    r->later_count = 0;
}

/*
 * The claims taken ahead that will not run now: the handler paused (its
 * endpoint is away) or the ledger broke. Each is released at once, guarded
 * by its owner token, due again after `delay_ms` (the pause), with no
 * attempt spent; with the ledger away nothing can be written, and its
 * lease runs out instead. Its message comes back after the same delay.
 */
static outbox_status
give_back_ahead(struct offer *o, struct runs *r, int broken, long long delay_ms, outbox_error *err)
{
    int delay = (int)(delay_ms < INT_MAX ? (delay_ms > 0 ? delay_ms : 1) : INT_MAX);
    outbox_status st = OUTBOX_OK;
    size_t k;

    while ((k = take_ahead(o, r)) < o->count) {
        obx_claim_keeper_unwatch(o->env->keeper, r->kept[k]);
        r->state[k] = RUN_OVER;
        o->results[k] = OUTBOX_HANDLER_RETRY; /* not run: not handled */
        if (broken || st != OUTBOX_OK) {
            obx_verdict_nak(verdict(o, k), OBX_LEDGER_OUTAGE_RETRY_MS);
            o->tally->ledger_errors += 1;
            continue;
        }
        st = obx_ledger_release(o->env->ledger, o->h->name, &o->events[k], &o->claims[k], delay,
                                err);
        obx_verdict_nak(verdict(o, k), st == OUTBOX_OK ? delay : OBX_LEDGER_OUTAGE_RETRY_MS);
        o->tally->deferred += st == OUTBOX_OK;
        o->tally->ledger_errors += st != OUTBOX_OK;
    }
    return st;
}

/*
 * The server hands a message out again when it stays unsettled for the
 * feed's held_seconds (JetStream's ack_wait, the DB feed's lease). An
 * offer that outlasts a third of it says every message of its batch is
 * still in progress, and again every third: long runs, and events waiting
 * for a place in the window, stay this replica's. An offer that ends
 * sooner sends nothing (one in-progress per event was a second message
 * to the broker, or a write to the outbox, for each event).
 */
static void
keep_messages_held(struct offer *o, struct runs *r)
{
    long long now = obx_monotonic_ms();
    long long third_ms = (long long)o->env->feed->held_seconds * 1000 / 3;

    if (third_ms <= 0) {
        return; /* a feed that never hands a message out again */
    }
    if (r->held_until_ms == 0) {
        r->held_until_ms = now + third_ms;
    }
    if (now < r->held_until_ms) {
        return;
    }
    r->held_until_ms = now + third_ms;
    for (size_t k = 0; k < o->count; k++) {
        outbox_error ferr = {0};

        /* A failure is the broker's or the outbox's outage: the run's own outcome tells. */
        (void)o->env->feed->ops->in_progress(o->env->feed, o->batch, o->msg_index[k], &ferr);
    }
}

/* A run whose claim is gone, or may run out before its next renewal, is stopped at once. */
static void
stop_lost_runs(struct offer *o, struct runs *r)
{
    for (size_t k = 0; k < o->count; k++) {
        if (r->state[k] == RUN_GOING && obx_claim_watch_lost(&r->watch[k])) {
            r->state[k] = RUN_STOPPED;
            o->h->ops->stop(o->h->ctx, (unsigned long)k);
        }
    }
}

/*
 * How many claims an external handler holds at once, running or claimed
 * ahead: its in-flight limit and up to AHEAD_WINDOWS windows more, within what the
 * keeper renews (every claim held is renewed).
 */
static size_t
claims_cap(size_t limit)
{
    size_t ahead = limit * AHEAD_WINDOWS;

    if (limit >= OBX_KEEPER_MAX_CLAIMS) {
        return limit;
    }
    return limit + (ahead < OBX_KEEPER_MAX_CLAIMS - limit ? ahead : OBX_KEEPER_MAX_CLAIMS - limit);
}

/* The first ledger failure of an offer breaks it: what runs is settled, nothing more starts. */
static void
note(outbox_status got, int *broken, outbox_status *st)
{
    if (got != OUTBOX_OK && !*broken) {
        *broken = 1;
        *st = got;
    }
}

/*
 * External kinds, with up to the handler's in-flight limit of runs going
 * at once. Events are claimed ahead of their runs, up to claims_cap(),
 * in rounds of many (one commit each): when a run ends, the next claimed
 * one starts at once, without waiting for a ledger round, so the window
 * stays full while the ledger writes the marks and claims. A claim that
 * waits for its run is renewed by the keeper like a running one: its lease
 * cannot run out and let another replica run the same handler for the
 * same event at the same time. Each run's end is recorded as soon as it
 * is reported: a failure or retry at once, a done mark in the next ledger
 * round, taken when the queue claimed ahead runs low, when as many marks
 * wait as claims can be held, or when nothing more runs.
 *
 * A kind in an outage (its endpoint unreachable) starts nothing more: the
 * claims taken ahead are released and the events not started are given
 * back with its pause as their delay, no attempt spent, and the consumer
 * goes on with the other handlers.
 */
outbox_status
obx_offer_external(struct offer *o, outbox_error *err)
{
    const struct obx_handler_ops *ops = o->h->ops;
    size_t limit = o->h->in_flight > 0 ? o->h->in_flight : 1, cap = claims_cap(limit);
    struct runs r = {0};
    outbox_status st = OUTBOX_OK;
    long long paused = 0;
    int broken = 0;

    if (runs_init(&r, o->count, limit) != 0) {
        runs_fini(&r);
        return obx_fail(err, OUTBOX_ENOMEM, "consumer: out of memory");
    }
    for (;;) {
        size_t n, room = 0;

        paused = ops->paused_ms != NULL ? ops->paused_ms(o->h->ctx) : 0;
        if (broken || paused > 0) {
            note(give_back_ahead(o, &r, broken, paused, err), &broken, &st);
        } else {
            note(start_ahead(o, &r, limit, 1, err), &broken, &st);
        }
        while (r.next < o->count && r.state[r.next] != RUN_WAITING) {
            r.next++;
        }
        if (!broken && paused == 0 && r.ahead_count < limit && r.going + r.ahead_count < cap &&
            next_startable(o, &r) < o->count) {
            /* The first round of a batch is small, so its runs start soon; the next takes
             * all the room left while they go on: a round costs about the same whether it
             * claims 64 events or 400, so fewer, larger rounds keep the ledger ahead. */
            room = cap - r.going - r.ahead_count;
            room = r.going + r.ahead_count > 0 || room < limit ? room : limit;
        }
        if (room > 0 ||
            (r.done_count > 0 && (broken || r.done_count >= cap || r.going + r.ahead_count == 0))) {
            struct round rd;

            round_begin(o, &r, room, r.going > r.later_count, &rd);
            /* The runs go on while the round is written: ends are taken, the window refilled. */
            while (!atomic_load(&rd.written) && r.going > r.later_count) {
                paused = ops->paused_ms != NULL ? ops->paused_ms(o->h->ctx) : 0;
                if (!broken && paused == 0) {
                    (void)start_ahead(o, &r, limit, 0, err); /* writes nothing */
                }
                n = ops->wait(o->h->ctx, ROUND_POLL_MS, r.ends, limit);
                settle_in_round(o, &r, n, broken);
                stop_lost_runs(o, &r);
                keep_messages_held(o, &r);
            }
            note(round_end(o, &r, &rd, err), &broken, &st);
            settle_later(o, &r, &broken, &st, err);
            continue; /* the claims that did not come back to run may have freed the next */
        }
        if (r.going == 0 && r.ahead_count == 0 && r.done_count == 0 &&
            (broken || paused > 0 || next_startable(o, &r) == o->count)) {
            break;
        }
        n = ops->wait(o->h->ctx, WAIT_ROUND_MS, r.ends, limit);
        settle_round(o, &r, n, &broken, &st, err);
        stop_lost_runs(o, &r);
        keep_messages_held(o, &r);
    }
    /* Not started: back later, nothing spent (the ledger is away, or the endpoint). */
    for (size_t k = 0; k < o->count; k++) {
        if (r.state[k] == RUN_WAITING) {
            obx_verdict_nak(verdict(o, k), broken ? OBX_LEDGER_OUTAGE_RETRY_MS : paused);
            o->tally->ledger_errors += broken;
            o->tally->deferred += !broken;
        }
    }
    runs_fini(&r);
    return st;
}
