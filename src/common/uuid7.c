/* SPDX-License-Identifier: MIT */
/*
 * uuid7.c - UUIDv7 generation, formatting and parsing.
 *
 * The process-wide state sits behind a mutex. Random bytes are drawn from
 * getrandom(2) in blocks to keep the system call off most ids; a fork
 * handler drops the block and the state in the child, so a forked child
 * never replays its parent's randomness, and no system call is left on
 * the path of an id.
 */
#include "uuid7.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "banned.h" /* last: poisons unsafe functions */

#define RAND_A_MASK 0x0fffu
#define RAND_B_MASK ((UINT64_C(1) << 62) - 1)

static uint64_t
load_bits(const uint8_t *p, int nbytes)
{
    uint64_t v = 0;

    for (int i = 0; i < nbytes; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* Fresh random bits for a new millisecond, keeping the top bit of rand_a
 * clear so the counter has room before it overflows. */
static void
reseed(struct obx_uuid7_state *st, int64_t ms, const uint8_t random[10])
{
    st->last_ms = ms;
    st->rand_a = (uint16_t)(load_bits(random, 2) & 0x07ffu);
    st->rand_b = load_bits(random + 2, 8) & RAND_B_MASK;
}

void
obx_uuid7_next(struct obx_uuid7_state *st, int64_t now_ms, const uint8_t random[10],
               uint8_t out[16])
{
    if (now_ms > st->last_ms) {
        reseed(st, now_ms, random);
    } else {
        /* Same or earlier millisecond: count up by a random step of 1..2^32. */
        uint64_t step = (load_bits(random, 4) & 0xffffffffu) + 1;

        st->rand_b += step;
        if (st->rand_b > RAND_B_MASK) {
            st->rand_b &= RAND_B_MASK;
            st->rand_a = (uint16_t)((st->rand_a + 1) & RAND_A_MASK);
            if (st->rand_a == 0) {
                reseed(st, st->last_ms + 1, random);
            }
        }
    }
    for (int i = 0; i < 6; i++) {
        out[i] = (uint8_t)(st->last_ms >> (40 - 8 * i));
    }
    out[6] = (uint8_t)(0x70 | (st->rand_a >> 8));
    out[7] = (uint8_t)(st->rand_a & 0xff);
    out[8] = (uint8_t)(0x80 | ((st->rand_b >> 56) & 0x3f));
    for (int i = 0; i < 7; i++) {
        out[9 + i] = (uint8_t)(st->rand_b >> (48 - 8 * i));
    }
}

enum { POOL_BYTES = 4096 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct obx_uuid7_state state;
static uint8_t pool[POOL_BYTES];
static size_t pool_used = POOL_BYTES;
static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;

/* Held across fork(), so the child's copy of the state is whole. */
static void
before_fork(void)
{
    pthread_mutex_lock(&lock);
}

static void
after_fork_in_parent(void)
{
    pthread_mutex_unlock(&lock);
}

/* The child draws its own randomness: a copy of the parent's would repeat its ids. */
static void
after_fork_in_child(void)
{
    pool_used = POOL_BYTES;
    memset(&state, 0, sizeof(state));
    pthread_mutex_unlock(&lock);
}

static void
install_fork_handlers(void)
{
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

int
obx_random_fill(void *buf, size_t len)
{
    for (size_t got = 0; got < len;) {
        ssize_t n = getrandom((uint8_t *)buf + got, len - got, 0);

        if (n <= 0) {
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

/* Ten random bytes from the pool; refills it when empty. Lock held. */
static int
take_random_locked(uint8_t out[10])
{
    if (pool_used + 10 > POOL_BYTES) {
        if (obx_random_fill(pool, POOL_BYTES) != 0) {
            return -1;
        }
        pool_used = 0;
    }
    memcpy(out, pool + pool_used, 10);
    pool_used += 10;
    return 0;
}

int
obx_uuid7_generate(uint8_t out[16])
{
    struct timespec ts;
    uint8_t random[10];
    int rc;

    pthread_once(&fork_handlers_once, install_fork_handlers);
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&lock);
    rc = take_random_locked(random);
    if (rc == 0) {
        obx_uuid7_next(&state, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, random, out);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void
obx_uuid_format(const uint8_t uuid[16], char *out)
{
    static const char hex[] = "0123456789abcdef";
    size_t w = 0;

    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) {
            out[w++] = '-';
        }
        out[w++] = hex[uuid[i] >> 4];
        out[w++] = hex[uuid[i] & 0x0f];
    }
    out[w] = '\0';
}

static int
hex_value(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

int
obx_uuid_parse(const char *text, uint8_t out[16])
{
    uint8_t bytes[16];
    size_t r = 0;

    for (int i = 0; i < 16; i++) {
        int hi, lo;

        if (i == 4 || i == 6 || i == 8 || i == 10) {
            if (text[r++] != '-') {
                return -1;
            }
        }
        hi = hex_value(text[r]);
        lo = hi < 0 ? -1 : hex_value(text[r + 1]);
        if (lo < 0) {
            return -1;
        }
        bytes[i] = (uint8_t)(hi << 4 | lo);
        r += 2;
    }
    if (text[r] != '\0') {
        return -1;
    }
    memcpy(out, bytes, 16);
    return 0;
}

int64_t
obx_uuid7_unix_ms(const uint8_t uuid[16])
{
    return (int64_t)load_bits(uuid, 6);
}
