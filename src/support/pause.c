/* SPDX-License-Identifier: MIT */
/*
 * pause.c - monotonic time and interruptible pauses for the worker loops.
 */
#include "pause.h"

#include <time.h>

#include "common/banned.h" /* last: poisons unsafe functions */

int
obx_grow_pause(int ms)
{
    if (ms <= 0) {
        return OBX_PAUSE_FIRST_MS;
    }
    return ms * 2 > OBX_PAUSE_MAX_MS ? OBX_PAUSE_MAX_MS : ms * 2;
}

void
obx_pause_ms(atomic_int *stop, int ms)
{
    long long until = obx_monotonic_ms() + ms;

    while (!atomic_load(stop)) {
        long long left = until - obx_monotonic_ms();
        struct timespec ts = {0, 0};

        if (left <= 0) {
            return;
        }
        /* Short slices, so a stop request is seen within 20 ms. */
        ts.tv_nsec = (long)(left > 20 ? 20 : left) * 1000000L;
        nanosleep(&ts, NULL);
    }
}
