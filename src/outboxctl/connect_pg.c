/* SPDX-License-Identifier: MIT */
/*
 * connect_pg.c - outboxctl's database connection.
 *
 * The error printed never includes the connection string: it may carry
 * a password.
 */
#include <stdio.h>
#include <string.h>

#include "common/secret.h"
#include "ctl.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* Notices (a re-run's "already exists, skipping") are not the operator's business. */
static void
ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

int
obx_ctl_connect(const struct obx_config *cfg, PGconn **out)
{
    const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
    const char *values[] = {cfg->database_url, "10", "outboxctl", NULL};
    PGconn *conn;

    *out = NULL;
    if (cfg->database_url == NULL) {
        fprintf(stderr, "outboxctl: OUTBOX_DATABASE_URL is required\n");
        return 2; /* configuration */
    }
    conn = PQconnectdbParams(keys, values, 1);
    if (PQstatus(conn) != CONNECTION_OK) {
        char why[400], clean[600];

        /* libpq's message may quote part of the connection string. */
        snprintf(why, sizeof(why), "%.*s", (int)strcspn(PQerrorMessage(conn), "\n"),
                 PQerrorMessage(conn));
        obx_mask_echo(why, cfg->database_url, clean, sizeof(clean));
        fprintf(stderr, "outboxctl: cannot connect to the database: %s\n", clean);
        PQfinish(conn);
        return 1; /* runtime */
    }
    PQsetNoticeProcessor(conn, ignore_notice, NULL);
    *out = conn;
    return 0;
}

void
obx_ctl_close(PGconn *conn)
{
    PQfinish(conn);
}

int
obx_ctl_fail(const char *verb, const outbox_error *err)
{
    fprintf(stderr, "outboxctl %s: %s%s%s\n", verb, err->message,
            err->sqlstate[0] ? " sqlstate=" : "", err->sqlstate);
    return err->code == OUTBOX_EINVAL ? 2 : 1;
}
