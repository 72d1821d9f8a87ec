/* SPDX-License-Identifier: MIT */
/*
 * ledger.h - the consumer ledger (processed_events): who may run handler H
 * for event E now, and what happened when it ran.
 *
 * A claim is the row (event_id, handler). Fresh: INSERT ... ON CONFLICT;
 * a claim whose lease (claimed_until) ran out is taken over with a new
 * owner token; `done` is final; a failure counts an attempt (handler
 * failures only) and schedules the next try; at max attempts the event is
 * dead-lettered for that handler. Every write after the claim is guarded
 * by the owner token, so a stale worker changes nothing. Time is the
 * database's.
 *
 * Work is batched per handler across a fetched batch of events: one claim
 * statement, one done statement, one transaction. That is the consumer's
 * throughput lever.
 *
 * A ledger owns one PostgreSQL connection and belongs to one thread.
 */
#ifndef OBX_LEDGER_H
#define OBX_LEDGER_H

#include <stddef.h>

#include <libpq-fe.h>

#include "outbox/outbox.h"
#include "store/store.h"

struct obx_ledger;

/* Connects like obx_store_open (keepalives, timeouts); EUNAVAILABLE when down. */
outbox_status obx_ledger_open(const struct obx_store_options *opts, struct obx_ledger **out,
                              outbox_error *err);
void obx_ledger_close(struct obx_ledger *ledger);
outbox_status obx_ledger_reconnect(struct obx_ledger *ledger, outbox_error *err);

/* What a claim found. */
enum obx_claim_state {
    OBX_CLAIM_RUN,     /* claimed by us: run the handler */
    OBX_CLAIM_DONE,    /* already handled: skip, ack */
    OBX_CLAIM_BUSY,    /* a live claim elsewhere: defer `defer_ms` (to its lease end) */
    OBX_CLAIM_BACKOFF, /* failed before, next try not yet due: defer `defer_ms` */
    OBX_CLAIM_DEAD,    /* dead-lettered for this handler: skip, terminate the message */
    OBX_CLAIM_PARKED,  /* ordered, its predecessor not done yet: kept in the ledger to run
                        * later (obx_ledger_parked_take), ack the message */
};

struct obx_claim {
    enum obx_claim_state state;
    int attempts;         /* handler failures so far for (event, handler) */
    long long defer_ms;   /* BUSY/BACKOFF: how long until it may run; 0 otherwise */
    char owner_token[37]; /* RUN: the token that guards later writes */
};

/* A handler name the ledger takes: 1 to 64 of [A-Za-z0-9_.-], the table's own rule. */
int obx_ledger_handler_name_valid(const char *name);

/* One event offered to a handler. Borrowed for the duration of a call. */
struct obx_ledger_event {
    const char *event_id;
    const char *envelope; /* JSON text; stored with a dead letter */
    /* Ordered events (migration 0017): aggregate_seq > 0 runs only after its aggregate's
     * aggregate_seq - 1 is done (or skipped) for the handler, and is parked otherwise, with
     * its message id and subject, to run later. 0: unordered, the rest is not read. */
    long long aggregate_seq;
    const char *aggregate_type;
    const char *aggregate_id;
    const char *message_id; /* as delivered (Nats-Msg-Id); NULL: the event id */
    const char *subject;
};

/*
 * Transactions. The transactional path runs claim, the handler's
 * statements and mark_done inside one ledger transaction, so a crash
 * leaves no claim behind and the handler's database effects happen exactly
 * once. Savepoints isolate one event's failure from the rest of a batch.
 */
outbox_status obx_ledger_begin(struct obx_ledger *ledger, outbox_error *err);
outbox_status obx_ledger_commit(struct obx_ledger *ledger, outbox_error *err);
void obx_ledger_rollback(struct obx_ledger *ledger);
outbox_status obx_ledger_savepoint(struct obx_ledger *ledger, outbox_error *err);
outbox_status obx_ledger_release_savepoint(struct obx_ledger *ledger, outbox_error *err);
outbox_status obx_ledger_rollback_to_savepoint(struct obx_ledger *ledger, outbox_error *err);

