/* SPDX-License-Identifier: MIT */
/*
 * relay_gate.h - room a relay must be given before it publishes a batch.
 *
 * A plain relay has none: its bus's own window bounds what it has in
 * flight. A fleet replica runs one relay per database and gives each a
 * gate into the window they share (src/fleet/fleet_window.h), so the
 * replica's total stays within OUTBOX_MAX_IN_FLIGHT and the databases take
 * turns in it.
 */
#ifndef OBX_RELAY_GATE_H
#define OBX_RELAY_GATE_H

#include <stdatomic.h>
#include <stddef.h>

#include "outbox/worker.h"

struct obx_relay_gate {
    /* Waits for room for `n` messages; returns how many were granted (n), or 0 once `*stop`
     * is set. Called from the relay's thread only, one batch at a time. */
    size_t (*acquire)(void *ctx, size_t n, atomic_int *stop);
    /* Gives back what acquire() granted, once the batch's acks are in (or never will be). */
    void (*release)(void *ctx, size_t n);
    void *ctx;
};

/* Sets `relay`'s gate (copied) before outbox_relay_run(); NULL removes it. */
void obx_relay_set_gate(outbox_relay *relay, const struct obx_relay_gate *gate);

#endif
