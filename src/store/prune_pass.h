/* SPDX-License-Identifier: MIT */
/*
 * prune_pass.h - one retention pass, whatever it deletes (outbox rows,
 * ledger rows): batches while they come full, within a time budget, so a
 * backlog of old rows is worked off at the database's pace and not at a
 * fixed number of rows a pass.
 */
#ifndef OBX_PRUNE_PASS_H
#define OBX_PRUNE_PASS_H

#include <stdatomic.h>
#include <stddef.h>

#include "outbox/outbox.h"
#include "store/store.h"

/* Deletes one batch of up to `limit` rows of `target` from `cursor` on. */
typedef outbox_status (*obx_prune_batch_fn)(void *target, int limit,
                                            struct obx_prune_cursor *cursor, size_t *deleted,
                                            outbox_error *err);

/*
 * Runs batches of `limit` rows from the oldest while each comes full, for up
 * to `budget_ms`, or until `*stop` is set. `*left` says whether the last
 * batch came full: old rows may be left for the next pass. The first failed
 * batch ends the pass with its status.
 */
outbox_status obx_prune_pass(obx_prune_batch_fn batch, void *target, int limit, int budget_ms,
                             atomic_int *stop, int *left, outbox_error *err);

#endif
