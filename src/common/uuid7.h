/* SPDX-License-Identifier: MIT */
/*
 * uuid7.h - time-ordered ids (RFC 9562 UUIDv7).
 *
 * 48 bits of Unix milliseconds, version 7, 12 + 62 bits that are random
 * for the first id of a millisecond and a counter (advanced by a random
 * step) after it, so ids made in one process sort in creation order.
 * Debian 12's libuuid has no v7, so we write it.
 */
#ifndef OBX_UUID7_H
#define OBX_UUID7_H

#include <stddef.h>
#include <stdint.h>

#define OBX_UUID_TEXT_LEN 36 /* 8-4-4-4-12, without the terminator */

/* What makes the next id follow the previous one. */
struct obx_uuid7_state {
    int64_t last_ms;
    uint16_t rand_a; /* 12 bits */
    uint64_t rand_b; /* 62 bits */
};

/*
 * The pure step: the id after `state` at `now_ms`, using 10 random bytes.
 * If the clock stands still or goes back, the previous millisecond is
 * kept and the counter advances; if the counter runs out, the timestamp
 * moves one millisecond ahead. Updates `state`.
 */
void obx_uuid7_next(struct obx_uuid7_state *state, int64_t now_ms, const uint8_t random[10],
                    uint8_t out[16]);

/*
 * Fills `len` bytes from getrandom(2), going on after a short read (a
 * block over 256 bytes may come back in parts). Returns 0, or -1 if the
 * kernel gives no randomness. For blocks that keep the system call off
 * most ids, as obx_uuid7_generate() keeps one.
 */
int obx_random_fill(void *buf, size_t len);

/*
 * A new id from the real clock and getrandom(2). Thread-safe; a forked
 * child starts its own sequence. Returns 0, or -1 if no randomness.
 */
int obx_uuid7_generate(uint8_t out[16]);

/* Lower-case 8-4-4-4-12 text into `out` (OBX_UUID_TEXT_LEN + 1 bytes). */
void obx_uuid_format(const uint8_t uuid[16], char *out);

/* Parses 8-4-4-4-12 hex (either case). Returns 0, or -1 if malformed. */
int obx_uuid_parse(const char *text, uint8_t out[16]);

/* The Unix milliseconds a v7 id carries. */
int64_t obx_uuid7_unix_ms(const uint8_t uuid[16]);

#endif
