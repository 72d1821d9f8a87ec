/* SPDX-License-Identifier: MIT */
/*
 * prune_pass.c - a retention pass: full batches go on, within a budget.
 */
#include "prune_pass.h"

#include "common/clock.h"

#include "common/banned.h" /* last: poisons unsafe functions */

outbox_status
obx_prune_pass(obx_prune_batch_fn batch, void *target, int limit, int budget_ms, atomic_int *stop,
               int *left, outbox_error *err)
{
    long long until = obx_monotonic_ms() + budget_ms;
    struct obx_prune_cursor cursor = {{0}};
    size_t deleted = (size_t)limit;
    outbox_status st = OUTBOX_OK;

    while (deleted == (size_t)limit && obx_monotonic_ms() < until && !atomic_load(stop)) {
        st = batch(target, limit, &cursor, &deleted, err);
        if (st != OUTBOX_OK) {
            break;
        }
    }
    *left = st == OUTBOX_OK && deleted == (size_t)limit;
    return st;
}
