/* SPDX-License-Identifier: MIT */
/*
 * cluster.c - a test's own three-node JetStream cluster (harness.h).
 *
 * The nodes are src/devserver/devserver_cluster.c servers in the run's
 * directory, so the run's teardown sweeps them away if a worker dies
 * without stopping them; a worker that exits stops its cluster itself.
 * The cluster is the test's alone: no servers lock, any test may have one.
 */
#include "harness_int.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "devserver/devserver_cluster.h"
#include "devserver/devserver_probe.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { STOP_TIMEOUT_MS = 10 * 1000 };

/*
 * The worker's running cluster's nodes, stopped at exit. The nodes, not the
 * test's struct harness_cluster: that lives on a test's stack, gone when a
 * failed assertion leaves the test.
 */
static struct obx_dev_cluster *running;

static void
stop_at_exit(void)
{
    if (running != NULL) {
        obx_dev_cluster_halt(running);
    }
}

static void
fill_urls(struct harness_cluster *c)
{
    const struct obx_dev_cluster *d = c->dev;

    obx_dev_cluster_urls(d, c->urls, sizeof(c->urls));
    for (int k = 0; k < HARNESS_CLUSTER_NODES; k++) {
        snprintf(c->node_url[k], sizeof(c->node_url[k]), "nats://127.0.0.1:%d", d->node[k].port);
    }
}

void
harness_cluster_start(struct harness_cluster *c, const char *name)
{
    static int registered;
    char dir[512], err[2048];

    memset(c, 0, sizeof(*c));
    c->dev = calloc(1, sizeof(struct obx_dev_cluster));
    cr_assert_not_null(c->dev);
    snprintf(dir, sizeof(dir), "%s/cluster-%s-%d", hx_run_dir(), name, (int)getpid());
    cr_assert_eq(obx_dev_cluster_boot(dir, name, c->dev, err, sizeof(err)), 0,
                 "harness_cluster_start(%s): %s", name, err);
    fill_urls(c);
    if (!registered) {
        atexit(stop_at_exit);
        registered = 1;
    }
    running = c->dev;
}

void
harness_cluster_kill(struct harness_cluster *c, int k)
{
    struct obx_dev_cluster *d = c->dev;

    cr_assert(k >= 0 && k < HARNESS_CLUSTER_NODES, "harness_cluster_kill: no node %d", k);
    cr_assert(d->node[k].pid > 0 && !obx_dev_pid_gone(d->node[k].pid),
              "harness_cluster_kill: node n%d is not running", k + 1);
    for (int i = 0; i < HARNESS_CLUSTER_NODES; i++) {
        /* Two of three down and 2.9.10 deletes streams as orphans (FACTS 18). */
        cr_assert(i == k || (d->node[i].pid > 0 && !obx_dev_pid_gone(d->node[i].pid)),
                  "harness_cluster_kill(n%d): n%d is down already; never two at once", k + 1,
                  i + 1);
    }
    cr_assert_eq(kill(d->node[k].pid, SIGKILL), 0, "harness_cluster_kill(n%d)", k + 1);
    cr_assert(obx_dev_wait_pid_gone(d->node[k].pid, STOP_TIMEOUT_MS),
              "harness_cluster_kill: node n%d still runs", k + 1);
    obx_dev_cluster_halt_node(d, k, 0); /* removes its ports file */
}

void
harness_cluster_restart(struct harness_cluster *c, int k)
{
    char err[2048];

    cr_assert(k >= 0 && k < HARNESS_CLUSTER_NODES, "harness_cluster_restart: no node %d", k);
    cr_assert_eq(obx_dev_cluster_start(c->dev, k, err, sizeof(err)), 0,
                 "harness_cluster_restart(n%d): %s", k + 1, err);
}

void
harness_cluster_stop(struct harness_cluster *c)
{
    if (running == c->dev) {
        running = NULL;
    }
    if (c->dev != NULL) {
        obx_dev_cluster_halt(c->dev);
        free(c->dev);
    }
    memset(c, 0, sizeof(*c));
}

int
harness_cluster_node(const char *server_name)
{
    int k = server_name != NULL && server_name[0] == 'n'
                ? (int)strtol(server_name + 1, NULL, 10) - 1
                : -1;

    return k >= 0 && k < HARNESS_CLUSTER_NODES ? k : -1;
}
