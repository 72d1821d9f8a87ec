/* SPDX-License-Identifier: MIT */
/*
 * batch.c - one handler over one fetched batch, through the ledger.
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
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "envelope/subject.h"
#include "offer_internal.h"

#include "common/banned.h" /* last: poisons unsafe functions */

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

/* Every matched message still open goes back for redelivery; nothing is spent. */
static void
nak_all(struct offer *o)
{
    for (size_t k = 0; k < o->count; k++) {
        obx_verdict_nak(verdict(o, k), OBX_LEDGER_OUTAGE_RETRY_MS);
    }
    o->tally->ledger_errors += o->count;
}

static void
apply_claim_states(struct offer *o)
{
    obx_offer_claim_states_in(o, 0, o->count);
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
        } else if ((st = obx_offer_transactional(&one, err)) == OUTBOX_OK) {
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
        st = obx_offer_external(&o, err);
    } else if (o.count > 0) { /* transactional and SQL handlers */
        sort_by_aggregate(&o, by_aggregate_then_event);
        st = obx_offer_transactional(&o, err);
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
