/* SPDX-License-Identifier: MIT */
/*
 * wait.c - waiting with a deadline, for tests.
 *
 * Tests never sleep a fixed time to let something happen: they poll the
 * condition every 10 ms until a deadline, so a fast machine does not wait
 * and a slow one does not fail. The clock and the process and port probes
 * worth polling are src/cli/devserver_probe.c, shared with the servers.
 */
#include "harness_int.h"

#include "devserver/devserver_probe.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

long long
harness_now_ms(void)
{
    return obx_monotonic_ms();
}

void
harness_sleep_ms(int ms)
{
    obx_sleep_ms(ms);
}

int
harness_wait_until(int (*cond)(void *), void *arg, int timeout_ms)
{
    long long deadline = obx_monotonic_ms() + timeout_ms;

    for (;;) {
        if (cond(arg)) {
            return 1;
        }
        if (obx_monotonic_ms() >= deadline) {
            return 0;
        }
        obx_sleep_ms(10);
    }
}
