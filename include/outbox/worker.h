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

/* Everything a relay needs; fill with outbox_relay_options_init() first. Strings are borrowed
 * until outbox_relay_new() returns (it copies them). */
typedef struct outbox_relay_options {
    const char *database_url;     /* libpq URL or key=value string; required */
    const char *schema;           /* default "outbox" */
    const char *nats_url;         /* default "nats://127.0.0.1:4222" */
    outbox_bus_kind bus;          /* default OUTBOX_BUS_JETSTREAM */
    outbox_relay_mode mode;       /* default OUTBOX_RELAY_MARK */
    const char *stream;           /* default "EVENTS" */
    const char *subject_prefix;   /* default "events" */
    const char *ce_source;        /* CloudEvents source, default "pgoutbox" */
    const char *name;             /* replica name for logs and server views; default host-pid */
    const char *nats_creds_file;  /* NULL: none */
    const char *nats_tls_ca_file; /* NULL: none */
    const char *nats_tls_cert_file;
    const char *nats_tls_key_file;
    int batch_size;         /* rows per lease, default 100 */
    int lease_seconds;      /* default 60 */
    int max_attempts;       /* rejected publishes before dead-lettering, default 10 */
    int max_lease_expiries; /* leases run out with no outcome before quarantine, default 5 */
    int publish_timeout_ms; /* wait for acks, default 5000 */
    int max_in_flight;      /* async publish window, default 1024 */
    int poll_max_ms;        /* longest idle poll when no wake-up comes, default 1000 */
    int listen;             /* 1: LISTEN for wake-ups (default); 0: poll only (poolers) */
    int backoff_base_ms;    /* first retry delay, default 5000 */
    int backoff_cap_ms;     /* longest retry delay, default 300000 */
    int retention_seconds;  /* mark mode: done rows kept this long, default 86400 */
    int drain_timeout_ms;   /* on stop: finish or release within this, default 10000 */
    long long stream_max_age_seconds; /* default 7 days */
    long long stream_max_bytes;       /* default -1: unlimited */
    int duplicate_window_seconds;     /* default 3600 */
    const char *crash_on_event_type;  /* tests only: abort() on leasing this event type */
    int crash_after_publish; /* tests only: abort() when the Nth batch with a first-time ack
                                is acked, before its rows are finished; 0: never */
} outbox_relay_options;

OUTBOX_API void outbox_relay_options_init(outbox_relay_options *opts);

/* Counters since the relay started. Read with outbox_relay_stats() from any thread. */
typedef struct outbox_relay_stats {
    unsigned long long leased;     /* rows leased */
    unsigned long long published;  /* rows acked and finished */
    unsigned long long duplicates; /* of those, acks flagged duplicate */
    unsigned long long retried;    /* rejected, scheduled again */
    unsigned long long dead;       /* dead-lettered (attempts or lease expiries) */
    unsigned long long invalid;    /* quarantined as invalid */
    unsigned long long released;   /* handed back after a transport failure */
    unsigned long long lost;       /* finishes refused because the lease had moved on */
    unsigned long long batches;    /* lease batches published */
    int database_up;               /* 1 while the database answers */
    int broker_up;                 /* 1 while the broker answers */
} outbox_relay_stats;

typedef struct outbox_relay outbox_relay;

/* Checks the options and copies them. Connects nothing yet. OUTBOX_EINVAL names the option. */
OUTBOX_API outbox_status outbox_relay_new(const outbox_relay_options *opts, outbox_relay **out,
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

OUTBOX_API void outbox_relay_stats_get(outbox_relay *relay, outbox_relay_stats *out);

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

typedef struct outbox_consumer_options {
    const char *database_url;    /* the ledger (and the outbox for OUTBOX_BUS_DB); required */
    const char *schema;          /* default "outbox" */
    outbox_bus_kind bus;         /* JETSTREAM (default) or DB */
    const char *nats_url;        /* default "nats://127.0.0.1:4222" */
    const char *stream;          /* default "EVENTS" */
    const char *subject_prefix;  /* default "events" */
    const char *consumer_name;   /* durable consumer shared by the replicas; default "outbox" */
    const char *name;            /* replica name for logs; default host-pid */
    const char *nats_creds_file; /* NULL: none */
    const char *nats_tls_ca_file;
    const char *nats_tls_cert_file;
    const char *nats_tls_key_file;
    int batch_size;                     /* messages per fetch, default 100 */
    int ack_wait_seconds;               /* JetStream ack_wait, default 60 */
    long long max_deliver;              /* JetStream safety net, default -1 (unlimited) */
    int lease_seconds;                  /* DB feed lease, default 60 */
    int ledger_lease_seconds;           /* claim takeover, default 1800 */
    int max_attempts;                   /* handler failures before the dead letter, default 10 */
    int backoff_base_ms;                /* default 5000 */
    int backoff_cap_ms;                 /* default 300000 */
    int poll_max_ms;                    /* longest wait for new events, default 1000 */
    outbox_relay_mode mode;             /* DB feed: mark (default) or prune handled rows */
    long long ledger_retention_seconds; /* default 30 days; not below the stream's max age */
    int retention_seconds;              /* DB feed, mark mode: done rows kept, default 1 day */
    long long stream_max_age_seconds;   /* the stream's max_age, default 7 days */
    int crash_after_ledger_commit;      /* tests only: abort() after a batch's ledger
                                         * commit, before its messages are settled */
} outbox_consumer_options;

OUTBOX_API void outbox_consumer_options_init(outbox_consumer_options *opts);

typedef struct outbox_consumer_stats {
    unsigned long long fetched;       /* messages received */
    unsigned long long handled;       /* handler runs that returned DONE */
    unsigned long long skipped;       /* already done (redeliveries, republishes) */
    unsigned long long deferred;      /* claim held elsewhere or backing off: redelivered later */
    unsigned long long failed;        /* handler failures (attempts spent) */
    unsigned long long retried;       /* RETRY results (no attempt spent) */
    unsigned long long dead;          /* dead-lettered (event, handler) pairs */
    unsigned long long ledger_errors; /* ledger unavailable: redelivered, nothing spent */
    int database_up;
    int broker_up;
} outbox_consumer_stats;

typedef struct outbox_consumer outbox_consumer;

/* Checks and copies the options; connects nothing yet. */
OUTBOX_API outbox_status outbox_consumer_new(const outbox_consumer_options *opts,
                                             outbox_consumer **out, outbox_error *err);
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

OUTBOX_API void outbox_consumer_stats_get(outbox_consumer *c, outbox_consumer_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* OUTBOX_WORKER_H */
