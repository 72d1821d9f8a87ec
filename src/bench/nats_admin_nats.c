/* SPDX-License-Identifier: MIT */
/*
 * nats_admin_nats.c - streams for benchmark cases: each case gets a fresh
 * stream, created with the relay's own settings and deleted afterwards, so
 * no case publishes into another's full duplicate window.
 */
#include <nats/nats.h>
#include <stdio.h>

#include "bench.h"
#include "bus/bus.h"
#include "bus/stream.h"

#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

int
obx_bench_stream_create(const char *url, const char *name, const char *prefix)
{
    struct obx_bus_options bo;
    struct obx_stream_options so;
    struct obx_bus *bus = NULL;
    outbox_error err = {0};
    int rc = -1;

    /* A stream left by an interrupted run would hold the old case's messages. */
    obx_bench_stream_delete(url, name);
    obx_bus_options_init(&bo);
    bo.url = url;
    bo.stream = name;
    bo.auth = *obx_nats_tool_auth(); /* the bench's credentials and TLS */
    if (obx_bus_open(&bo, &bus, &err) == OUTBOX_OK) {
        obx_stream_options_init(&so);
        so.name = name;
        so.subjects_prefix = prefix;
        rc = obx_stream_ensure(bus, &so, &err) == OUTBOX_OK ? 0 : -1;
    }
    if (rc != 0) {
        fprintf(stderr, "outbox-bench: cannot create stream %s: %s\n", name, err.message);
    }
    obx_bus_close(bus);
    return rc;
}

void
obx_bench_stream_delete(const char *url, const char *name)
{
    natsConnection *nc = NULL;
    outbox_error err = {0};
    jsCtx *js = NULL;

    if (obx_nats_connect_once(url, "outbox-bench", &nc, &err) == OUTBOX_OK &&
        natsConnection_JetStream(&js, nc, NULL) == NATS_OK) {
        js_DeleteStream(js, name, NULL, NULL);
    }
    obx_nats_teardown(nc, js, NULL);
}
