/* SPDX-License-Identifier: MIT */
/*
 * ctl.h - outboxctl's verbs and what they share. Each verb returns the
 * exit code: 0 all is well, 1 it found or did something the caller must
 * act on (or a server failed), 2 usage or configuration error.
 */
#ifndef OBX_CTL_H
#define OBX_CTL_H

#include <libpq-fe.h>

#include "config/config.h"
#include "outbox/outbox.h"

/*
 * Connects to OUTBOX_DATABASE_URL into `*out`. On failure prints why and
 * returns the exit code: 2 when the URL is missing, 1 when it cannot connect.
 */
int obx_ctl_connect(const struct obx_config *cfg, PGconn **out);

/* Closes a connection from obx_ctl_connect(); NULL does nothing. */
void obx_ctl_close(PGconn *conn);

/*
 * Prints "outboxctl VERB: <err>" (and its SQLSTATE) to stderr; returns the
 * exit code: 2 for OUTBOX_EINVAL (the input), 1 for anything else.
 */
int obx_ctl_fail(const char *verb, const outbox_error *err);

int obx_ctl_migrate(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_status(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_trace(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_dead(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_replay(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_audit(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_validate(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_quarantine(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_export(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_erase(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_subjects(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_doctor(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_roles(const struct obx_config *cfg, int argc, char **argv);
int obx_ctl_ordering(const struct obx_config *cfg, int argc, char **argv);

#endif
