/* SPDX-License-Identifier: MIT */
/*
 * relay_config.c - what a relay checks in its configuration before it
 * takes it: the rules that need more than one setting. Each setting's own
 * type and range were checked when it was set (config/).
 */
#include <string.h>

#include "common/error.h"
#include "config/config.h"
#include "relay_internal.h"

#include "common/banned.h" /* last: poisons unsafe functions */

outbox_status
obx_relay_config_check(const struct obx_config *c, outbox_error *err)
{
    if (c->parts != OBX_FOR_RELAY) {
        return obx_fail(
            err, OUTBOX_EINVAL,
            "a relay needs a relay configuration (outbox_config_new(OUTBOX_CONFIG_RELAY))");
    }
    if (c->database_url == NULL || c->database_url[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "database_url is required (OUTBOX_DATABASE_URL)");
    }
    if (c->bus == OUTBOX_BUS_DB) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "bus db needs no relay: consumers read the outbox table directly");
    }
    if (c->nats_url == NULL || c->nats_url[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "nats_url is required (OUTBOX_NATS_URL)");
    }
    if (c->backoff_cap_ms < c->backoff_base_ms) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "backoff_cap_ms %lld is below backoff_base_ms %lld: the cap must be "
                        "at least the first delay",
                        c->backoff_cap_ms, c->backoff_base_ms);
    }
    return OUTBOX_OK;
}

void
obx_relay_set_test_hooks(outbox_relay *relay, const struct obx_relay_test_hooks *hooks)
{
    relay->hooks = *hooks;
}
