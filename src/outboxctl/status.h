/* SPDX-License-Identifier: MIT */
/*
 * status.h - the outbox's counts, as `outboxctl status` prints them.
 */
#ifndef OBX_STATUS_H
#define OBX_STATUS_H

#include <libpq-fe.h>

#include "outbox/outbox.h"

struct obx_status {
    long long pending, leased, done, dead, invalid;
    long long backing_off;       /* pending rows waiting for their retry time */
    long long dead_letters;      /* not yet requeued */
    long long schema_version;    /* newest applied migration */
    double oldest_pending_age_s; /* oldest row due now; 0 when none */
};

outbox_status obx_status_read(PGconn *conn, const char *schema, struct obx_status *out,
                              outbox_error *err);

#endif
