/* SPDX-License-Identifier: MIT */
/*
 * consumer_internal.h - the consumer object, shared by consumer.c (the
 * loop), consumer_options.c (defaults and checks) and consumer_offer.c
 * (running one handler over a batch through the ledger).
 */
#ifndef OBX_CONSUMER_INTERNAL_H
#define OBX_CONSUMER_INTERNAL_H

#include <pthread.h>
#include <signal.h>

#include "envelope.h"
#include "feed.h"
#include "ledger.h"
#include "outbox/worker.h"
#include "owned_strings.h"

enum { OBX_MAX_HANDLERS = 32 };

enum obx_handler_kind { OBX_HANDLER_TX, OBX_HANDLER_EXT, OBX_HANDLER_SQL };

struct obx_handler {
    char name[65];
    char *filter; /* owned; NULL: every event */
    enum obx_handler_kind kind;
    outbox_tx_handler_fn tx;
    outbox_ext_handler_fn ext;
    void *ctx;       /* borrowed from the caller */
    char *statement; /* SQL handlers: owned */
};

/*
 * Runs a SQL handler's statement for `count` deliveries inside the ledger's
 * open transaction, in one pipeline (prepared once per connection), filling results[i] (and errs[i]
 * for a FAIL). A statement that fails aborts the rest: they come back as
 * RETRY, having not run.
 */
void obx_sql_handler_run(struct obx_ledger *ledger, const char *statement,
                         const outbox_delivery *const *d, size_t count,
                         outbox_handler_result *results, outbox_error *errs);

/* One message of a batch: who it is, and what its handlers decided. */
struct obx_msg_verdict {
    const char *event_id;     /* the envelope's id (borrowed from `env`): the ledger key */
    const char *aggregate_id; /* the envelope's aggregate id, to order the batch */
    struct obx_envelope env;  /* parsed envelope; empty when bad */
    int bad;                  /* not a valid envelope: nothing can run it */
    int matched;              /* handlers whose filter matched */
    int dead;                 /* of those, dead-lettered (now or earlier) */
    int nak;                  /* some handler must see it again */
    long long nak_delay_ms;   /* the soonest of those */
};

struct outbox_delivery {
    const struct obx_feed_msg *msg; /* borrowed from the batch */
    const char *event_id;           /* the envelope's id, borrowed */
    int attempts;
};

struct outbox_consumer {
    outbox_consumer_options opts; /* strings borrow from `owned` */
    struct obx_owned_strings owned;
    char default_name[96];
    struct obx_handler handlers[OBX_MAX_HANDLERS];
    int handler_count;
    volatile sig_atomic_t stop_requested;
    pthread_mutex_t stats_lock;
    outbox_consumer_stats stats;   /* guarded by stats_lock */
    struct obx_ledger *ledger;     /* NULL while the database is away */
    struct obx_feed *feed;         /* NULL while its server is away */
    int db_pause_ms, bus_pause_ms; /* growing pauses during outages */
    long long next_maintenance_ms; /* monotonic time of the next ledger prune */
    unsigned int jitter_seed;      /* rand_r() state, its own per replica; the run thread's */
};

outbox_status obx_consumer_options_adopt(struct outbox_consumer *c,
                                         const outbox_consumer_options *opts, outbox_error *err);

/* Adds `n` to a counter under the stats lock. */
void obx_consumer_count(struct outbox_consumer *c, unsigned long long *counter,
                        unsigned long long n);

/* Records a NAK for message `v` after `delay_ms` (keeps the soonest). */
void obx_verdict_nak(struct obx_msg_verdict *v, long long delay_ms);

/* The redelivery delay after a ledger failure; it spends no attempt. */
enum { OBX_LEDGER_OUTAGE_RETRY_MS = 1000 };

/*
 * Offers every message of `batch` that `h` matches to `h`, through the
 * ledger, and updates `verdicts`. Returns OUTBOX_EUNAVAILABLE when the
 * ledger connection broke (the messages it did not settle get a NAK).
 */
outbox_status obx_consumer_offer(struct outbox_consumer *c, const struct obx_handler *h,
                                 struct obx_feed_batch *batch, struct obx_msg_verdict *verdicts,
                                 outbox_error *err);

#endif
