/* SPDX-License-Identifier: MIT */
/*
 * pg_conn.h - one way to open a worker's PostgreSQL connection, shared by
 * the store (relay, DB feed) and the ledger (consumers): the same
 * keepalives and timeouts, no notices printed, the same session limits.
 */
#ifndef OBX_PG_CONN_H
#define OBX_PG_CONN_H

#include <libpq-fe.h>

#include "sql.h"

#include "outbox/outbox.h"

/*
 * Connects to `conninfo` (a libpq URL or key=value string), adding
 * keepalives and connect/TCP timeouts unless the conninfo or a PG*
 * variable sets them, then bounds the session (session_setup.sql). An
 * explicit application_name in the conninfo wins over `application_name`
 * (may be NULL). On success `*out` owns the connection (PQfinish);
 * OUTBOX_EUNAVAILABLE when the server cannot be reached, OUTBOX_EINVAL for
 * a conninfo libpq cannot parse (the message never quotes it: it may hold
 * a password).
 */
outbox_status obx_pg_connect(const char *conninfo, const char *application_name, PGconn **out,
                             outbox_error *err);

/* Where a store or a ledger connects, kept to reconnect after an outage. */
struct obx_pg_target {
    char *conninfo;         /* owned; never put into a message: it may hold a password */
    char *application_name; /* owned; NULL for libpq's default */
    char quoted_schema[OBX_SCHEMA_QUOTED_CAP]; /* the outbox schema, quoted, with its dot */
    char schema[OBX_SCHEMA_MAX_LEN + 1];
};

/*
 * Copies the strings; OUTBOX_EINVAL without a conninfo or for a bad
 * schema name, OUTBOX_ENOMEM.
 */
outbox_status obx_pg_target_init(struct obx_pg_target *t, const char *conninfo,
                                 const char *application_name, const char *schema,
                                 outbox_error *err);
void obx_pg_target_fini(struct obx_pg_target *t);

/*
 * obx_pg_connect() to `t`, then checks that the schema has every migration
 * this build needs; a connection already in `*conn` is closed first. An
 * unmigrated or older schema is OUTBOX_EUNAVAILABLE, so a worker started
 * before `outboxctl migrate` waits for it (saying so) instead of failing
 * every statement.
 */
outbox_status obx_pg_target_connect(const struct obx_pg_target *t, PGconn **conn,
                                    outbox_error *err);

/* libpq's connection messages span lines ("\n\tIs the server running..."): joins them. */
void obx_pg_one_line(outbox_error *err);

#endif
