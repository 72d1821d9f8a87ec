/* SPDX-License-Identifier: MIT */
/*
 * devserver.h - throwaway PostgreSQL and nats-server for the demo, the
 * benchmark and the test harness.
 *
 * Each server runs from a temporary directory on a free loopback port.
 * Nothing outlives the process that started them: a reaper process tears
 * everything down when its owner exits, however it exits (even SIGKILL).
 * initdb refuses to run as root, so as root the PostgreSQL binaries run
 * as the `postgres` user.
 */
#ifndef OBX_DEVSERVER_H
#define OBX_DEVSERVER_H

#include <stddef.h>

struct obx_devserver_options {
    int postgres;         /* start a PostgreSQL cluster */
    int nats;             /* start nats-server -js */
    int durable;          /* 1: PostgreSQL's defaults (fsync on), as production runs it;
                           * 0: fsync off, for tests */
    const char *base_dir; /* where the temporary directory goes; NULL: $TMPDIR or /tmp */
};

struct obx_devserver;

/*
 * Starts what the options ask for and waits until each answers (PostgreSQL
 * accepts connections; JetStream answers). Returns 0, or -1 with the
 * reason in `err` (and nothing left running).
 */
int obx_devserver_start(const struct obx_devserver_options *opts, struct obx_devserver **out,
                        char *err, size_t err_len);

/* postgresql://postgres@127.0.0.1:<port>/postgres, or NULL if not started. */
const char *obx_devserver_database_url(const struct obx_devserver *d);

/* nats://127.0.0.1:<port>, or NULL if not started. */
const char *obx_devserver_nats_url(const struct obx_devserver *d);

/* Stops the servers and removes the directory. NULL does nothing. */
void obx_devserver_stop(struct obx_devserver *d);

#endif
