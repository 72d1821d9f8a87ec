/* SPDX-License-Identifier: MIT */
/*
 * test_hooks.c - reads the OUTBOX_TEST_* variables into the workers'
 * private test hooks, in test builds only.
 */
#include "test_hooks.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "consume/consumer_test_hooks.h"
#include "relay/relay_test_hooks.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#ifdef OUTBOX_TEST_HOOKS

static long
env_number(const char *name)
{
    const char *v = getenv(name);

    return v != NULL ? strtol(v, NULL, 10) : 0;
}

static int stall_at_exit_ms;

/* An exit handler that never returns in time, as a library's can while its threads run. */
static void
stall_at_exit(void)
{
    obx_log(OUTBOX_LOG_INFO, "stalling at exit on purpose ms=%d", stall_at_exit_ms);
    obx_sleep_ms(stall_at_exit_ms);
}

void
obx_test_hooks_apply_relay(outbox_relay *relay)
{
    struct obx_relay_test_hooks h = {.crash_after_publish =
                                         (int)env_number("OUTBOX_TEST_CRASH_AFTER_PUBLISH")};
    const char *poison = getenv("OUTBOX_TEST_CRASH_ON_EVENT_TYPE");

    snprintf(h.crash_on_event_type, sizeof(h.crash_on_event_type), "%s", poison ? poison : "");
    obx_relay_set_test_hooks(relay, &h);
    stall_at_exit_ms = (int)env_number("OUTBOX_TEST_STALL_AT_EXIT_MS");
    if (stall_at_exit_ms > 0) {
        atexit(stall_at_exit); /* after main's guard handler: it runs first, while guarded */
    }
}

void
obx_test_hooks_apply_consumer(outbox_consumer *consumer)
{
    struct obx_consumer_test_hooks h = {
        .crash_after_ledger_commit = env_number("OUTBOX_TEST_CRASH_AFTER_LEDGER_COMMIT") != 0,
        .stall_on_stop_ms = (int)env_number("OUTBOX_TEST_STALL_ON_STOP_MS"),
        .crash_after_parked_take = env_number("OUTBOX_TEST_CRASH_AFTER_PARKED_TAKE") != 0};

    obx_consumer_set_test_hooks(consumer, &h);
}

#else

void
obx_test_hooks_apply_relay(outbox_relay *relay)
{
    (void)relay;
}

void
obx_test_hooks_apply_consumer(outbox_consumer *consumer)
{
    (void)consumer;
}

#endif
