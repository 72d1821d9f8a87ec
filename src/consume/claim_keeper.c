/* SPDX-License-Identifier: MIT */
/*
 * claim_keeper.c - renews a running external handler's claim from its own
 * thread and connection (see claim_keeper.h).
 *
 * The lease itself is database time. The keeper only bounds it from below
 * on the monotonic clock: a claim or renewal sent at local time t set
 * claimed_until to the server's now() plus the lease, and the server read
 * its now() after t, so the claim cannot run out before t + lease. The
 * handler is told to stop a third of the lease before that bound, so it
 * has stopped before another replica can take the claim over, even when
 * the keeper's connection or its thread is stuck.
 */
#include "claim_keeper.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { RETRY_MIN_MS = 50 };

/* One claim being renewed. */
struct kept {
    struct obx_claim_watch *watch; /* NULL: a free entry */
    unsigned long generation;      /* bumped by every watch and unwatch of this entry */
    char handler[65];
    char event_id[37];
    struct obx_claim claim;
    int lease_seconds;
    long long next_ms; /* monotonic time of the next renewal; LLONG_MAX: none */
};

struct obx_claim_keeper {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* on the monotonic clock */
    struct obx_store_options opts;
    struct obx_ledger *ledger;               /* the thread's own connection; NULL while down */
    int stopping;                            /* below: under `lock` */
    struct kept kept[OBX_KEEPER_MAX_CLAIMS]; /* the claims of the runs going on */
};

static long long
renew_every_ms(int lease_seconds)
{
    return lease_seconds * 1000LL / 3;
}

void
obx_claim_watch_init(struct obx_claim_watch *w, long long claimed_ms, int lease_seconds)
{
    atomic_init(&w->lost, 0);
    atomic_init(&w->good_until_ms,
                claimed_ms + lease_seconds * 1000LL - renew_every_ms(lease_seconds));
}

int
obx_claim_watch_lost(const struct obx_claim_watch *w)
{
    return atomic_load(&w->lost) || obx_monotonic_ms() >= atomic_load(&w->good_until_ms);
}

/* Waits on `wake` until `until_ms` at the latest; `lock` held. */
static void
wait_until(struct obx_claim_keeper *k, long long until_ms)
{
    struct timespec ts = {.tv_sec = (time_t)(until_ms / 1000),
                          .tv_nsec = (long)(until_ms % 1000) * 1000000L};

    pthread_cond_timedwait(&k->wake, &k->lock, &ts);
}

/* Applies one renewal's outcome, if the claim it was for is still watched; `lock` held. */
static void
take_outcome(struct kept *k, outbox_status st, int held, long long sent_ms, const outbox_error *err)
{
    long long every = renew_every_ms(k->lease_seconds);

    if (st == OUTBOX_OK && held) {
        atomic_store(&k->watch->good_until_ms, sent_ms + k->lease_seconds * 1000LL - every);
        k->next_ms = sent_ms + every;
    } else if (st == OUTBOX_OK) {
        atomic_store(&k->watch->lost, 1);
        k->next_ms = LLONG_MAX;
        obx_log(OUTBOX_LOG_WARN,
                "claim lost while its handler runs: taken over or settled elsewhere "
                "event_id=%s handler=%s",
                k->event_id, k->handler);
    } else {
        k->next_ms = obx_monotonic_ms() + (every / 4 > RETRY_MIN_MS ? every / 4 : RETRY_MIN_MS);
        obx_log(OUTBOX_LOG_WARN,
                "claim renewal failed, trying again event_id=%s handler=%s error=\"%s\"",
                k->event_id, k->handler, err->message);
    }
}

/* One renewal of claim `e`; `lock` held, released for the round trip. */
static void
renew(struct obx_claim_keeper *k, struct kept *e)
{
    unsigned long generation = e->generation;
    struct obx_claim claim = e->claim;
    char handler[sizeof(e->handler)], event_id[sizeof(e->event_id)];
    struct obx_ledger_event event = {.event_id = event_id};
    int lease_seconds = e->lease_seconds, held = 0;
    outbox_error err = {0};
    outbox_status st = OUTBOX_OK;
    long long sent_ms;

    memcpy(handler, e->handler, sizeof(handler));
    memcpy(event_id, e->event_id, sizeof(event_id));
    pthread_mutex_unlock(&k->lock);
    if (k->ledger == NULL) {
        st = obx_ledger_open(&k->opts, &k->ledger, &err);
    }
    sent_ms = obx_monotonic_ms();
    if (st == OUTBOX_OK) {
        st = obx_ledger_renew(k->ledger, handler, &event, &claim, lease_seconds, &held, &err);
    }
    if (st == OUTBOX_EUNAVAILABLE && k->ledger != NULL) {
        obx_ledger_close(k->ledger); /* opened again at the next try */
        k->ledger = NULL;
    }
    pthread_mutex_lock(&k->lock);
    if (generation == e->generation && e->watch != NULL) {
        take_outcome(e, st, held, sent_ms, &err);
    }
}

