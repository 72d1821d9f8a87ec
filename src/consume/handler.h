/* SPDX-License-Identifier: MIT */
/*
 * handler.h - a registered handler: its name, filter and kind, and the one
 * interface every kind is run through, so the offer loop (consumer_offer.c)
 * reads the same for all of them.
 *
 * Two families, by where the effect happens:
 * - transactional kinds (a C tx callback, tx_kind.c; `sql:`,
 *   sql_handler_pg.c) run a batch inside the ledger's open transaction:
 *   claim, effects and the done mark commit together;
 * - external kinds (a C ext callback, ext_kind.c; `exec:` and `http:` in
 *   src/handlers/) run between a committed claim and its done mark,
 *   several at once: the loop claims an event, starts its run, and settles
 *   it when the kind reports that it ended.
 */
#ifndef OBX_HANDLER_H
#define OBX_HANDLER_H

#include <stddef.h>

#include "delivery.h"
#include "ledger/ledger.h"
#include "outbox/worker.h"

enum { OBX_MAX_HANDLERS = 32 };

/* The most runs an external kind may keep going at once (its in-flight limit's cap). */
enum { OBX_MAX_IN_FLIGHT = 256 };

/* How one external run ended, as its kind reports it. */
struct obx_run_end {
    unsigned long tag; /* what the loop passed to start() */
    outbox_handler_result result;
    outbox_error err;   /* FAIL: the reason; RETRY: why (OUTBOX_EUNAVAILABLE: an outage) */
    long long retry_ms; /* RETRY: after this delay (Retry-After); 0: the usual backoff */
    int dead_now;       /* FAIL: dead-letter at once, whatever attempts are left (HTTP 410) */
};

struct obx_handler;

struct obx_handler_ops {
    const char *kind; /* "tx", "sql", "ext", "exec", "http": for the log */
    /*
     * Transactional kinds: runs `count` deliveries inside the ledger's
     * open transaction, filling results[i] (and errs[i]). NULL for
     * external kinds.
     */
    void (*run_in_txn)(const struct obx_handler *h, struct obx_ledger *ledger,
                       const outbox_delivery *const *d, size_t count,
                       outbox_handler_result *results, outbox_error *errs);
    /*
     * External kinds: starts the run of `d` (valid until its end is
     * reported) under `tag`, without waiting for it. Its end is reported by
     * wait(), also when it ended at once.
     */
    void (*start)(void *ctx, unsigned long tag, const outbox_delivery *d);
    /*
     * Waits up to `timeout_ms` for runs to end and reports up to `max` of
     * them into `ends`; returns how many.
     */
    size_t (*wait)(void *ctx, int timeout_ms, struct obx_run_end *ends, size_t max);
    /* Stops run `tag` at once (its claim was lost); its end is still reported, as RETRY. */
    void (*stop)(void *ctx, unsigned long tag);
    /*
     * Milliseconds until the kind takes new runs (an outage: its endpoint
     * is unreachable and it backs off); 0: now. NULL: always now.
     */
    long long (*paused_ms)(void *ctx);
};

struct obx_handler {
    char name[65];
    char *filter; /* owned; NULL: every event */
    const struct obx_handler_ops *ops;
    outbox_tx_handler_fn tx; /* tx kind */
    void *ctx;               /* tx kind: the callback's; external kinds: passed to their ops */
    void *owned_ctx;         /* freed with the handler (the ext kind's state); else NULL */
    char *statement;         /* sql kind: owned */
    size_t in_flight;        /* external kinds: runs at once, 1..OBX_MAX_IN_FLIGHT */
};

/* The kinds the library runs itself. */
extern const struct obx_handler_ops obx_tx_kind;  /* tx_kind.c */
extern const struct obx_handler_ops obx_sql_kind; /* sql_handler_pg.c */

/* The ext kind's state: a C callback run in the loop's thread, one at a time (ext_kind.c). */
struct obx_ext_kind {
    outbox_ext_handler_fn fn;
    void *ctx;
    int have; /* a run ended and is not reported yet */
    struct obx_run_end end;
};

extern const struct obx_handler_ops obx_ext_kind;

/*
 * Registers a handler of an external kind made outside the library (exec:
 * and http:, src/handlers/): `ops` and `ctx` are borrowed for the
 * consumer's lifetime; up to `in_flight` (1..OBX_MAX_IN_FLIGHT) runs at once.
 */
outbox_status obx_consumer_add_external(outbox_consumer *c, const char *name,
                                        const char *subject_filter,
                                        const struct obx_handler_ops *ops, void *ctx,
                                        size_t in_flight, outbox_error *err);

/* 1 for the kinds that run between a committed claim and its done mark. */
int obx_handler_is_external(const struct obx_handler *h);

#endif
