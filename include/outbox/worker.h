/* SPDX-License-Identifier: MIT */
/*
 * worker.h - relay and consumers (liboutbox-worker, which links nats.c).
 *
 * The rules of outbox.h hold here too: outbox_status returns, an optional
 * caller-owned outbox_error, borrowed arguments, x_free(NULL) is a no-op.
 */
#ifndef OUTBOX_WORKER_H
#define OUTBOX_WORKER_H

#include "outbox/outbox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- logging --------------------------------------------------------------------------- */

typedef enum outbox_log_level {
    OUTBOX_LOG_DEBUG,
    OUTBOX_LOG_INFO,
    OUTBOX_LOG_WARN,
    OUTBOX_LOG_ERROR,
} outbox_log_level;

/*
 * Receives one formatted line: a constant message followed by key=value
 * fields. `line` is valid only during the call. Called from the worker's
 * threads, so it must be thread-safe.
 */
typedef void (*outbox_log_fn)(void *ctx, outbox_log_level level, const char *line);

/*
 * Installs `fn` for the whole process (NULL: log nowhere, the default).
 * Call it once at start-up, before starting workers. The writer library
 * never logs: it returns every failure to its caller.
 */
OUTBOX_API void outbox_set_logger(outbox_log_fn fn, void *ctx, outbox_log_level min_level);

/* ---- relay --------------------------------------------------------------------------- */

typedef enum outbox_bus_kind {
    OUTBOX_BUS_JETSTREAM, /* acked and deduplicated by Nats-Msg-Id: exactly once in the stream */
    OUTBOX_BUS_NATS_CORE, /* fire-and-forget: at most once on the broker side */
    OUTBOX_BUS_DB,        /* no broker: consumers read the outbox table directly */
} outbox_bus_kind;

typedef enum outbox_relay_mode {
    OUTBOX_RELAY_MARK,  /* published rows become status done, kept for replay until retention */
    OUTBOX_RELAY_PRUNE, /* published rows are deleted */
} outbox_relay_mode;

/*
 * Counters since the relay started, read with outbox_relay_stat() from any
 * thread. New ones may be added at the end in a minor release.
 */
typedef enum outbox_relay_stat_id {
    OUTBOX_RELAY_LEASED,      /* rows leased */
    OUTBOX_RELAY_PUBLISHED,   /* rows acked and finished */
    OUTBOX_RELAY_DUPLICATES,  /* of those, acks flagged duplicate */
    OUTBOX_RELAY_RETRIED,     /* rejected, scheduled again */
    OUTBOX_RELAY_DEAD,        /* dead-lettered (attempts or lease expiries) */
    OUTBOX_RELAY_INVALID,     /* quarantined as invalid */
    OUTBOX_RELAY_RELEASED,    /* handed back after a transport failure */
    OUTBOX_RELAY_LOST,        /* finishes refused because the lease had moved on */
    OUTBOX_RELAY_BATCHES,     /* lease batches published */
    OUTBOX_RELAY_DATABASE_UP, /* 1 while the database answers */
    OUTBOX_RELAY_BROKER_UP,   /* 1 while the broker answers */
    /* Sampled from the database every few seconds (0 until the first sample): */
    OUTBOX_RELAY_OLDEST_DUE_SECONDS,         /* age of the oldest row due now */
    OUTBOX_RELAY_OLDEST_UNCONFIRMED_SECONDS, /* age of the oldest row leased, maybe published,
                                              * not finished: past the stream's duplicate
                                              * window a republish could store it twice */
    OUTBOX_RELAY_TABLE_DEAD_TUPLES,          /* dead row versions in the outbox table */
    OUTBOX_RELAY_TABLE_LAST_VACUUM_UNIX,     /* the last (auto)vacuum of it; 0: none known */
    OUTBOX_RELAY_INDEX_ENTRIES_PER_LEASE,    /* due-index entries read per lease since the
                                              * previous sample: what a lease scans */
    OUTBOX_RELAY_DEAD_LETTERS,               /* the relay's own dead letters in the table */
    OUTBOX_RELAY_ROWS_SCANNED_PER_LEASE,     /* table rows a lease read (leased or stepped
                                              * over) since the previous sample, as
                                              * PostgreSQL counts the claim index's fetches */
    OUTBOX_RELAY_XMIN_HORIZON_AGE_SECONDS,   /* age of the oldest transaction or prepared
                                              * transaction holding back the xmin horizon
                                              * (vacuum cannot remove what it may still see) */
    /* Counted as they happen: */
    OUTBOX_RELAY_LEASE_EXPIRIES, /* rows taken over after their lease ran out with no
                                  * outcome (a relay died or stalled): leased again or
                                  * quarantined */
    /* Sampled, as above: */
    OUTBOX_RELAY_CLAIM_OPEN_SECONDS, /* age of the oldest window claim still out (held by
                                      * no transaction: it holds back no vacuum) */
    OUTBOX_RELAY_BLOCKED_AGGREGATES, /* ordered aggregates whose head is dead or quarantined
                                      * and not skipped: their later events wait */
} outbox_relay_stat_id;

