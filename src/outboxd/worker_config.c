/* SPDX-License-Identifier: MIT */
/*
 * worker_config.c - the daemon's settings handed to a worker as the
 * library's own configuration: one copy of every value, no field-by-field
 * adapter, so a new setting reaches the worker by its row alone.
 */
#include "commands.h"

#include "common/error.h"
#include "config/config.h"

#include "common/banned.h" /* last: poisons unsafe functions */

outbox_config *
obx_cmd_worker_config(outbox_config_kind kind, const struct obx_config *cfg, outbox_error *err)
{
    outbox_config *wc = outbox_config_new(kind);

    if (wc == NULL || obx_config_copy(&wc->values, cfg, err) != OUTBOX_OK) {
        outbox_config_free(wc);
        obx_fail(err, OUTBOX_ENOMEM, "out of memory");
        return NULL;
    }
    return wc;
}
