/* SPDX-License-Identifier: MIT */
/*
 * devserver_cluster.h - a throwaway three-node JetStream cluster on
 * loopback, for the cluster fault tests.
 *
 * Each node is a devserver_nats.c server in <dir>/n<k> (own store, own
 * client port) with a server_name "n<k>", the cluster's name, its own route
 * port and one routes list naming all three. Node k keeps its ports and
 * store across restarts, so clients reconnect to the same URLs and its
 * replicas catch up from where they were.
 */
#ifndef OBX_DEVSERVER_CLUSTER_H
#define OBX_DEVSERVER_CLUSTER_H

#include <stddef.h>

#include "devserver_nats.h"

#define OBX_DEV_CLUSTER_NODES 3

struct obx_dev_cluster {
    char dir[512]; /* the cluster's directory; node k lives in <dir>/n<k+1> */
    char name[32]; /* cluster.name */
    struct obx_dev_nats node[OBX_DEV_CLUSTER_NODES];
    int route_port[OBX_DEV_CLUSTER_NODES];
};

/*
 * Creates `dir` (its parent must exist) and starts the three nodes on
 * free ports; returns once each answers JetStream requests (a meta leader
 * was elected). 0, or -1 with err and nothing left running.
 */
int obx_dev_cluster_boot(const char *dir, const char *name, struct obx_dev_cluster *c, char *err,
                         size_t err_len);

/* Starts node `k` again on its ports and store; waits until it answers. 0, or -1 with err. */
int obx_dev_cluster_start(struct obx_dev_cluster *c, int k, char *err, size_t err_len);

/* Stops node `k` (SIGTERM first when `graceful`, else SIGKILL) and waits until it is gone. */
void obx_dev_cluster_halt_node(struct obx_dev_cluster *c, int k, int graceful);

/* Stops every node. */
void obx_dev_cluster_halt(struct obx_dev_cluster *c);

/* "nats://127.0.0.1:A,nats://127.0.0.1:B,nats://127.0.0.1:C" into `out`. */
void obx_dev_cluster_urls(const struct obx_dev_cluster *c, char *out, size_t cap);

#endif
