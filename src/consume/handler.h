/* SPDX-License-Identifier: MIT */
/*
 * handler.h - a registered handler, and the one kind the library runs
 * itself: a SQL statement (sql_handler_pg.c).
 */
#ifndef OBX_HANDLER_H
#define OBX_HANDLER_H

#include <stddef.h>

#include "delivery.h"
#include "ledger/ledger.h"
#include "outbox/worker.h"

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

#endif
