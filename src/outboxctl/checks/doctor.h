/* SPDX-License-Identifier: MIT */
/*
 * doctor.h - what outboxctl doctor's parts share: the findings so far and
 * how to add one (findings.c), and the broker's checks (doctor_stream.c),
 * run by cmd_doctor.c after the database's.
 */
#ifndef OBX_CTL_DOCTOR_H
#define OBX_CTL_DOCTOR_H

#include <jansson.h>
#include <libpq-fe.h>

#include "config/settings.h"

struct obx_doctor {
    const struct obx_config *cfg;
    PGconn *conn;
    json_t *findings; /* owned: {check, level, saw, fix} in the order found */
    int errors, warnings;
};

/* Adds a finding; `level` is "ok", "warn" or "error"; `fix` may be NULL (nothing to do). */
void obx_doctor_add(struct obx_doctor *d, const char *check, const char *level, const char *fix,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/*
 * The broker: the stream exists as a limits stream with file storage, a
 * duplicate window covering the relay's retry horizon and a max_age
 * covering the window; the server's version and JetStream storage; the
 * ledger kept at least as long as the stream's max_age.
 */
void obx_doctor_check_broker(struct obx_doctor *d);

#endif
