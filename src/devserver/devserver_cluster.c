/* SPDX-License-Identifier: MIT */
/*
 * devserver_cluster.c - three devserver_nats.c servers joined as one
 * JetStream cluster (see devserver_cluster.h).
 *
 * A lone node cannot answer JetStream requests (no meta leader without a
 * majority), so the three are spawned first and waited for afterwards.
 * Ports are drawn before the first spawn; if another process took one in
 * between, a node exits with "address already in use" and the whole
 * cluster is started again on new ports (its stores are still empty).
 * nats-server 2.9.10 options only (FACTS 18): --server_name,
 * --cluster_name, --cluster, --routes; the same routes list for every
 * node (a node ignores the route to itself).
 */
#include "devserver_cluster.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "devserver_probe.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { BOOT_ATTEMPTS = 4 };

static int
node_dir(const struct obx_dev_cluster *c, int k, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/n%d", c->dir, k + 1);

    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* The arguments that make node `k` a member of the cluster. */
struct node_args {
    char name[16], cluster[64], routes[256];
    char *argv[9];
};

static void
node_args(const struct obx_dev_cluster *c, int k, struct node_args *a)
{
    size_t used = 0;

    snprintf(a->name, sizeof(a->name), "n%d", k + 1);
    snprintf(a->cluster, sizeof(a->cluster), "nats://127.0.0.1:%d", c->route_port[k]);
    for (int i = 0; i < OBX_DEV_CLUSTER_NODES; i++) {
        used += (size_t)snprintf(a->routes + used, sizeof(a->routes) - used,
                                 "%snats://127.0.0.1:%d", i ? "," : "", c->route_port[i]);
    }
    a->argv[0] = "--server_name";
    a->argv[1] = a->name;
    a->argv[2] = "--cluster_name";
    a->argv[3] = (char *)c->name;
    a->argv[4] = "--cluster";
    a->argv[5] = a->cluster;
    a->argv[6] = "--routes";
    a->argv[7] = a->routes;
    a->argv[8] = NULL;
}

/* A free port none of the cluster's other ports uses (free_port may repeat within a ms). */
static int
distinct_port(const struct obx_dev_cluster *c, const int *taken, int n_taken)
{
    for (int tries = 0; tries < 50; tries++) {
        int port = obx_dev_free_port(), clash = port <= 0;

        for (int i = 0; i < n_taken && !clash; i++) {
            clash = taken[i] == port;
        }
        if (!clash) {
            return port;
        }
        obx_sleep_ms(2);
    }
    (void)c;
    return -1;
}

static int
draw_ports(struct obx_dev_cluster *c)
{
    int taken[2 * OBX_DEV_CLUSTER_NODES], n = 0;

    for (int k = 0; k < OBX_DEV_CLUSTER_NODES; k++) {
        if ((c->node[k].port = distinct_port(c, taken, n)) < 0) {
            return -1;
        }
        taken[n++] = c->node[k].port;
        if ((c->route_port[k] = distinct_port(c, taken, n)) < 0) {
            return -1;
        }
        taken[n++] = c->route_port[k];
    }
    return 0;
}

/* Node k's directory and arguments; -1 (with the reason) when the path does not fit. */
static int
node_prepare(struct obx_dev_cluster *c, int k, char *dir, size_t dir_len, struct node_args *a,
             char *err, size_t len)
{
    if (node_dir(c, k, dir, dir_len) != 0) {
        snprintf(err, len, "path too long: %s", c->dir);
        return -1;
    }
    node_args(c, k, a);
    return 0;
}

static int
spawn_node(struct obx_dev_cluster *c, int k, char *err, size_t len)
{
    struct node_args a;
    char dir[600];

    return node_prepare(c, k, dir, sizeof(dir), &a, err, len) != 0
               ? -1
               : obx_dev_nats_spawn(dir, &c->node[k], a.argv, c->node[k].port, err, len);
}

static int
wait_node(struct obx_dev_cluster *c, int k, char *err, size_t len)
{
    char dir[600];

    return node_dir(c, k, dir, sizeof(dir)) == 0 ? obx_dev_nats_wait(dir, &c->node[k], err, len)
                                                 : -1;
}

/* One try at starting all three; 0, or -1 with every node stopped. */
static int
boot_once(struct obx_dev_cluster *c, char *err, size_t len)
{
    int rc = draw_ports(c);

    if (rc != 0) {
        snprintf(err, len, "no free ports below the ephemeral range");
        return -1;
    }
    for (int k = 0; k < OBX_DEV_CLUSTER_NODES && rc == 0; k++) {
        rc = spawn_node(c, k, err, len);
    }
    for (int k = 0; k < OBX_DEV_CLUSTER_NODES && rc == 0; k++) {
        rc = wait_node(c, k, err, len);
    }
    if (rc != 0) {
        obx_dev_cluster_halt(c);
    }
    return rc;
}

int
obx_dev_cluster_boot(const char *dir, const char *name, struct obx_dev_cluster *c, char *err,
                     size_t len)
{
    char sub[600];

    memset(c, 0, sizeof(*c));
    snprintf(c->dir, sizeof(c->dir), "%s", dir);
    snprintf(c->name, sizeof(c->name), "%s", name);
    if (mkdir(c->dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, len, "cannot create %s: %s", c->dir, strerror(errno));
        return -1;
    }
    for (int k = 0; k < OBX_DEV_CLUSTER_NODES; k++) {
        if (node_dir(c, k, sub, sizeof(sub)) != 0 || (mkdir(sub, 0700) != 0 && errno != EEXIST) ||
            obx_dev_nats_prepare(sub, err, len) != 0) {
            snprintf(err, len, "cannot create %s: %s", sub, strerror(errno));
            return -1;
        }
    }
    for (int attempt = 1;; attempt++) {
        int rc = boot_once(c, err, len);

        if (rc == 0 || strstr(err, "address already in use") == NULL || attempt >= BOOT_ATTEMPTS) {
            return rc;
        }
    }
}

int
obx_dev_cluster_start(struct obx_dev_cluster *c, int k, char *err, size_t len)
{
    struct node_args a;
    char dir[600];

    /* A restart: the same client port, waiting for a moment's holder of it to let go. */
    return node_prepare(c, k, dir, sizeof(dir), &a, err, len) != 0
               ? -1
               : obx_dev_nats_launch(dir, &c->node[k], a.argv, err, len);
}

void
obx_dev_cluster_halt_node(struct obx_dev_cluster *c, int k, int graceful)
{
    char dir[600];

    if (node_dir(c, k, dir, sizeof(dir)) == 0) {
        obx_dev_nats_halt(dir, &c->node[k], graceful);
    }
    c->node[k].pid = 0;
}

void
obx_dev_cluster_halt(struct obx_dev_cluster *c)
{
    for (int k = 0; k < OBX_DEV_CLUSTER_NODES; k++) {
        obx_dev_cluster_halt_node(c, k, 1);
    }
}

void
obx_dev_cluster_urls(const struct obx_dev_cluster *c, char *out, size_t cap)
{
    size_t used = 0;

    out[0] = '\0';
    for (int k = 0; k < OBX_DEV_CLUSTER_NODES && used < cap; k++) {
        used += (size_t)snprintf(out + used, cap - used, "%snats://127.0.0.1:%d", k ? "," : "",
                                 c->node[k].port);
    }
}
