/* SPDX-License-Identifier: MIT */
/*
 * test_nats_teardown.c - a connection torn down while messages stream into
 * its subscription frees nothing its reader thread still uses.
 *
 * nats.c 3.4.1 looks a subscription up for an arriving message and uses it
 * without a reference; destroying the subscription while the connection
 * still reads was a use-after-free (a consumer crashed on SIGTERM in CI).
 * Under ASan the old order (unsubscribe, destroy, then close) crashes within
 * a few hundred rounds here; obx_nats_teardown closes first.
 */
#include <pthread.h>
#include <stdatomic.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "harness.h"
#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define ROUNDS 600

static atomic_int publishing;

/* Floods subject "flood" until told to stop. */
static void *
flood(void *arg)
{
    natsConnection *nc = NULL;
    char body[64] = {0};

    (void)arg;
    if (natsConnection_ConnectTo(&nc, harness_nats_url()) != NATS_OK) {
        return NULL;
    }
    while (atomic_load(&publishing)) {
        for (int i = 0; i < 100; i++) {
            natsConnection_Publish(nc, "flood", body, (int)sizeof(body));
        }
        natsConnection_Flush(nc);
    }
    natsConnection_Destroy(nc);
    return NULL;
}

Test(nats_teardown, a_subscription_receiving_messages_is_freed_only_after_its_reader_stops,
     .timeout = 240)
{
    pthread_t publisher;
    int received = 0;

    atomic_store(&publishing, 1);
    cr_assert_eq(pthread_create(&publisher, NULL, flood, NULL), 0);
    for (int i = 0; i < ROUNDS; i++) {
        natsConnection *nc = NULL;
        natsSubscription *sub = NULL;
        natsMsg *msg = NULL;

        cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
        cr_assert_eq(natsConnection_SubscribeSync(&sub, nc, "flood"), NATS_OK);
        if (natsSubscription_NextMsg(&msg, sub, 1000) == NATS_OK) {
            received++; /* messages are arriving as the subscription goes */
        }
        natsMsg_Destroy(msg);
        obx_nats_teardown(nc, NULL, sub);
    }
    atomic_store(&publishing, 0);
    pthread_join(publisher, NULL);
    cr_assert_gt(received, ROUNDS / 2, "only %d of %d rounds saw the flood", received, ROUNDS);
}
