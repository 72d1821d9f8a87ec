/* SPDX-License-Identifier: MIT */
/*
 * devserver_int.h - what tests may inspect of a devserver (devserver.h):
 * where it lives and what runs, to check that nothing is left behind.
 */
#ifndef OBX_DEVSERVER_INT_H
#define OBX_DEVSERVER_INT_H

#include <sys/types.h>

#include "devserver.h"

struct obx_devserver_info {
    const char *dir;      /* the temporary directory; borrowed from the devserver */
    pid_t reaper_pid;     /* tears down if the owner dies */
    pid_t postmaster_pid; /* 0 if PostgreSQL was not started */
    pid_t nats_pid;       /* 0 if nats-server was not started */
};

/* Fills `info`; valid until obx_devserver_stop(d). */
void obx_devserver_info(const struct obx_devserver *d, struct obx_devserver_info *info);

#endif
