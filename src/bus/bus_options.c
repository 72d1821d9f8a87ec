/* SPDX-License-Identifier: MIT */
/*
 * bus_options.c - a bus's options from the daemon's configuration, the one
 * mapping every part that publishes (the relay, outboxctl's republish) uses,
 * so a new NATS setting reaches all of them at once.
 */
#include "bus.h"

#include "config/settings.h"
#include "outbox/worker.h" /* the bus kinds of the configuration */

#include "common/banned.h" /* last: poisons unsafe functions */

void
obx_bus_options_from_config(struct obx_bus_options *o, const struct obx_config *cfg,
                            const char *name)
{
    obx_bus_options_init(o);
    o->kind = cfg->bus == OUTBOX_BUS_NATS_CORE ? OBX_BUS_NATS_CORE : OBX_BUS_JETSTREAM;
    o->url = cfg->nats_url;
    o->stream = cfg->stream;
    obx_nats_auth_from_config(&o->auth, cfg);
    o->ce_source = cfg->ce_source;
    o->name = name;
    o->publish_timeout_ms = (int)cfg->publish_timeout_ms;
    o->max_in_flight = (int)cfg->max_in_flight;
}