/*
 * Latency histograms. Every one has the same buckets: their upper bounds in
 * seconds, ascending, the last one INFINITY. Returns how many there are.
 */
OUTBOX_API size_t outbox_histogram_bounds(const double **bounds);

typedef enum outbox_relay_histogram_id {
    OUTBOX_RELAY_LEASE_SECONDS,   /* one lease statement, sent to answered */
    OUTBOX_RELAY_FINISH_SECONDS,  /* one finish statement */
    OUTBOX_RELAY_PUBLISH_SECONDS, /* one batch, first publish to last ack */
} outbox_relay_histogram_id;

typedef struct outbox_relay outbox_relay;

/*
 * A relay configured by `cfg` (an OUTBOX_CONFIG_RELAY configuration; it is
 * copied, so it may be freed at once). Connects nothing yet. OUTBOX_EINVAL
 * names the setting: database_url unset, a backoff cap below its base, bus
 * db (which needs no relay), or a configuration of another kind.
 */
OUTBOX_API outbox_status outbox_relay_new(const outbox_config *cfg, outbox_relay **out,
                                          outbox_error *err);
OUTBOX_API void outbox_relay_free(outbox_relay *relay);

/*
 * Runs the relay in the calling thread until outbox_relay_stop(): connects
 * (and keeps reconnecting) to PostgreSQL and NATS, creates or checks the
 * stream, then leases, publishes and finishes. Outages pause it; they are
 * not errors. On stop it finishes or releases what it holds within the
 * drain timeout and returns OUTBOX_OK.
 */
OUTBOX_API outbox_status outbox_relay_run(outbox_relay *relay, outbox_error *err);

/* Asks a running relay to stop. Safe from any thread and from a signal handler. */
OUTBOX_API void outbox_relay_stop(outbox_relay *relay);

/* One counter or gauge; 0 for an id this library does not know. */
OUTBOX_API unsigned long long outbox_relay_stat(outbox_relay *relay, outbox_relay_stat_id id);

/*
 * Histogram `id`: `counts[i]` gets how many observations were at or below
 * bound i (cumulative, as Prometheus reads them) for up to `cap` buckets,
 * `*sum_seconds` (if not NULL) their total. Returns the buckets written; 0
 * for an id this library does not know. From any thread.
 */
OUTBOX_API size_t outbox_relay_histogram(outbox_relay *relay, outbox_relay_histogram_id id,
                                         unsigned long long *counts, size_t cap,
                                         double *sum_seconds);

/* ---- consumers ------------------------------------------------------------------------ */

/* What a handler tells the consumer. */
typedef enum outbox_handler_result {
    OUTBOX_HANDLER_DONE,  /* handled: never run again for this event */
    OUTBOX_HANDLER_RETRY, /* not now (e.g. a dependency is busy): try later, spend no attempt */
    OUTBOX_HANDLER_FAIL,  /* failed: counts an attempt; dead-lettered at OUTBOX_MAX_ATTEMPTS */
} outbox_handler_result;

/* One event handed to a handler. Valid only during the handler call. */
typedef struct outbox_delivery outbox_delivery;

