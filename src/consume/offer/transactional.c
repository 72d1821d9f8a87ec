/* SPDX-License-Identifier: MIT */
/*
 * transactional.c - a transactional handler over an offer: one ledger
 * transaction for the whole batch: claim everything, run each event (all in
 * the transaction, or each in a savepoint once one failed), mark the
 * successes done, record failures and retries, commit. Claim, effects and
 * `done` commit together, so database effects happen exactly once and a
 * crash leaves no claim behind.
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "offer_internal.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* Runs the handler for slot k inside the ledger's transaction; the result is kept in `o`. */
static void
run_one_in_txn(struct offer *o, size_t k)
{
    struct outbox_delivery d = delivery_of(o, k);
    const outbox_delivery *one[] = {&d};
    outbox_error herr = {0};

    o->h->ops->run_in_txn(o->h, o->env->ledger, one, 1, &o->results[k], &herr);
    obx_offer_keep_reason(o, k, &herr);
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
            obx_offer_keep_reason(o, slot[i], &errs[i]);
        }
    }
    free(d);
    free(dp);
    free(results);
    free(errs);
    free(slot);
    return rc;
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
            st = obx_offer_settle_unhandled(o, k, err);
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

outbox_status
obx_offer_transactional(struct offer *o, outbox_error *err)
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
