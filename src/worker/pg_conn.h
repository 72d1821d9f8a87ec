/* SPDX-License-Identifier: MIT */
/*
 * pg_conn.h - one way to open a worker's PostgreSQL connection, shared by
 * the store (relay, DB feed) and the ledger (consumers): the same
 * keepalives and timeouts, no notices printed, the same session limits.
 */
#ifndef OBX_PG_CONN_H
#define OBX_PG_CONN_H

#include <libpq-fe.h>

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

/* libpq's connection messages span lines ("\n\tIs the server running..."): joins them. */
void obx_pg_one_line(outbox_error *err);

#endif
