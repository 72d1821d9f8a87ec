/* SPDX-License-Identifier: MIT */
/*
 * consumer_test_hooks.h - faults a test can ask a consumer to commit on
 * purpose. Not part of the API: no public header names them, and only
 * outboxd built with OUTBOX_TEST_HOOKS reads them (from OUTBOX_TEST_*
 * variables), for the fault tests that kill a consumer at an exact point.
 */
#ifndef OBX_CONSUMER_TEST_HOOKS_H
#define OBX_CONSUMER_TEST_HOOKS_H

#include "outbox/worker.h"

struct obx_consumer_test_hooks {
    int crash_after_ledger_commit; /* 1: abort() after a batch's ledger commit, before its
                                    * messages are settled (FAULTS T07) */
    int stall_on_stop_ms;          /* > 0: once stopped, closing takes this long, as a
                                    * broker that stopped answering can make it */
    int crash_after_parked_take;   /* 1: abort() once a sweep has leased parked events,
                                    * before it runs them */
};

/* Installs `hooks` (copied) on a consumer that is not running yet. */
void obx_consumer_set_test_hooks(outbox_consumer *c, const struct obx_consumer_test_hooks *hooks);

#endif