/*
 * Claims (event, handler) for `count` events in one statement, writing one
 * result per event into `out` (same order). Claims last `lease_seconds`.
 * Outside a transaction the claims commit at once (the external-handler
 * path); inside one they commit with it. A claim held by an uncommitted
 * transaction elsewhere is waited for at most `lock_wait_ms`, then BUSY.
 */
outbox_status obx_ledger_claim(struct obx_ledger *ledger, const char *handler,
                               const struct obx_ledger_event *events, size_t count,
                               int lease_seconds, int lock_wait_ms, struct obx_claim *out,
                               outbox_error *err);

/*
 * With ordered events in the batch (aggregate_seq > 0) the claim checks
 * their order in the same statement: per aggregate the handler's progress
 * row is locked, the next event may run (RUN or the other states), and a
 * later one is PARKED (kept with its envelope, to be acked). A batch with
 * no ordered event takes the plain claim, as before.
 */

/*
 * As obx_ledger_claim, but the RUN claims are written straight as done:
 * the fast path of a transactional batch, which commits only if every
 * handler returned DONE and is rolled back otherwise. Needs an open
 * transaction (OUTBOX_ENOTXN without one); no mark_done follows.
 */
outbox_status obx_ledger_claim_as_done(struct obx_ledger *ledger, const char *handler,
                                       const struct obx_ledger_event *events, size_t count,
                                       int lock_wait_ms, struct obx_claim *out, outbox_error *err);

/*
 * Marks done the claims in `claims` whose state is RUN (others are
 * skipped), guarded by owner token. `*marked` receives how many rows
 * changed: fewer than asked means a claim was taken over meanwhile.
 * Ordered events move their aggregate's progress on in the same statement.
 */
outbox_status obx_ledger_mark_done(struct obx_ledger *ledger, const char *handler,
                                   const struct obx_ledger_event *events,
                                   const struct obx_claim *claims, size_t count, size_t *marked,
                                   outbox_error *err);

/*
 * obx_ledger_mark_done() of `done_*`, then obx_ledger_claim() of `events`
 * (count >= 1), in one transaction sent as one round trip: one commit
 * makes both durable. Call it outside a transaction. On a failure
 * (`*marked` 0, `out` untouched) neither was written, or both if the
 * connection broke during the COMMIT, as for any commit whose answer is
 * lost: the events come back and find their rows as they are.
 */
outbox_status obx_ledger_mark_done_and_claim(struct obx_ledger *ledger, const char *handler,
                                             const struct obx_ledger_event *done_events,
                                             const struct obx_claim *done_claims, size_t done_count,
                                             size_t *marked, const struct obx_ledger_event *events,
                                             size_t count, int lease_seconds, int lock_wait_ms,
                                             struct obx_claim *out, outbox_error *err);

struct obx_failure_policy {
    int max_attempts;    /* OUTBOX_MAX_ATTEMPTS */
    int backoff_base_ms; /* 5000 in production */
    int backoff_cap_ms;  /* 300000 in production */
};

struct obx_failure_result {
    int attempts;       /* after this failure */
    int dead;           /* 1: dead-lettered now (attempts reached max) */
    long long retry_ms; /* not dead: delay until the next try (backoff with jitter) */
    int applied;        /* 0: the claim had moved on (owner token mismatch); nothing changed */
};

/*
 * Records a handler failure for one event: attempts + 1, last_error,
 * claim released (owner cleared), next_attempt_at = now() + backoff; or at
 * max_attempts a dead_letters row (event, handler, envelope, reason,
 * attempts) and the ledger row marked dead. Guarded by `claim`'s owner
 * token when the claim was committed (external path); on the
 * transactional path, after a rollback to savepoint, the claim row may be
 * gone and is recreated. Works inside or outside a transaction.
 */
