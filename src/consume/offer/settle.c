/* SPDX-License-Identifier: MIT */
/*
 * settle.c - what an offer's claim states and failed runs leave, shared by
 * the transactional and the external paths: a claim that needs no run is
 * skipped, dead-lettered or delayed; a failure's reason is kept; a failure
 * or retry is written into the ledger (attempts, backoff, dead letter) and
 * the message's verdict.
 */
#include <limits.h>
#include <stdio.h>

#include "common/error.h"
#include "offer_internal.h"
#include "support/backoff.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* Claims of slots [from, to) that need no run: done, dead (skip), held or backing off (later). */
void
obx_offer_claim_states_in(struct offer *o, size_t from, size_t to)
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

/*
 * A failure's reason is kept for the ledger. A run given back because the
 * database failed under it spends nothing, so it is counted and its reason
 * kept for the consumer's log: an outage that lasts must show.
 */
void
obx_offer_keep_reason(struct offer *o, size_t k, const outbox_error *herr)
{
    if (o->results[k] == OUTBOX_HANDLER_FAIL) {
        snprintf(o->reasons[k], sizeof(o->reasons[k]), "%s",
                 herr->message[0] ? herr->message : "handler failed");
    } else if (o->results[k] == OUTBOX_HANDLER_RETRY && herr->code == OUTBOX_EUNAVAILABLE) {
        o->tally->outages++;
        snprintf(o->tally->outage_reason, sizeof(o->tally->outage_reason), "%.200s", herr->message);
    }
}

/* Writes the outcome of slot k's failure or retry into the ledger and the verdict. */
outbox_status
obx_offer_settle_unhandled(struct offer *o, size_t k, outbox_error *err)
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
