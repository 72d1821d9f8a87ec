/* SPDX-License-Identifier: MIT */
/*
 * consumer_offer.c - one handler over one fetched batch, through the ledger.
 *
 * Transactional handlers: one ledger transaction for the whole batch:
 * claim everything, run each event in a savepoint, mark the successes done,
 * record failures and retries, commit. Claim, effects and `done` commit
 * together, so database effects happen exactly once and a crash leaves no
 * claim behind. External handlers: an event's claim commits just before
 * its effect runs outside any transaction (those that start together are
 * claimed in one statement), then its `done` mark (guarded by the owner
 * token) commits in the next round after its run ends, with the others
 * that ended meanwhile and the claims of the runs that start then: one
 * transaction and one commit a round, to keep the re-run window after a
 * crash small and the rounds cheap. Every
 * kind is run through struct obx_handler_ops (handler.h): the loop does
 * not know which one it runs.
 *
 * Attempts are spent only on handler failures. A claim held elsewhere, a
 * backoff not yet over, a retry-later answer or a ledger outage only delay
 * the message (NAK), so JetStream's max_deliver never counts them.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "consumer_offer.h"
#include "envelope/subject.h"
#include "support/backoff.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    CLAIM_LOCK_WAIT_MS = 1000, /* wait for a claim another transaction holds */
};

/* The messages of the batch `h` matches, as ledger events. */
struct offer {
    const struct obx_offer_env *env;
    struct obx_offer_tally *tally;
    const struct obx_handler *h;
    struct obx_feed_batch *batch;
    struct obx_msg_verdict *verdicts;
    size_t count;
    size_t *msg_index; /* offer slot -> batch message */
    struct obx_ledger_event *events;
    struct obx_claim *claims;
    outbox_handler_result *results; /* per slot, for RUN claims */
    char (*reasons)[512];           /* per slot, for FAIL */
    unsigned char *rerun;           /* per slot: RETRY in a batch, to run again alone */
    long long *retry_ms;            /* per slot, external RETRY: the delay asked for; 0: backoff */
    unsigned char *dead_now;        /* per slot, external FAIL: dead-letter at once */
    long only_msg;                  /* a second chance: this batch message only; else -1 */
};

/*
 * The event's aggregate_seq if `h` is given every event of its aggregate
 * type (no filter, or one that covers {prefix}.{aggregate_type}.>); else 0,
 * unordered: a handler of some event types only is never given the numbers
 * between, so it could not wait for them.
 */
static long long
ordered_for(const struct obx_handler *h, const struct obx_feed_msg *m,
            const struct obx_envelope_head *head)
{
    size_t route = strlen(head->event_type) + 1, len = m->subject ? strlen(m->subject) : 0;

    if (head->aggregate_seq <= 0 || h->filter == NULL) {
        return head->aggregate_seq;
    }
    /* The message check made the subject {prefix}.{aggregate_type}.{event_type}. */
    return len > route && obx_subject_filter_covers(h->filter, m->subject, len - route)
               ? head->aggregate_seq
               : 0;
}

static int
offer_init(struct offer *o)
{
    size_t n = o->batch->count;

    o->msg_index = calloc(n, sizeof(*o->msg_index));
    o->events = calloc(n, sizeof(*o->events));
    o->claims = calloc(n, sizeof(*o->claims));
    o->results = calloc(n, sizeof(*o->results));
    o->reasons = calloc(n, sizeof(*o->reasons));
    o->rerun = calloc(n, sizeof(*o->rerun));
    o->retry_ms = calloc(n, sizeof(*o->retry_ms));
    o->dead_now = calloc(n, sizeof(*o->dead_now));
    if (!o->msg_index || !o->events || !o->claims || !o->results || !o->reasons || !o->rerun ||
        !o->retry_ms || !o->dead_now) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const struct obx_feed_msg *m = &o->batch->msgs[i];

        if (o->only_msg >= 0
                ? (size_t)o->only_msg != i
                : (o->verdicts[i].bad ||
                   (o->h->filter != NULL && !obx_subject_matches(o->h->filter, m->subject)))) {
            continue;
        }
        o->verdicts[i].matched += o->only_msg < 0;
        o->tally->ordered += o->verdicts[i].env.head.aggregate_seq > 0;
        o->msg_index[o->count] = i;
        o->events[o->count++] = (struct obx_ledger_event){
            .event_id = o->verdicts[i].event_id,
            .envelope = m->envelope,
            /* Ordered: the ledger checks the aggregate's order, and may park it to run later. */
            .aggregate_seq = ordered_for(o->h, m, &o->verdicts[i].env.head),
            .aggregate_type = o->verdicts[i].env.head.aggregate_type,
            .aggregate_id = o->verdicts[i].env.head.aggregate_id,
            .message_id = m->event_id,
            .subject = m->subject};
    }
    return 0;
}

