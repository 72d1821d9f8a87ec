/* SPDX-License-Identifier: MIT */
/*
 * fleet_bench.h - `outbox-bench fleet`: what the database side
 * (fleet_pg.c) and the broker side (fleet_probe_nats.c) share. Steady
 * databases' writers note when each COMMIT returned; a subscriber on every
 * fleet subject notes when each message arrived; the payload names the
 * database and the sequence number.
 */
#ifndef OBX_BENCH_FLEET_H
#define OBX_BENCH_FLEET_H

#include <pthread.h>

enum { OBX_FLEET_BENCH_DBS = 10 };

struct obx_fleet_probe {
    long long cap;                          /* events per database the arrays hold */
    double *commit_at[OBX_FLEET_BENCH_DBS]; /* by sequence number; written by its writer */
    double *received_at[OBX_FLEET_BENCH_DBS];
    pthread_mutex_t lock;
    void *nc, *sub; /* the subscriber's natsConnection and natsSubscription */
};

/* Subscribes to `subjects` ("fleetb.>"); -1 on failure. */
int obx_fleet_probe_start(struct obx_fleet_probe *p, const char *nats_url, const char *subjects);
void obx_fleet_probe_stop(struct obx_fleet_probe *p);

#endif