OUTBOX_API const char *outbox_delivery_event_id(const outbox_delivery *d);
OUTBOX_API const char *outbox_delivery_subject(const outbox_delivery *d);
/* The envelope JSON (NUL-terminated; `*len` gets its length if not NULL). */
OUTBOX_API const char *outbox_delivery_envelope(const outbox_delivery *d, size_t *len);
/* Failures of this handler for this event so far (0 on the first try). */
OUTBOX_API int outbox_delivery_attempts(const outbox_delivery *d);
/*
 * 1 once an external handler must stop: its claim was taken over, or could
 * not be renewed and may run out before the next renewal (the consumer
 * renews it every third of OUTBOX_LEDGER_LEASE_SECONDS while the handler
 * runs). A handler that may outlast the lease polls it and returns at
 * once; its result is then not recorded and spends no attempt. Always 0
 * for transactional handlers, whose claim the transaction holds.
 */
OUTBOX_API int outbox_delivery_claim_lost(const outbox_delivery *d);

/*
 * A transactional handler: `conn` is inside the ledger's transaction, so
 * the claim, whatever the handler writes through `conn`, and the `done`
 * mark commit together: its database effects happen exactly once, and a
 * crash leaves no claim behind. The handler must not BEGIN, COMMIT or
 * ROLLBACK. On FAIL, put the reason in `err` (it becomes last_error).
 */
typedef outbox_handler_result (*outbox_tx_handler_fn)(void *ctx, PGconn *conn,
                                                      const outbox_delivery *d, outbox_error *err);

/*
 * An external handler (an HTTP call, an e-mail...): runs between a
 * committed claim and the `done` mark. At least once: a crash after the
 * effect and before the mark runs it again after the claim lease.
 */
typedef outbox_handler_result (*outbox_ext_handler_fn)(void *ctx, const outbox_delivery *d,
                                                       outbox_error *err);

/*
 * Counters since the consumer started, read with outbox_consumer_stat()
 * from any thread. New ones may be added at the end in a minor release.
 */
typedef enum outbox_consumer_stat_id {
    OUTBOX_CONSUMER_FETCHED,        /* messages received */
    OUTBOX_CONSUMER_HANDLED,        /* handler runs that returned DONE */
    OUTBOX_CONSUMER_SKIPPED,        /* already done (redeliveries, republishes) */
    OUTBOX_CONSUMER_DEFERRED,       /* claim held elsewhere or backing off: redelivered later */
    OUTBOX_CONSUMER_FAILED,         /* handler failures (attempts spent) */
    OUTBOX_CONSUMER_RETRIED,        /* RETRY results (no attempt spent) */
    OUTBOX_CONSUMER_DEAD,           /* dead-lettered (event, handler) pairs */
    OUTBOX_CONSUMER_LEDGER_ERRORS,  /* ledger unavailable: redelivered, nothing spent */
    OUTBOX_CONSUMER_DATABASE_UP,    /* 1 while the database answers */
    OUTBOX_CONSUMER_BROKER_UP,      /* 1 while the feed's server answers */
    OUTBOX_CONSUMER_CLAIMS,         /* ledger claims made (an event, a handler) */
    OUTBOX_CONSUMER_CONFLICTS,      /* claims found held by another replica: deferred */
    OUTBOX_CONSUMER_OUTAGE_RETRIES, /* handler runs given back: the database failed under them */
    OUTBOX_CONSUMER_CLAIMS_LOST,    /* external runs stopped or dropped: their claim was lost */
    OUTBOX_CONSUMER_REFUSED,        /* messages no relay sent (message_check.h): terminated */
    OUTBOX_CONSUMER_PARKED_TAKES,   /* takes of a handler's parked events a sweep made: only
                                     * for handlers that have some (docs/ordering.md) */
} outbox_consumer_stat_id;

typedef enum outbox_consumer_histogram_id {
    OUTBOX_CONSUMER_BATCH_SECONDS, /* one fetched batch, every handler run and settled */
} outbox_consumer_histogram_id;

/* Counters of one handler, by the name it was registered with. */
typedef enum outbox_handler_stat_id {
    OUTBOX_HANDLER_HANDLED,      /* runs that returned DONE */
    OUTBOX_HANDLER_FAILED,       /* failures (attempts spent) */
    OUTBOX_HANDLER_DEAD_LETTERS, /* its dead letters in the table now (sampled, not requeued) */
    OUTBOX_HANDLER_PARKED,       /* its parked events now (sampled): early, waiting for their
                                  * predecessor (docs/ordering.md) */
    OUTBOX_HANDLER_OLDEST_PARKED_SECONDS, /* how long the oldest of those has waited (sampled) */
} outbox_handler_stat_id;

