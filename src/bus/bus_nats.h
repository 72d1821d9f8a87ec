/* SPDX-License-Identifier: MIT */
/*
 * bus_nats.h - what other *_nats.c files (stream setup, tests) may reach
 * inside an open bus: its nats.c handles, borrowed.
 *
 * Both are valid until the next obx_bus_send(), obx_bus_is_connected() or
 * obx_bus_close() on the bus's own thread: a bus whose connection nats.c
 * closed for good replaces it there.
 */
#ifndef OBX_BUS_NATS_H
#define OBX_BUS_NATS_H

#include <nats/nats.h>

#include "bus.h"

/* The JetStream context; NULL only if the bus has no connection right now. */
jsCtx *obx_bus_js(struct obx_bus *bus);

/* The connection; NULL only if the bus has no connection right now. */
natsConnection *obx_bus_conn(struct obx_bus *bus);

#endif