struct keyed_slot {
    const char *key; /* the aggregate id */
    long long seq;   /* its aggregate_seq; 0: unordered */
    const char *event_id;
    size_t msg_index;
    struct obx_ledger_event event;
};

static int
by_aggregate_then_event(const void *a, const void *b)
{
    const struct keyed_slot *x = a, *y = b;
    int c = strcmp(x->key, y->key);

    if (c == 0 && x->seq != y->seq) {
        return x->seq < y->seq ? -1 : 1; /* an aggregate's next event first: the rest park */
    }
    return c != 0 ? c : strcmp(x->event_id, y->event_id);
}

static int
by_aggregate_then_arrival(const void *a, const void *b)
{
    const struct keyed_slot *x = a, *y = b;
    int c = strcmp(x->key, y->key);

    return c != 0 ? c : (x->msg_index > y->msg_index) - (x->msg_index < y->msg_index);
}

/*
 * Transactional handlers hold every lock they take until the batch
 * commits. Run in one global order - by aggregate, then by event id (time)
 * - effects keyed by aggregate are locked in the same order by every
 * replica: concurrent batches wait for each other instead of deadlocking.
 * Each aggregate's events also run in the order they happened.
 */
static void
sort_by_aggregate(struct offer *o, int (*order)(const void *, const void *))
{
    struct keyed_slot *ks = calloc(o->count, sizeof(*ks));

    if (ks == NULL) {
        return; /* unsorted still works */
    }
    for (size_t k = 0; k < o->count; k++) {
        ks[k].key = o->verdicts[o->msg_index[k]].aggregate_id;
        ks[k].seq = o->events[k].aggregate_seq;
        ks[k].event_id = o->events[k].event_id;
        ks[k].msg_index = o->msg_index[k];
        ks[k].event = o->events[k];
    }
    qsort(ks, o->count, sizeof(*ks), order);
    for (size_t k = 0; k < o->count; k++) {
        o->msg_index[k] = ks[k].msg_index;
        o->events[k] = ks[k].event;
    }
    free(ks);
}

static void
offer_fini(struct offer *o)
{
    free(o->msg_index);
    free(o->events);
    free(o->claims);
    free(o->results);
    free(o->reasons);
    free(o->rerun);
    free(o->retry_ms);
    free(o->dead_now);
}

static struct obx_msg_verdict *
verdict(struct offer *o, size_t slot)
{
    return &o->verdicts[o->msg_index[slot]];
}

/* Every matched message still open goes back for redelivery; nothing is spent. */
static void
nak_all(struct offer *o)
{
    for (size_t k = 0; k < o->count; k++) {
        obx_verdict_nak(verdict(o, k), OBX_LEDGER_OUTAGE_RETRY_MS);
    }
    o->tally->ledger_errors += o->count;
}