/* The watched claim due soonest; NULL when none is. `lock` held. */
static struct kept *
soonest(struct obx_claim_keeper *k)
{
    struct kept *best = NULL;

    for (size_t i = 0; i < OBX_KEEPER_MAX_CLAIMS; i++) {
        struct kept *e = &k->kept[i];

        if (e->watch != NULL && e->next_ms != LLONG_MAX &&
            (best == NULL || e->next_ms < best->next_ms)) {
            best = e;
        }
    }
    return best;
}

static void *
keeper_main(void *arg)
{
    struct obx_claim_keeper *k = arg;
    outbox_error err = {0};

    /* Connected ahead of the first claim, so the first renewal is one round trip. */
    if (obx_ledger_open(&k->opts, &k->ledger, &err) != OUTBOX_OK) {
        k->ledger = NULL;
    }
    pthread_mutex_lock(&k->lock);
    while (!k->stopping) {
        struct kept *e = soonest(k);

        if (e == NULL) {
            pthread_cond_wait(&k->wake, &k->lock);
        } else if (obx_monotonic_ms() < e->next_ms) {
            wait_until(k, e->next_ms);
        } else {
            renew(k, e);
        }
    }
    pthread_mutex_unlock(&k->lock);
    obx_ledger_close(k->ledger);
    return NULL;
}

struct obx_claim_keeper *
obx_claim_keeper_start(const struct obx_store_options *opts)
{
    struct obx_claim_keeper *k = calloc(1, sizeof(*k));
    pthread_condattr_t ca;

    if (k == NULL) {
        return NULL;
    }
    k->opts = *opts;
    pthread_mutex_init(&k->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&k->thread, NULL, keeper_main, k) != 0) {
        pthread_cond_destroy(&k->wake);
        pthread_mutex_destroy(&k->lock);
        free(k);
        obx_log(OUTBOX_LOG_WARN, "claim keeper did not start: external handlers are stopped "
                                 "at two thirds of the ledger lease");
        return NULL;
    }
    return k;
}

void
obx_claim_keeper_stop(struct obx_claim_keeper *k)
{
    if (k == NULL) {
        return;
    }
    pthread_mutex_lock(&k->lock);
    k->stopping = 1;
    pthread_cond_signal(&k->wake);
    pthread_mutex_unlock(&k->lock);
    pthread_join(k->thread, NULL);
    pthread_cond_destroy(&k->wake);
    pthread_mutex_destroy(&k->lock);
    free(k);
}

int
obx_claim_keeper_watch(struct obx_claim_keeper *k, const char *handler,
                       const struct obx_ledger_event *event, const struct obx_claim *claim,
                       int lease_seconds, long long claimed_ms, struct obx_claim_watch *watch)
{
    int slot = -1;

    if (k == NULL) {
        return -1;
    }
    pthread_mutex_lock(&k->lock);
    for (int i = 0; i < OBX_KEEPER_MAX_CLAIMS && slot < 0; i++) {
        slot = k->kept[i].watch == NULL ? i : -1;
    }
    if (slot >= 0) {
        struct kept *e = &k->kept[slot];

        e->generation++;
        e->watch = watch;
        snprintf(e->handler, sizeof(e->handler), "%s", handler);
        snprintf(e->event_id, sizeof(e->event_id), "%s", event->event_id);
        e->claim = *claim;
        e->lease_seconds = lease_seconds;
        e->next_ms = claimed_ms + renew_every_ms(lease_seconds);
        pthread_cond_signal(&k->wake);
    }
    pthread_mutex_unlock(&k->lock);
    return slot;
}

void
obx_claim_keeper_unwatch(struct obx_claim_keeper *k, int slot)
{
    if (k == NULL || slot < 0 || slot >= OBX_KEEPER_MAX_CLAIMS) {
        return;
    }
    pthread_mutex_lock(&k->lock);
    k->kept[slot].generation++;
    k->kept[slot].watch = NULL;
    pthread_mutex_unlock(&k->lock);
}
