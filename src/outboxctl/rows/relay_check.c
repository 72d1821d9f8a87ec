/* SPDX-License-Identifier: MIT */
/*
 * relay_check.c - rows checked by the relay's own code (see relay_check.h).
 */
#include "relay_check.h"

#include <stdio.h>

#include "bus/bus.h"
#include "outbox/worker.h"
#include "outboxctl/stream/js_admin.h"
#include "relay/relay_batch.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* NATS's default max_payload, when the server cannot be asked. */
#define DEFAULT_MAX_PAYLOAD ((size_t)1024 * 1024)
/* What the DB feed reads (feed_db.c): no broker, so no max_payload. */
#define DB_FEED_MAX_BYTES ((size_t)64 * 1024 * 1024)

size_t
obx_ctl_body_limit(const struct obx_config *cfg, const char *verb)
{
    struct obx_ctl_js *js = NULL;
    outbox_error err = {0};
    size_t max = 0;

    if (cfg->bus == OUTBOX_BUS_DB) {
        return DB_FEED_MAX_BYTES;
    }
    if (obx_ctl_js_open(cfg, &js, &err) == OUTBOX_OK) {
        max = obx_ctl_js_max_payload(js);
    }
    obx_ctl_js_close(js);
    if (max == 0) {
        fprintf(stderr,
                "outboxctl %s: %s: sizes are checked against NATS's default "
                "max_payload of 1 MiB\n",
                verb, err.message[0] ? err.message : "the server's max_payload is unknown");
        max = DEFAULT_MAX_PAYLOAD;
    }
    return obx_bus_body_limit(max);
}

outbox_status
obx_ctl_relay_check(PGconn *conn, const struct obx_config *cfg, const struct obx_ctl_stmt *stmt,
                    size_t max_body, json_t **rows, outbox_error *err)
{
    struct obx_relay_batch b;
    struct obx_lease lease;
    json_t *all = NULL;

    if (obx_ctl_query_lease(conn, cfg->schema, stmt, &lease, &all, err) != OUTBOX_OK) {
        return err->code;
    }
    if (obx_relay_batch_prepare(&b, &lease, cfg->subject_prefix, max_body, err) != OUTBOX_OK) {
        obx_lease_fini(&lease);
        json_decref(all);
        return err->code;
    }
    for (size_t i = 0; i < b.count; i++) {
        json_t *row = json_array_get(all, i);

        json_object_del(row, "envelope");
        json_object_del(row, "reason");
        if (b.rows[i].outcome == OBX_ROW_INVALID) {
            json_object_set_new(row, "reason", json_string(b.rows[i].reason));
        }
    }
    obx_relay_batch_fini(&b);
    obx_lease_fini(&lease);
    *rows = all;
    return OUTBOX_OK;
}