outbox_status obx_ledger_record_failure(struct obx_ledger *ledger, const char *handler,
                                        const struct obx_ledger_event *event,
                                        const struct obx_claim *claim, const char *reason,
                                        const struct obx_failure_policy *policy,
                                        struct obx_failure_result *out, outbox_error *err);

/*
 * Gives a RUN claim back without counting an attempt (retry-later from
 * the handler, or shutdown): owner cleared, next_attempt_at = now() +
 * `delay_ms`. Guarded by owner token.
 */
outbox_status obx_ledger_release(struct obx_ledger *ledger, const char *handler,
                                 const struct obx_ledger_event *event,
                                 const struct obx_claim *claim, int delay_ms, outbox_error *err);

/*
 * Extends a RUN claim to `lease_seconds` from now (database time) while its
 * external handler runs, guarded by the owner token. `*held` is 0 when no
 * row changed: the claim is no longer this owner's, and its handler must
 * stop. Call it outside a transaction (a claim keeper's own connection).
 */
outbox_status obx_ledger_renew(struct obx_ledger *ledger, const char *handler,
                               const struct obx_ledger_event *event, const struct obx_claim *claim,
                               int lease_seconds, int *held, outbox_error *err);

/*
 * Runs one handler statement inside the current transaction with $1 = the
 * envelope (jsonb). A failure is returned as OUTBOX_EREJECTED with the
 * server's message (the handler failed) unless the connection broke
 * (OUTBOX_EUNAVAILABLE).
 */
outbox_status obx_ledger_run_sql(struct obx_ledger *ledger, const char *statement,
                                 const char *envelope, outbox_error *err);

/*
 * The ledger's connection, for a transactional handler to write through
 * inside the ledger's transaction; NULL while disconnected. Borrowed: the
 * handler must not begin, commit, roll back or close it.
 */
/* What a handler has waiting in the ledger, for its gauges. */
struct obx_handler_gauges {
    long long dead_letters;          /* that no one requeued */
    long long parked;                /* early events waiting for their predecessor */
    long long oldest_parked_seconds; /* how long the oldest of those has waited; 0: none */
};

/*
 * Each of `count` handlers' gauges: `out[i]` for `names[i]` (zeros when it
 * has nothing). Names must be valid handler names.
 */
outbox_status obx_ledger_handler_gauges(struct obx_ledger *ledger, const char *const *names,
                                        size_t count, struct obx_handler_gauges *out,
                                        outbox_error *err);

/* The most handlers obx_ledger_other_handler_gauges() reports. */
#define OBX_OTHER_HANDLERS_MAX 64

/* The gauges of a handler the consumer does not run, with its name. */
struct obx_other_handler_gauges {
    char name[65];
    struct obx_handler_gauges gauges;
};

/*
 * The gauges of the handlers the ledger knows that are none of `names`
 * and that no other consumer runs (ledger_other_handler_gauges.sql): an
 * SQL API's handlers. `out` holds OBX_OTHER_HANDLERS_MAX; `*n` says how
 * many came, in name order.
 */
outbox_status obx_ledger_other_handler_gauges(struct obx_ledger *ledger, const char *const *names,
                                              size_t count, struct obx_other_handler_gauges *out,
                                              size_t *n, outbox_error *err);

PGconn *obx_ledger_connection(struct obx_ledger *ledger);

/* Where the ledger's open transaction stands, as a handler left it. */
enum obx_ledger_txn_state {
    OBX_LEDGER_TXN_OPEN,   /* inside the transaction, usable */
    OBX_LEDGER_TXN_FAILED, /* a statement in it failed: it can only roll back */
    OBX_LEDGER_TXN_BROKEN, /* the connection is gone */
    OBX_LEDGER_TXN_NONE,   /* no transaction open (a handler ended it) */
};

enum obx_ledger_txn_state obx_ledger_txn_state(struct obx_ledger *ledger);

