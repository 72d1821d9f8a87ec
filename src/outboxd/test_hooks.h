/* SPDX-License-Identifier: MIT */
/*
 * test_hooks.h - the fault tests' way into a worker: OUTBOX_TEST_*
 * variables, read only by an outboxd built with OUTBOX_TEST_HOOKS (the
 * test build). In any other build these do nothing, and no public header
 * or setting knows the hooks exist.
 */
#ifndef OBX_TEST_HOOKS_H
#define OBX_TEST_HOOKS_H

#include "outbox/worker.h"

/*
 * OUTBOX_TEST_CRASH_ON_EVENT_TYPE=T: the relay aborts when it leases an
 * event of type T (crash loops). OUTBOX_TEST_CRASH_AFTER_PUBLISH=N: it
 * aborts when its Nth new batch is acked, before finishing it.
 * OUTBOX_TEST_STALL_AT_EXIT_MS=N: an exit handler sleeps N ms, as a
 * library's exit handler can stall while its threads still run.
 */
void obx_test_hooks_apply_relay(outbox_relay *relay);

/* OUTBOX_TEST_CRASH_AFTER_LEDGER_COMMIT=1: the consumer aborts after a batch's
 * ledger commit, before its acks. OUTBOX_TEST_CRASH_AFTER_PARKED_TAKE=1: it
 * aborts once a sweep has leased parked events, before running them. */
void obx_test_hooks_apply_consumer(outbox_consumer *consumer);

#endif
