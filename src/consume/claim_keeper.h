/* SPDX-License-Identifier: MIT */
/*
 * claim_keeper.h - keeps an external handler's claim alive while it runs
 * (claim_keeper.c), from its own thread and its own database connection:
 * the run thread is inside the handler, and a handler's own call must not
 * wait on a renewal.
 *
 * The claim is renewed every third of the lease. The handler learns
 * through its delivery (outbox_delivery_claim_lost) when the claim is gone,
 * or when no renewal has been confirmed for two thirds of the lease: it
 * must stop before the lease can run out and another replica take over.
 */
#ifndef OBX_CLAIM_KEEPER_H
#define OBX_CLAIM_KEEPER_H

#include <stdatomic.h>

#include "ledger/ledger.h"
#include "store/store.h"

/*
 * One running claim as its handler sees it: written by the keeper, read by
 * the handler's thread without a lock.
 */
struct obx_claim_watch {
    atomic_int lost;            /* a renewal found the claim no longer ours */
    atomic_llong good_until_ms; /* monotonic: stop by then unless renewed */
};

/* A watch for a claim whose statement was sent at `claimed_ms` (monotonic) for `lease_seconds`. */
void obx_claim_watch_init(struct obx_claim_watch *w, long long claimed_ms, int lease_seconds);

/* 1 once the handler must stop: the claim is gone or may run out before the next renewal. */
int obx_claim_watch_lost(const struct obx_claim_watch *w);

struct obx_claim_keeper;

/*
 * Starts the keeper's thread; it connects with `opts` (borrowed, kept for
 * the keeper's life) by itself. NULL if the thread cannot start: claims are
 * then not renewed, and their handlers are stopped at two thirds of the lease.
 */
struct obx_claim_keeper *obx_claim_keeper_start(const struct obx_store_options *opts);

/* Stops the thread and closes its connection. NULL is fine. */
void obx_claim_keeper_stop(struct obx_claim_keeper *k);

/* The most claims one keeper renews at once: every claim an external handler holds (claims_cap()).
 */
enum { OBX_KEEPER_MAX_CLAIMS = 1024 };

/*
 * Renews `claim` of `handler` for `event` (all copied) every third of
 * `lease_seconds`, from `claimed_ms` (when its claim statement was sent),
 * reporting into `watch` until obx_claim_keeper_unwatch. Returns the
 * entry to unwatch, or -1 (NULL keeper, or OBX_KEEPER_MAX_CLAIMS watched
 * already: the run is then stopped at two thirds of the lease).
 */
int obx_claim_keeper_watch(struct obx_claim_keeper *k, const char *handler,
                           const struct obx_ledger_event *event, const struct obx_claim *claim,
                           int lease_seconds, long long claimed_ms, struct obx_claim_watch *watch);

/* Stops renewing entry `slot`; its watch is not written once this returns. -1: nothing. */
void obx_claim_keeper_unwatch(struct obx_claim_keeper *k, int slot);

#endif
