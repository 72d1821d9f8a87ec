/* SPDX-License-Identifier: MIT */
/*
 * random_ids.c - the ids the benchmark's own clients make for their rows:
 * random (v4) aggregate ids, and time-ordered (v7) ids for the raw
 * baselines' rows, as a client that makes its own ids would.
 *
 * libuuid is not used for either: uuid_generate_random() makes six system
 * calls an id (getpid, getppid, getuid, gettid, getrandom and a clock
 * read, re-seeding its fallback generator each time: 6.8 us an id here),
 * and uuid_generate_time() tries uuidd's socket on every call (7.5 us).
 * That is the load generator's cost, on the machine being measured, and
 * the raw baselines paid the second where the C writer pays neither.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "common/uuid7.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { POOL_BYTES = 4096 };

/* Each thread's block of getrandom(2) bytes: one system call per 256 ids, and no lock
 * shared with the C writer's own ids, which obx_uuid7_generate() takes. */
static __thread unsigned char pool[POOL_BYTES];
static __thread size_t pool_used = POOL_BYTES;

void
obx_bench_random_uuid(char out[OBX_UUID_TEXT_LEN + 1])
{
    uint8_t u[16];

    if (pool_used + sizeof(u) > POOL_BYTES) {
        if (obx_random_fill(pool, POOL_BYTES) != 0) {
            fprintf(stderr, "outbox-bench: getrandom failed\n");
            exit(1);
        }
        pool_used = 0;
    }
    memcpy(u, pool + pool_used, sizeof(u));
    pool_used += sizeof(u);
    u[6] = (uint8_t)(0x40 | (u[6] & 0x0f)); /* version 4 */
    u[8] = (uint8_t)(0x80 | (u[8] & 0x3f)); /* RFC 9562 variant */
    obx_uuid_format(u, out);
}

void
obx_bench_time_uuid(char out[OBX_UUID_TEXT_LEN + 1])
{
    uint8_t u[16];

    if (obx_uuid7_generate(u) != 0) {
        fprintf(stderr, "outbox-bench: getrandom failed\n");
        exit(1);
    }
    obx_uuid_format(u, out);
}