/* Claims of slots [from, to) that need no run: done, dead (skip), held or backing off (later). */
static void
apply_claim_states_in(struct offer *o, size_t from, size_t to)
{
    size_t skipped = 0, deferred = 0, conflicts = 0;

    for (size_t k = from; k < to; k++) {
        conflicts += o->claims[k].state == OBX_CLAIM_BUSY;
        switch (o->claims[k].state) {
        case OBX_CLAIM_DONE:
            skipped++;
            break;
        case OBX_CLAIM_DEAD:
            verdict(o, k)->dead++;
            break;
        case OBX_CLAIM_BUSY:
        case OBX_CLAIM_BACKOFF:
            obx_verdict_nak(verdict(o, k), o->claims[k].defer_ms > 0 ? o->claims[k].defer_ms : 1);
            deferred++;
            break;
        case OBX_CLAIM_PARKED:
            o->tally->parked++; /* kept in the ledger, runs after its predecessor: ack */
            break;
        case OBX_CLAIM_RUN:
            break;
        }
    }
    o->tally->claims += to - from;
    o->tally->skipped += skipped;
    o->tally->deferred += deferred;
    o->tally->conflicts += conflicts;
}

static void
apply_claim_states(struct offer *o)
{
    apply_claim_states_in(o, 0, o->count);
}

/* The delivery handed to the handler for slot k. */
static struct outbox_delivery
delivery_of(const struct offer *o, size_t k)
{
    return (struct outbox_delivery){.msg = &o->batch->msgs[o->msg_index[k]],
                                    .event_id = o->events[k].event_id,
                                    .attempts = o->claims[k].attempts,
                                    .head = &o->verdicts[o->msg_index[k]].env.head};
}

/*
 * A failure's reason is kept for the ledger. A run given back because the
 * database failed under it spends nothing, so it is counted and its reason
 * kept for the consumer's log: an outage that lasts must show.
 */
static void
keep_reason(struct offer *o, size_t k, const outbox_error *herr)
{
    if (o->results[k] == OUTBOX_HANDLER_FAIL) {
        snprintf(o->reasons[k], sizeof(o->reasons[k]), "%s",
                 herr->message[0] ? herr->message : "handler failed");
    } else if (o->results[k] == OUTBOX_HANDLER_RETRY && herr->code == OUTBOX_EUNAVAILABLE) {
        o->tally->outages++;
        snprintf(o->tally->outage_reason, sizeof(o->tally->outage_reason), "%.200s", herr->message);
    }
}

/* Runs the handler for slot k inside the ledger's transaction; the result is kept in `o`. */
static void
run_one_in_txn(struct offer *o, size_t k)
{
    struct outbox_delivery d = delivery_of(o, k);
    const outbox_delivery *one[] = {&d};
    outbox_error herr = {0};

    o->h->ops->run_in_txn(o->h, o->env->ledger, one, 1, &o->results[k], &herr);
    keep_reason(o, k, &herr);
}

/* Every RUN claim's handler in one call (a SQL kind's pipeline). 0, or -1 out of memory. */
static int
run_batch_in_txn(struct offer *o)
{
    struct outbox_delivery *d = calloc(o->count, sizeof(*d));
    const outbox_delivery **dp = calloc(o->count, sizeof(*dp));
    outbox_handler_result *results = calloc(o->count, sizeof(*results));
    outbox_error *errs = calloc(o->count, sizeof(*errs));
    size_t *slot = calloc(o->count, sizeof(*slot));
    size_t n = 0;
    int rc = d && dp && results && errs && slot ? 0 : -1;

    for (size_t k = 0; rc == 0 && k < o->count; k++) {
        if (o->claims[k].state == OBX_CLAIM_RUN) {
            d[n] = delivery_of(o, k);
            dp[n] = &d[n];
            slot[n++] = k;
        }
    }
    if (rc == 0 && n > 0) {
        o->h->ops->run_in_txn(o->h, o->env->ledger, dp, n, results, errs);
        for (size_t i = 0; i < n; i++) {
            o->results[slot[i]] = results[i];
            keep_reason(o, slot[i], &errs[i]);
        }
    }
    free(d);
    free(dp);
    free(results);
    free(errs);
    free(slot);
    return rc;
}

