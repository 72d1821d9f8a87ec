/* SPDX-License-Identifier: MIT */
/*
 * exit_guard.c - ends a stopping process that does not end by itself.
 *
 * The drain timeout bounds the worker. What runs after it has no bound of
 * its own: stopping the HTTP server, freeing the worker, joining its
 * thread, and the exit handlers libraries register (nats.c's, OpenSSL's
 * through libpq) while nats.c's own threads still run. Any of them
 * stalling leaves a replica that logged its stop and never ends, and a
 * supervisor waiting on it until it kills it. Armed when the stop is
 * requested, the guard ends the process once the drain timeout and a
 * grace period have passed: the work was drained or given up already, so
 * nothing is cut short that the drain timeout had not cut short.
 *
 * The line is written with write(2), not through the logger: a thread
 * stuck while holding the logger's lock is one of the stalls it covers.
 */
#include "exit_guard.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static atomic_int disarmed;
static atomic_int armed;
static atomic_int exit_code = 1;
static int grace_seconds; /* written before the thread starts, read by it only */

static void
disarm(void)
{
    atomic_store(&disarmed, 1);
}

static void
write_line(int code)
{
    struct timespec now;
    struct tm tm;
    char stamp[40], line[300];
    int n;

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    n = snprintf(line, sizeof(line),
                 "%s.%03ldZ level=warn exit stalled after the stop, ending the process code=%d "
                 "grace_seconds=%d\n",
                 stamp, now.tv_nsec / 1000000, code, grace_seconds);
    if (n > 0 && (size_t)n < sizeof(line) && write(STDERR_FILENO, line, (size_t)n) < 0) {
        return; /* nowhere left to say it */
    }
}

static void *
guard_main(void *arg)
{
    long long deadline_ms = *(long long *)arg;

    free(arg);
    while (!atomic_load(&disarmed)) {
        long long left = deadline_ms - obx_monotonic_ms();
        struct timespec slice = {0, 100 * 1000 * 1000};

        if (left <= 0) {
            int code = atomic_load(&exit_code);

            write_line(code);
            _exit(code);
        }
        if (left < 100) {
            slice.tv_nsec = (long)left * 1000000L;
        }
        nanosleep(&slice, NULL);
    }
    return NULL;
}

void
obx_exit_guard_install(void)
{
    atexit(disarm);
}

void
obx_exit_guard_arm(int seconds)
{
    long long *deadline_ms;
    pthread_attr_t attr;
    pthread_t thread;

    if (atomic_exchange(&armed, 1) || (deadline_ms = malloc(sizeof(*deadline_ms))) == NULL) {
        return;
    }
    grace_seconds = OBX_EXIT_GRACE_SECONDS;
    *deadline_ms = obx_monotonic_ms() + (long long)seconds * 1000;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, guard_main, deadline_ms) != 0) {
        free(deadline_ms); /* no guard: the process ends as it would have without one */
    }
    pthread_attr_destroy(&attr);
}

void
obx_exit_guard_set_code(int code)
{
    atomic_store(&exit_code, code);
}
