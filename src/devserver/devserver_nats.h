/* SPDX-License-Identifier: MIT */
/*
 * devserver_nats.h - a throwaway nats-server with JetStream in a directory
 * of ours, for the throwaway servers (devserver.c) and the test harness.
 *
 * Layout: <dir>/nats (ports files), <dir>/nats/js (store),
 * <dir>/nats/server.log. The server listens on 127.0.0.1 only.
 */
#ifndef OBX_DEVSERVER_NATS_H
#define OBX_DEVSERVER_NATS_H

#include <stddef.h>
#include <sys/types.h>

/* How many extra arguments obx_dev_nats_launch passes on. */
#define OBX_DEV_NATS_MAX_EXTRA 32

struct obx_dev_nats {
    int port;  /* client port; 0 before the first launch, which lets the server pick one */
    pid_t pid; /* of the last launch; a daemon, not the caller's child */
};

/* Creates <dir>/nats and launches the server on a port it picks. 0, or -1 with err. */
int obx_dev_nats_boot(const char *dir, struct obx_dev_nats *n, char *err, size_t err_len);

/*
 * Starts nats-server -js on n->port (or a port it picks when 0) with the
 * store in <dir>/nats/js, plus `extra` arguments (NULL-terminated, may be
 * NULL, at most OBX_DEV_NATS_MAX_EXTRA), and waits until JetStream answers: a client connects
 * and gets the account info, or, when the extra arguments turn on
 * authentication, the monitoring port's /healthz says ok. Sets n->pid and
 * n->port. 0, or -1 with err and nothing left running.
 */
int obx_dev_nats_launch(const char *dir, struct obx_dev_nats *n, char *const extra[], char *err,
                        size_t err_len);

/* Creates <dir>/nats. 0, or -1 with err. */
int obx_dev_nats_prepare(const char *dir, char *err, size_t err_len);

/*
 * The two halves of a launch, for servers that cannot answer alone (the
 * nodes of a cluster answer once a majority runs): spawn starts the server
 * on `port` and returns at once (n->pid set); wait waits until it answers
 * as obx_dev_nats_launch does (n->port set), and halts it if it does not.
 */
int obx_dev_nats_spawn(const char *dir, struct obx_dev_nats *n, char *const extra[], int port,
                       char *err, size_t err_len);
int obx_dev_nats_wait(const char *dir, struct obx_dev_nats *n, char *err, size_t err_len);

/*
 * Stops n->pid if it is still ours (its command line names `dir`) and waits
 * until it is gone: SIGTERM first when `graceful`, SIGKILL otherwise or
 * after 10 s. Removes its ports file, which SIGKILL leaves behind.
 */
void obx_dev_nats_halt(const char *dir, const struct obx_dev_nats *n, int graceful);

#endif