/* Writes the outcome of slot k's failure or retry into the ledger and the verdict. */
static outbox_status
settle_unhandled(struct offer *o, size_t k, outbox_error *err)
{
    const struct obx_config *opts = o->env->cfg;
    struct obx_failure_policy policy = {opts->max_attempts, opts->backoff_base_ms,
                                        opts->backoff_cap_ms};
    struct obx_failure_result fr = {0};
    outbox_status st;

    if (o->results[k] == OUTBOX_HANDLER_RETRY && !obx_handler_is_external(o->h) &&
        o->only_msg < 0) {
        /* Usually a deadlock or serialization conflict with another replica's batch:
         * freed now, and run again alone right after this batch commits. */
        o->rerun[k] = 1;
        return obx_ledger_release(o->env->ledger, o->h->name, &o->events[k], &o->claims[k], 0, err);
    }
    if (o->results[k] == OUTBOX_HANDLER_RETRY) {
        /* A delay the handler asked for (HTTP Retry-After, an endpoint's outage), else the
         * first step of the backoff. */
        int delay_ms = o->retry_ms[k] > 0
                           ? (int)(o->retry_ms[k] < INT_MAX ? o->retry_ms[k] : INT_MAX)
                           : obx_backoff_delay_ms(1, opts->backoff_base_ms, opts->backoff_cap_ms,
                                                  (double)rand_r(o->env->jitter_seed) /
                                                      ((double)RAND_MAX + 1.0));

        st = obx_ledger_release(o->env->ledger, o->h->name, &o->events[k], &o->claims[k], delay_ms,
                                err);
        obx_verdict_nak(verdict(o, k), delay_ms);
        o->tally->retried += 1;
        return st;
    }
    if (o->dead_now[k]) {
        policy.max_attempts = 1; /* the endpoint said it never will (HTTP 410) */
    }
    st = obx_ledger_record_failure(o->env->ledger, o->h->name, &o->events[k], &o->claims[k],
                                   o->reasons[k], &policy, &fr, err);
    if (st != OUTBOX_OK) {
        return st;
    }
    if (!fr.applied) {
        /* The claim moved on to another replica: nothing was recorded, that one decides. */
        obx_verdict_nak(verdict(o, k), OBX_LEDGER_OUTAGE_RETRY_MS);
        return OUTBOX_OK;
    }
    o->tally->failed += 1;
    if (fr.dead) {
        obx_log(OUTBOX_LOG_WARN,
                "event exhausted max deliveries event_id=%s handler=%s attempts=%d reason=\"%s\"",
                o->events[k].event_id, o->h->name, fr.attempts, o->reasons[k]);
        o->tally->dead += 1;
        verdict(o, k)->dead++;
    } else {
        obx_verdict_nak(verdict(o, k), fr.retry_ms > 0 ? fr.retry_ms : 1);
    }
    return OUTBOX_OK;
}

/* The handler's runs inside the transaction, each in its own savepoint. */
static outbox_status
run_in_savepoints(struct offer *o, outbox_error *err)
{
    outbox_status st = OUTBOX_OK;

    for (size_t k = 0; k < o->count && st == OUTBOX_OK; k++) {
        if (o->claims[k].state != OBX_CLAIM_RUN) {
            continue;
        }
        st = obx_ledger_savepoint(o->env->ledger, err);
        if (st != OUTBOX_OK) {
            break;
        }
        run_one_in_txn(o, k);
        st = o->results[k] == OUTBOX_HANDLER_DONE
                 ? obx_ledger_release_savepoint(o->env->ledger, err)
                 : obx_ledger_rollback_to_savepoint(o->env->ledger, err);
    }
    return st;
}

/* Marks done, in one statement, every RUN claim whose handler returned DONE. */
static outbox_status
mark_successes(struct offer *o, outbox_error *err)
{
    struct obx_claim *done = calloc(o->count, sizeof(*done));
    size_t marked = 0, handled = 0;
    outbox_status st;

    if (done == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "consumer: out of memory");
    }
    for (size_t k = 0; k < o->count; k++) {
        done[k] = o->claims[k];
        if (done[k].state == OBX_CLAIM_RUN && o->results[k] != OUTBOX_HANDLER_DONE) {
            done[k].state = OBX_CLAIM_DONE; /* mark_done skips anything but RUN */
        }
        handled += done[k].state == OBX_CLAIM_RUN;
    }
    st = obx_ledger_mark_done(o->env->ledger, o->h->name, o->events, done, o->count, &marked, err);
    free(done);
    if (st == OUTBOX_OK && marked < handled) {
        /* Taken over meanwhile: the new owner decides; the redelivery finds out. */
        obx_log(OUTBOX_LOG_WARN, "claims lost before done handler=%s lost=%zu", o->h->name,
                handled - marked);
    }
    return st;
}