typedef struct outbox_consumer outbox_consumer;

/*
 * A consumer configured by `cfg` (an OUTBOX_CONFIG_CONSUMER configuration;
 * copied). Connects nothing yet. OUTBOX_EINVAL names the setting: among
 * others, database_url unset, bus nats-core (no consumer side), or ledger
 * retention shorter than the stream's max age.
 */
OUTBOX_API outbox_status outbox_consumer_new(const outbox_config *cfg, outbox_consumer **out,
                                             outbox_error *err);
OUTBOX_API void outbox_consumer_free(outbox_consumer *c);

/*
 * Registers a handler by `name` ([A-Za-z0-9_.-]{1,64}, the ledger's key:
 * keep it stable) for events whose subject matches `subject_filter` (NATS
 * wildcards; NULL: every event). `ctx` is passed to every call. Register
 * before outbox_consumer_run(). OUTBOX_EINVAL for a bad or repeated name.
 */
OUTBOX_API outbox_status outbox_consumer_add_tx_handler(outbox_consumer *c, const char *name,
                                                        const char *subject_filter,
                                                        outbox_tx_handler_fn fn, void *ctx,
                                                        outbox_error *err);
OUTBOX_API outbox_status outbox_consumer_add_ext_handler(outbox_consumer *c, const char *name,
                                                         const char *subject_filter,
                                                         outbox_ext_handler_fn fn, void *ctx,
                                                         outbox_error *err);

/*
 * Registers a SQL handler: `statement` runs inside the ledger's
 * transaction with $1 = the envelope (jsonb), like a transactional
 * handler. For a whole fetched batch it is sent in one pipeline, one round
 * trip; if one event's statement fails, the batch is redone event by
 * event so only that one fails. A deadlock or serialization failure (SQLSTATE
 * class 40) is a retry, not a failure. The statement is copied.
 */
OUTBOX_API outbox_status outbox_consumer_add_sql_handler(outbox_consumer *c, const char *name,
                                                         const char *subject_filter,
                                                         const char *statement, outbox_error *err);

/*
 * Runs in the calling thread until outbox_consumer_stop(): fetches, runs
 * every matching handler once per event through the ledger, settles.
 * Outages pause it. On stop it finishes the batch in hand and returns.
 */
OUTBOX_API outbox_status outbox_consumer_run(outbox_consumer *c, outbox_error *err);

/* Safe from any thread and from a signal handler. */
OUTBOX_API void outbox_consumer_stop(outbox_consumer *c);

/*
 * 1 while handlers run on a fetched batch: the work a stop must wait for.
 * Settling and closing are not: a message left unacked comes back, and the
 * ledger skips what its handlers finished. Safe from any thread.
 */
OUTBOX_API int outbox_consumer_handling(outbox_consumer *c);

/* One counter; 0 for an id this library does not know. */
OUTBOX_API unsigned long long outbox_consumer_stat(outbox_consumer *c, outbox_consumer_stat_id id);

/* As outbox_relay_histogram(). */
OUTBOX_API size_t outbox_consumer_histogram(outbox_consumer *c, outbox_consumer_histogram_id id,
                                            unsigned long long *counts, size_t cap,
                                            double *sum_seconds);

/*
 * One handler's counter; 0 for a name or id this consumer does not know.
 * For a handler of outbox_consumer_ledger_handler(), its gauges (dead
 * letters, parked events); its counters are 0.
 */
OUTBOX_API unsigned long long outbox_consumer_handler_stat(outbox_consumer *c, const char *handler,
                                                           outbox_handler_stat_id id);

/*
 * The i-th (from 0) handler this consumer does not run that the ledger
 * knows and no other consumer runs: a handler of the SQL API (try_claim,
 * claim, receive) with dead letters or parked events, or that calls
 * receive(). Copied into `buf` (65 bytes hold any name); NULL past the
 * last. Sampled with the handlers' gauges, every 10 s. Safe from any thread.
 */
OUTBOX_API const char *outbox_consumer_ledger_handler(outbox_consumer *c, size_t i, char *buf,
                                                      size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* OUTBOX_WORKER_H */
