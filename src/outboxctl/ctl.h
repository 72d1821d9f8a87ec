/* SPDX-License-Identifier: MIT */
/*
 * ctl.h - outboxctl's verbs. Each returns the exit code: 0 success,
 * 1 runtime failure, 2 usage or configuration error.
 */
#ifndef OBX_CTL_H
#define OBX_CTL_H

#include <libpq-fe.h>

#include "config/config.h"

/*
 * Connects to OUTBOX_DATABASE_URL into `*out`. On failure prints why and
 * returns the exit code: 2 when the URL is missing, 1 when it cannot connect.
 */
int obx_ctl_connect(const struct obx_config *cfg, PGconn **out);

/* Closes a connection from obx_ctl_connect(); NULL does nothing. */
void obx_ctl_close(PGconn *conn);

int obx_ctl_migrate(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_status(const struct obx_config *cfg, int argc, char **argv);

#endif