/* Failures and retries of the RUN claims, into the ledger and the verdicts. */
static outbox_status
settle_failures(struct offer *o, outbox_error *err)
{
    outbox_status st = OUTBOX_OK;

    for (size_t k = 0; k < o->count && st == OUTBOX_OK; k++) {
        if (o->claims[k].state == OBX_CLAIM_RUN && o->results[k] != OUTBOX_HANDLER_DONE) {
            st = settle_unhandled(o, k, err);
        }
    }
    return st;
}

/*
 * The fast path: every handler run straight in the batch transaction, one
 * round trip per event instead of three. Sets `*clean` when all of them
 * returned DONE and the transaction is still good; otherwise the caller
 * rolls it all back (claims and effects alike) and takes the careful path.
 */
static outbox_status
run_optimistic(struct offer *o, int *clean, outbox_error *err)
{
    *clean = 1;
    if (run_batch_in_txn(o) != 0) {
        return obx_fail(err, OUTBOX_ENOMEM, "consumer: out of memory");
    }
    for (size_t k = 0; k < o->count && *clean; k++) {
        if (o->claims[k].state == OBX_CLAIM_RUN) {
            *clean = o->results[k] == OUTBOX_HANDLER_DONE;
        }
    }
    *clean = *clean && obx_ledger_txn_state(o->env->ledger) == OBX_LEDGER_TXN_OPEN;
    if (!*clean && obx_ledger_txn_state(o->env->ledger) == OBX_LEDGER_TXN_BROKEN) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "ledger connection lost during a handler");
    }
    return OUTBOX_OK;
}

/*
 * Begin and claim the batch; then run it fast, or with a savepoint per
 * event. The fast path claims straight as done: it commits only if every
 * handler returned DONE, so no separate done mark is needed.
 */
static outbox_status
claim_and_run(struct offer *o, int careful, int *clean, outbox_error *err)
{
    outbox_status st = obx_ledger_begin(o->env->ledger, err);

    if (st == OUTBOX_OK && careful) {
        st =
            obx_ledger_claim(o->env->ledger, o->h->name, o->events, o->count,
                             o->env->cfg->ledger_lease_seconds, CLAIM_LOCK_WAIT_MS, o->claims, err);
    } else if (st == OUTBOX_OK) {
        st = obx_ledger_claim_as_done(o->env->ledger, o->h->name, o->events, o->count,
                                      CLAIM_LOCK_WAIT_MS, o->claims, err);
    }
    if (st == OUTBOX_OK && careful) {
        st = run_in_savepoints(o, err);
    } else if (st == OUTBOX_OK) {
        st = run_optimistic(o, clean, err);
    }
    return st;
}

static outbox_status
offer_transactional(struct offer *o, outbox_error *err)
{
    int clean = 1, careful = o->only_msg >= 0;
    outbox_status st = claim_and_run(o, careful, &clean, err);

    if (st == OUTBOX_OK && !clean) {
        /* Someone did not say DONE: redo the batch with each event in a savepoint. */
        obx_ledger_rollback(o->env->ledger);
        memset(o->results, 0, o->count * sizeof(*o->results));
        careful = 1;
        st = claim_and_run(o, careful, &clean, err);
    }
    if (st == OUTBOX_OK && careful) {
        st = mark_successes(o, err); /* the fast path's claims were written as done */
    }
    if (st == OUTBOX_OK) {
        st = settle_failures(o, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_ledger_commit(o->env->ledger, err);
    }
    if (st != OUTBOX_OK) {
        obx_ledger_rollback(o->env->ledger);
    }
    return st;
}

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
};

/*
 * RUN_AHEAD: claimed (and renewed by the keeper), its run not started yet.
 * RUN_ENDED: its run ended without DONE while a ledger round was written;
 * its outcome is recorded after that round.
 */
