/* SPDX-License-Identifier: MIT */
/*
 * relay_test_hooks.h - faults a test can ask a relay to commit on
 * purpose. Not part of the API: no public header names them, and only
 * outboxd built with OUTBOX_TEST_HOOKS reads them (from OUTBOX_TEST_*
 * variables), for the fault tests that kill a relay at an exact point.
 */
#ifndef OBX_RELAY_TEST_HOOKS_H
#define OBX_RELAY_TEST_HOOKS_H

#include "outbox/worker.h"

struct obx_relay_test_hooks {
    char crash_on_event_type[256]; /* abort() on leasing this event type; "": never */
    int crash_after_publish;       /* abort() when the Nth batch with a first-time ack is
                                    * acked, before its rows are finished; 0: never */
};

/* Installs `hooks` (copied) on a relay that is not running yet. */
void obx_relay_set_test_hooks(outbox_relay *relay, const struct obx_relay_test_hooks *hooks);

#endif
