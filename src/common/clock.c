/* SPDX-License-Identifier: MIT */
/*
 * clock.c - the monotonic clock and a sleep that a signal does not cut short.
 */
#include "clock.h"

#include <errno.h>
#include <time.h>

#include "banned.h" /* last: poisons unsafe functions */

long long
obx_monotonic_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double
obx_monotonic_seconds(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void
obx_sleep_ms(int ms)
{
    struct timespec left = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}
