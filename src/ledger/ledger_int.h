/* SPDX-License-Identifier: MIT */
/*
 * ledger_int.h - the insides of a ledger, shared by ledger_pg.c (the
 * connection, transactions, handler statements, prune) and
 * ledger_claim_pg.c (claim, done, failure, release).
 */
#ifndef OBX_LEDGER_INT_H
#define OBX_LEDGER_INT_H

#include <libpq-fe.h>

#include "ledger.h"
#include "support/pg_conn.h"

/* The ledger's statements, rendered for its schema at open. */
enum obx_ledger_sql {
    OBX_LEDGER_CLAIM,
    OBX_LEDGER_MARK_DONE,
    OBX_LEDGER_RECORD_FAILURE,
    OBX_LEDGER_RELEASE,
    OBX_LEDGER_PRUNE,
    OBX_LEDGER_HANDLER_GAUGES,
    OBX_LEDGER_REGISTER,
    OBX_LEDGER_RENEW,
    OBX_LEDGER_CLAIM_ORDERED,
    OBX_LEDGER_MARK_DONE_ORDERED,
    OBX_LEDGER_PARKED_TAKE,
    OBX_LEDGER_PARKED_WAITING,
    OBX_LEDGER_PARKED_SETTLE,
    OBX_LEDGER_ORDER_BASELINE,
    OBX_LEDGER_OTHER_HANDLER_GAUGES,
    OBX_LEDGER_CLAIM_FRESH,
    OBX_LEDGER_PARKED_FILL,
    OBX_LEDGER_SQL_COUNT
};

/* A handler statement known to this ledger; its name is obx_handler_<index>. */
struct obx_prepared {
    const void *key; /* the statement text's address */
    int ready;       /* prepared on the current connection */
};

struct obx_ledger {
    struct obx_pg_session pg;      /* the connection and the statements of enum obx_ledger_sql */
    struct obx_prepared *prepared; /* owned */
    size_t prepared_count;
    int parked_lately; /* the last ordered claim parked events: the next carries the messages */
};

/*
 * OUTBOX_ENOTXN unless a transaction is open (`aborted_ok`: a failed one
 * counts); OUTBOX_EUNAVAILABLE without a connection.
 */
outbox_status obx_ledger_require_transaction(struct obx_ledger *ledger, int aborted_ok,
                                             const char *doing, outbox_error *err);

/* The ordered claim's arrays: aggregate type, id and seq; message id, subject, envelope. */
enum { OBX_ORDER_ARRAYS = 6 };

struct obx_buf;

/* 1 if any of the events is ordered (aggregate_seq > 0). */
int obx_ledger_events_ordered(const struct obx_ledger_event *events, size_t count);

/*
 * Appends to each of `arrays` (OBX_ORDER_ARRAYS of them with
 * `with_message`, else the first 3) the {...} literal of that column of
 * the events (NULL elements for unordered ones); with `claims`, of the
 * events whose claim is in state `keep` only, in the order of `events`.
 */
outbox_status obx_ledger_order_arrays(const struct obx_ledger_event *events,
                                      const struct obx_claim *claims, enum obx_claim_state keep,
                                      size_t count, int with_message, struct obx_buf *arrays,
                                      outbox_error *err);

/*
 * After an ordered claim made without the messages (in a transaction):
 * gives the events it parked (claims[i].state OBX_CLAIM_PARKED) their
 * message id, subject and envelope, in the same transaction.
 */
outbox_status obx_ledger_parked_fill(struct obx_ledger *ledger, const char *handler,
                                     const struct obx_ledger_event *events,
                                     const struct obx_claim *claims, size_t count,
                                     outbox_error *err);

#endif
