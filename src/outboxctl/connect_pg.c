/* SPDX-License-Identifier: MIT */
/*
 * connect_pg.c - outboxctl's database connection.
 *
 * The error printed never includes the connection string: it may carry
 * a password.
 */
#include <stdio.h>
#include <string.h>

#include "ctl.h"

#include "common/banned.h" /* last: poisons unsafe functions */

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
        const char *why = PQerrorMessage(conn);

        fprintf(stderr, "outboxctl: cannot connect to the database: %.*s\n",
                (int)strcspn(why, "\n"), why);
        PQfinish(conn);
        return 1; /* runtime */
    }
    *out = conn;
    return 0;
}

void
obx_ctl_close(PGconn *conn)
{
    PQfinish(conn);
}
