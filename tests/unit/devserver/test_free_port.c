/* SPDX-License-Identifier: MIT */
/*
 * test_free_port.c - obx_dev_free_port never hands one process the same
 * port twice, however fast it is called and from however many threads:
 * the servers a test starts one after the other bind their ports only
 * later, so a repeat would start two servers on one port.
 */
#include <criterion/criterion.h>
#include <pthread.h>

#include "devserver/devserver_probe.h"

enum { THREADS = 4, PER_THREAD = 150 };

static int ports[THREADS][PER_THREAD];

static void *
draw(void *arg)
{
    int *out = arg;

    for (int i = 0; i < PER_THREAD; i++) {
        out[i] = obx_dev_free_port();
    }
    return NULL;
}

/* Fails with the first port seen twice among `n` at `p`. */
static void
expect_distinct(const int *p, size_t n)
{
    static unsigned char seen[65536];

    for (size_t i = 0; i < sizeof(seen); i++) {
        seen[i] = 0;
    }
    for (size_t i = 0; i < n; i++) {
        cr_assert(p[i] > 0 && p[i] < 65536, "no port (%d) at draw %zu", p[i], i);
        cr_assert_eq(seen[p[i]], 0, "port %d handed out twice (draw %zu of %zu)", p[i], i, n);
        seen[p[i]] = 1;
    }
}

Test(free_port, calls_within_one_millisecond_get_different_ports)
{
    int p[64];

    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
        p[i] = obx_dev_free_port();
    }
    expect_distinct(p, sizeof(p) / sizeof(p[0]));
}

Test(free_port, threads_drawing_at_once_get_different_ports)
{
    pthread_t t[THREADS];

    for (int i = 0; i < THREADS; i++) {
        cr_assert_eq(pthread_create(&t[i], NULL, draw, ports[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    expect_distinct(&ports[0][0], THREADS * PER_THREAD);
}
