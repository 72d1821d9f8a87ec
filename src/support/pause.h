/* SPDX-License-Identifier: MIT */
/*
 * pause.h - the workers' clock and their waits during outages: a pause
 * grows 250 ms, 500 ms ... up to 10 s while a server stays away, and ends
 * early when the worker is asked to stop.
 */
#ifndef OBX_PAUSE_H
#define OBX_PAUSE_H

#include <stdatomic.h>

#include "common/clock.h" /* pauses are measured on it */

enum {
    OBX_PAUSE_FIRST_MS = 250,
    OBX_PAUSE_MAX_MS = 10000,
    /*
     * The longest pause while the connection to the server stands but the
     * server cannot serve: on a JetStream cluster, a stream or consumer
     * leader election (4-10 s, FACTS 18). It ends by itself, and a pause
     * grown to 8-10 s by then would add as much again; a try costs one
     * batch or one fetch. A lost connection keeps OBX_PAUSE_MAX_MS.
     */
    OBX_PAUSE_CONNECTED_MAX_MS = 1000,
};

/* The next pause after `ms` (0: the first). */
int obx_grow_pause(int ms);

/* Sleeps `ms`, or less when `*stop` becomes set. */
void obx_pause_ms(atomic_int *stop, int ms);

#endif