/*
 * Handler statements are parsed and planned once per connection, not per
 * event. Gives the statement name for `key` (a statement text whose
 * address stays valid while the ledger lives) in `name`, and returns 1 if
 * it still has to be prepared on the current connection, 0 if it is, or
 * -1 out of memory (run it unnamed). Say what became of a prepare, or of a
 * statement the server forgot (a pooler's DISCARD), with ..._prepared.
 */
int obx_ledger_statement_name(struct obx_ledger *ledger, const void *key, char name[32]);
void obx_ledger_statement_prepared(struct obx_ledger *ledger, const void *key, int ready);

/* One handler a consumer runs, as the handlers table records it. */
struct obx_ledger_binding {
    const char *name;           /* the ledger's handler name */
    const char *subject_filter; /* never NULL: {prefix}.> for a handler of every event */
};

/* A consumer replica's bindings. Borrowed for the call. */
struct obx_ledger_registration {
    const char *consumer_group; /* OUTBOX_CONSUMER_NAME */
    const char *backend;        /* "jetstream" or "db" */
    const char *stream;         /* jetstream: the stream the group reads; NULL on db */
    const char *replica;        /* the replica's name */
    const struct obx_ledger_binding *bindings;
    size_t count;
};

/*
 * Upserts the bindings into the handlers table with last_seen = now(), in
 * its own statement (call it outside a transaction): at start and on each
 * maintenance pass, so `outboxctl subjects` knows which filters are live.
 * OUTBOX_EINVAL for a name or filter the table would refuse.
 */
outbox_status obx_ledger_register(struct obx_ledger *ledger,
                                  const struct obx_ledger_registration *r, outbox_error *err);

/*
 * Deletes up to `limit` ledger rows finished more than `retention_seconds`
 * ago, from `cursor` on (store.h; NULL: one batch from the oldest).
 */
outbox_status obx_ledger_prune(struct obx_ledger *ledger, long long retention_seconds, int limit,
                               struct obx_prune_cursor *cursor, size_t *deleted, outbox_error *err);

/* Parked events a sweep leased to run (migration 0017). Strings owned by the set. */
struct obx_parked {
    char event_id[37];
    char lease_token[37];
    char *message_id;
    char *subject;
    char *envelope;
    size_t envelope_len;
};

struct obx_parked_set {
    size_t count;
    struct obx_parked *rows;
};

/*
 * Leases up to `max` of `handler`'s parked events whose predecessor is
 * now done or skipped, for `lease_seconds`, into `out` (free it with
 * obx_parked_set_fini, also on failure). Call it outside a transaction.
 */
outbox_status obx_ledger_parked_take(struct obx_ledger *ledger, const char *handler, int max,
                                     int lease_seconds, struct obx_parked_set *out,
                                     outbox_error *err);
void obx_parked_set_fini(struct obx_parked_set *set);

/*
 * Sets waiting[i] to 1 if handler names[i] has parked events a take could
 * lease now (not leased, or their lease ran out), else 0: one cheap probe
 * for every handler, so a sweep takes only where there is something to
 * take. Names must be valid handler names. Call it outside a transaction.
 */
outbox_status obx_ledger_parked_waiting(struct obx_ledger *ledger, const char *const *names,
                                        size_t count, int *waiting, outbox_error *err);

/*
 * Settles parked events a sweep took: delay_ms[i] < 0 removes row i (done
 * or dead-lettered), >= 0 gives it back to be taken again after that long.
 * With `extend_seconds` > 0 instead, every lease is extended that far (a
 * long handler still runs; delay_ms is not read). Guarded by each lease
 * token: a row parked again since is left alone.
 */
outbox_status obx_ledger_parked_settle(struct obx_ledger *ledger, const char *handler,
                                       const struct obx_parked *const *rows,
                                       const long long *delay_ms, size_t count, int extend_seconds,
                                       outbox_error *err);

#endif
