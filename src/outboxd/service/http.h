/* SPDX-License-Identifier: MIT */
/*
 * http.h - /metrics, /healthz and /readyz for one daemon.
 *
 * Served by libmicrohttpd on its own thread. The daemon supplies two
 * callbacks; both run on that thread, so they read shared state under
 * the worker's own locks (outbox_relay_stats_get does).
 */
#ifndef OBX_HTTP_H
#define OBX_HTTP_H

#include "common/buf.h"

struct obx_http_handlers {
    void *ctx;
    void (*metrics)(void *ctx, struct obx_buf *out); /* Prometheus text format */
    int (*ready)(void *ctx);                         /* 1: ready to do work */
};

struct obx_http;

/* Starts serving on `addr` ("host:port"). Returns NULL with `msg` on failure. */
struct obx_http *obx_http_start(const char *addr, const struct obx_http_handlers *handlers,
                                char *msg, size_t msg_cap);
void obx_http_stop(struct obx_http *http);

#endif