enum { RUN_WAITING, RUN_CLAIMING, RUN_AHEAD, RUN_GOING, RUN_STOPPED, RUN_ENDED, RUN_OVER };

enum { WAIT_ROUND_MS = 50 }; /* claims are checked for loss between rounds */

enum { AHEAD_WINDOWS = 4 }; /* claims taken ahead: up to this many in-flight windows */

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
    outbox_error ferr = {0};

    obx_claim_watch_init(&r->watch[k], claimed_ms, lease);
    r->kept[k] = obx_claim_keeper_watch(o->env->keeper, o->h->name, &o->events[k], &o->claims[k],
                                        lease, claimed_ms, &r->watch[k]);
    o->env->feed->ops->in_progress(o->env->feed, o->batch, o->msg_index[k], &ferr);
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
        apply_claim_states_in(o, k, k + 1);
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
    keep_reason(o, k, &e->err);
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
        return settle_unhandled(o, k, err);
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
static outbox_status
offer_external(struct offer *o, outbox_error *err)
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
            /* The first round of a batch is small, so its runs start soon; later ones grow
             * while runs go on, to spread the cost of their commit over more events. */
            room = cap - r.going - r.ahead_count;
            room = room < limit + r.going + r.ahead_count ? room : limit + r.going + r.ahead_count;
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

static void
count_handled(struct offer *o)
{
    size_t handled = 0;

    for (size_t k = 0; k < o->count; k++) {
        handled += o->claims[k].owner_token[0] != '\0' && o->results[k] == OUTBOX_HANDLER_DONE;
    }
    o->tally->handled += handled;
}

/*
 * The second chance of a transactional RETRY: each such event alone, in its
 * own transaction, where a conflict with the order of a batch cannot recur.
 * A second RETRY waits for the backoff like any other.
 */
static outbox_status
rerun_alone(struct offer *o, outbox_error *err)
{
    outbox_status st = OUTBOX_OK;

    for (size_t k = 0; k < o->count && st == OUTBOX_OK; k++) {
        struct offer one = {.env = o->env,
                            .tally = o->tally,
                            .h = o->h,
                            .batch = o->batch,
                            .verdicts = o->verdicts,
                            .only_msg = (long)o->msg_index[k]};

        if (!o->rerun[k]) {
            continue;
        }
        if (offer_init(&one) != 0) {
            st = obx_fail(err, OUTBOX_ENOMEM, "consumer: out of memory");
        } else if ((st = offer_transactional(&one, err)) == OUTBOX_OK) {
            apply_claim_states(&one);
            count_handled(&one);
        } else {
            nak_all(&one);
        }
        offer_fini(&one);
    }
    return st;
}

outbox_status
obx_consumer_offer(const struct obx_offer_env *env, const struct obx_handler *h,
                   struct obx_feed_batch *batch, struct obx_msg_verdict *verdicts,
                   struct obx_offer_tally *tally, outbox_error *err)
{
    struct offer o = {
        .env = env, .tally = tally, .h = h, .batch = batch, .verdicts = verdicts, .only_msg = -1};
    outbox_status st = OUTBOX_OK;

    if (offer_init(&o) != 0) {
        offer_fini(&o);
        return obx_fail(err, OUTBOX_ENOMEM, "consumer: out of memory");
    }
    if (o.count > 0 && obx_handler_is_external(h)) {
        sort_by_aggregate(&o, by_aggregate_then_arrival);
        st = offer_external(&o, err);
    } else if (o.count > 0) { /* transactional and SQL handlers */
        sort_by_aggregate(&o, by_aggregate_then_event);
        st = offer_transactional(&o, err);
        if (st == OUTBOX_OK) {
            apply_claim_states(&o);
        } else {
            /* Rolled back, claims and effects alike: redeliver, spend nothing. */
            nak_all(&o);
        }
    }
    if (st == OUTBOX_OK) {
        count_handled(&o);
        st = rerun_alone(&o, err);
    }
    offer_fini(&o);
    return st;
}
