/* SPDX-License-Identifier: MIT */
/*
 * devserver.c - throwaway PostgreSQL and nats-server for the demo and the
 * benchmark (devserver.h), built from the same pieces the test harness
 * uses: devserver_pg.c, devserver_nats.c and devserver_reaper.c.
 *
 * Layout: <base>/obx-dev-XXXXXX/{pg,nats}. The reaper holds the other end
 * of a pipe whose write end only this process holds (close-on-exec), so it
 * tears everything down when this process exits, however it exits.
 */
#include "devserver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devserver_int.h"
#include "devserver_nats.h"
#include "devserver_pg.h"
#include "devserver_probe.h"
#include "devserver_reaper.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define REAPER_ENV "OBX_DEVSERVER_REAPER"

enum { REAPER_EXIT_TIMEOUT_MS = 10 * 1000 };

struct obx_devserver {
    char dir[512];    /* the temporary directory, removed by obx_devserver_stop */
    pid_t reaper_pid; /* not our child: a daemon */
    int reaper_fd;    /* owned; closing it lets the reaper go; -1 if none */
    struct obx_dev_pg pg;
    struct obx_dev_nats nats;
    char database_url[96]; /* empty unless PostgreSQL was started */
    char nats_url[64];     /* empty unless nats-server was started */
};

/* In the reaper (this program executed again), before main(); returns at once otherwise. */
__attribute__((constructor)) static void
reaper_main(void)
{
    obx_dev_reaper_serve(REAPER_ENV, obx_dev_teardown);
}

static int
start_servers(const struct obx_devserver_options *opts, struct obx_devserver *d, char *err,
              size_t len)
{
    if (obx_dev_make_dir(opts->base_dir, "obx-dev", d->dir, sizeof(d->dir), err, len) != 0 ||
        obx_dev_reaper_start(REAPER_ENV, d->dir, &d->reaper_pid, &d->reaper_fd, err, len) != 0) {
        return -1;
    }
    if (opts->postgres) {
        d->pg.durable = opts->durable != 0;
        if (obx_dev_pg_boot(d->dir, &d->pg, err, len) != 0) {
            return -1;
        }
        snprintf(d->database_url, sizeof(d->database_url),
                 "postgresql://postgres@127.0.0.1:%d/postgres", d->pg.port);
    }
    if (opts->nats) {
        if (obx_dev_nats_boot(d->dir, &d->nats, err, len) != 0) {
            return -1;
        }
        snprintf(d->nats_url, sizeof(d->nats_url), "nats://127.0.0.1:%d", d->nats.port);
    }
    return 0;
}

int
obx_devserver_start(const struct obx_devserver_options *opts, struct obx_devserver **out, char *err,
                    size_t err_len)
{
    char scratch[256];
    struct obx_devserver *d;

    if (err == NULL || err_len == 0) {
        err = scratch; /* the pieces below always write their reason somewhere */
        err_len = sizeof(scratch);
    }
    err[0] = '\0';
    if (opts == NULL || out == NULL) {
        snprintf(err, err_len, "devserver: options and result are required");
        return -1;
    }
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        snprintf(err, err_len, "devserver: out of memory");
        return -1;
    }
    d->reaper_fd = -1;
    if (start_servers(opts, d, err, err_len) != 0) {
        obx_devserver_stop(d);
        return -1;
    }
    *out = d;
    return 0;
}

const char *
obx_devserver_database_url(const struct obx_devserver *d)
{
    return d != NULL && d->database_url[0] != '\0' ? d->database_url : NULL;
}

const char *
obx_devserver_nats_url(const struct obx_devserver *d)
{
    return d != NULL && d->nats_url[0] != '\0' ? d->nats_url : NULL;
}

void
obx_devserver_info(const struct obx_devserver *d, struct obx_devserver_info *info)
{
    info->dir = d->dir;
    info->reaper_pid = d->reaper_pid;
    info->postmaster_pid = obx_dev_pg_postmaster_pid(d->dir);
    info->nats_pid = d->nats.pid;
}

void
obx_devserver_stop(struct obx_devserver *d)
{
    if (d == NULL) {
        return;
    }
    obx_dev_teardown(d->dir);
    if (d->reaper_fd >= 0) {
        /* The reaper wakes, finds the directory gone and exits; wait so nothing outlives us. */
        close(d->reaper_fd);
        obx_dev_wait_pid_gone(d->reaper_pid, REAPER_EXIT_TIMEOUT_MS);
    }
    free(d);
}
