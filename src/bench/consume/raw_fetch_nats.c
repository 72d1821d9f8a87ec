/* SPDX-License-Identifier: MIT */
/*
 * raw_fetch_nats.c - the consumer benchmark's baseline: the same messages
 * fetched from a durable pull consumer and acked one by one, with no
 * ledger and no handler, so consumer results read as a ratio of it.
 */
#include <nats/nats.h>
#include <stdio.h>

#include "bench/bench.h"

#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { FETCH_BATCH = 256, FETCH_WAIT_MS = 2000 };

int
obx_bench_raw_fetch_ack(const char *url, const char *stream, const char *subjects, long long count,
                        double *events_per_s)
{
    natsConnection *nc = NULL;
    outbox_error err = {0};
    jsCtx *js = NULL;
    natsSubscription *sub = NULL;
    jsSubOptions so;
    long long seen = 0;
    double start = 0;
    int rc = -1;

    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Config.AckPolicy = js_AckExplicit;
    if (obx_nats_connect_once(url, "outbox-bench", &nc, &err) == OUTBOX_OK &&
        natsConnection_JetStream(&js, nc, NULL) == NATS_OK &&
        js_PullSubscribe(&sub, js, subjects, "bench-raw-fetch", NULL, &so, NULL) == NATS_OK) {
        start = obx_bench_now();
        while (seen < count) {
            natsMsgList list = {0};

            if (natsSubscription_Fetch(&list, sub, FETCH_BATCH, FETCH_WAIT_MS, NULL) != NATS_OK ||
                list.Count == 0) {
                natsMsgList_Destroy(&list);
                break;
            }
            for (int i = 0; i < list.Count; i++) {
                natsMsg_Ack(list.Msgs[i], NULL);
            }
            seen += list.Count;
            natsMsgList_Destroy(&list);
        }
        rc = seen == count ? 0 : -1;
        *events_per_s = (double)seen / (obx_bench_now() - start);
    }
    if (rc != 0) {
        fprintf(stderr, "outbox-bench: raw fetch read %lld of %lld messages\n", seen, count);
    }
    obx_nats_teardown(nc, js, sub);
    return rc;
}
