/* SPDX-License-Identifier: MIT */
/*
 * tx_kind.c - the tx kind: a C callback (outbox_consumer_add_tx_handler)
 * run inside the ledger's open transaction, on its connection.
 */
#include "common/error.h"
#include "handler.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/*
 * Runs each delivery in turn. The first one that does not return DONE ends
 * the batch: the transaction is rolled back and run again event by event,
 * so the ones after it come back as RETRY, not run (as a SQL pipeline's).
 */
static void
run_in_txn(const struct obx_handler *h, struct obx_ledger *ledger, const outbox_delivery *const *d,
           size_t count, outbox_handler_result *results, outbox_error *errs)
{
    PGconn *conn = obx_ledger_connection(ledger);
    size_t i = 0;

    for (; i < count; i++) {
        results[i] = h->tx(h->ctx, conn, d[i], &errs[i]);
        /* Done over a failed statement cannot commit: the handler's failure, so it is
         * retried and dead-lettered like one instead of failing its whole batch forever. */
        if (results[i] == OUTBOX_HANDLER_DONE &&
            obx_ledger_txn_state(ledger) == OBX_LEDGER_TXN_FAILED) {
            results[i] = OUTBOX_HANDLER_FAIL;
            obx_fail(&errs[i], OUTBOX_EREJECTED,
                     "handler returned done after a statement in its transaction failed");
        }
        if (results[i] != OUTBOX_HANDLER_DONE) {
            break;
        }
    }
    for (i = i < count ? i + 1 : count; i < count; i++) {
        results[i] = OUTBOX_HANDLER_RETRY;
    }
}

const struct obx_handler_ops obx_tx_kind = {.kind = "tx", .run_in_txn = run_in_txn};
