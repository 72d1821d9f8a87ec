/* SPDX-License-Identifier: MIT */
/*
 * error_pg.h - translating libpq's failures into outbox_error, at the
 * PostgreSQL edge: only *_pg.c files include this.
 */
#ifndef OBX_ERROR_PG_H
#define OBX_ERROR_PG_H

#include <libpq-fe.h>

#include "outbox/outbox.h"

/*
 * Classifies a failed libpq call by what failed: the connection (none,
 * broken, or ended by a FATAL error), or a SQLSTATE that says the server
 * cannot serve now - 57P01-57P03 (shutdown), 53 (out of resources), 57014
 * (statement timeout) or 55P03 (lock timeout) - is OUTBOX_EUNAVAILABLE
 * (retry later, spend no attempt); anything else the server answered on a
 * live connection, class 08 included (08P01: a bind with the wrong number
 * of parameters), is OUTBOX_EDB with its SQLSTATE. `res` may be NULL when
 * libpq ran out of memory.
 */
outbox_status obx_fail_pg(outbox_error *err, PGconn *conn, const PGresult *res, const char *doing);

/*
 * Classifies a failed handler statement: like obx_fail_pg(), except that
 * its own statement or lock timeout on a live connection, and anything
 * else the server answered, is OUTBOX_EREJECTED - the handler's failure,
 * which spends an attempt, or a handler that always times out would retry
 * forever without ever being dead-lettered. Only a lost connection, a
 * shutdown or a lack of server resources stays OUTBOX_EUNAVAILABLE.
 */
outbox_status obx_fail_pg_handler(outbox_error *err, PGconn *conn, const PGresult *res,
                                  const char *doing);

/* Runs `sql` (no parameters, results discarded); a failure is classified as by obx_fail_pg(). */
outbox_status obx_pg_exec(PGconn *conn, const char *sql, const char *doing, outbox_error *err);

#endif
