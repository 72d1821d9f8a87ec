/* SPDX-License-Identifier: MIT */
/*
 * fleet_probe_nats.c - the fleet bench's subscriber: when each steady
 * database's message arrived (the server routes a JetStream publish as it
 * stores and acks it).
 */
#include <nats/nats.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "fleet_bench.h"
#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static long long
field(const char *data, const char *name)
{
    const char *at = strstr(data, name);

    return at != NULL ? strtoll(at + strcspn(at, "0123456789"), NULL, 10) : -1;
}

static void
on_message(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    struct obx_fleet_probe *p = closure;
    const char *data = natsMsg_GetData(msg);
    double now = obx_bench_now();

    (void)nc;
    (void)sub;
    if (data != NULL && strstr(data, "\"steady\"") != NULL) {
        long long db = field(data, "\"db\""), seq = field(data, "\"seq\"");

        pthread_mutex_lock(&p->lock);
        if (db >= 0 && db < OBX_FLEET_BENCH_DBS && seq >= 0 && seq < p->cap &&
            p->received_at[db] != NULL && p->received_at[db][seq] == 0) {
            p->received_at[db][seq] = now;
        }
        pthread_mutex_unlock(&p->lock);
    }
    natsMsg_Destroy(msg);
}

int
obx_fleet_probe_start(struct obx_fleet_probe *p, const char *nats_url, const char *subjects)
{
    natsConnection *nc = NULL;
    natsSubscription *sub = NULL;
    outbox_error err = {0};

    if (obx_nats_connect_once(nats_url, "outbox-bench-fleet", &nc, &err) != OUTBOX_OK ||
        natsConnection_Subscribe(&sub, nc, subjects, on_message, p) != NATS_OK) {
        natsConnection_Destroy(nc);
        return -1;
    }
    natsSubscription_SetPendingLimits(sub, -1, -1);
    p->nc = nc;
    p->sub = sub;
    return 0;
}

void
obx_fleet_probe_stop(struct obx_fleet_probe *p)
{
    obx_nats_teardown(p->nc, NULL, p->sub);
    p->sub = p->nc = NULL;
}
