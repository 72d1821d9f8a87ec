/* SPDX-License-Identifier: MIT */
/*
 * demo_pg.h - what the demo's two PostgreSQL files share.
 */
#ifndef OBX_DEMO_PG_H
#define OBX_DEMO_PG_H

#include <libpq-fe.h>

/* Runs one statement with text parameters; 1 when it succeeded. */
int obx_demo_exec_ok(PGconn *conn, const char *sql, int nparams, const char *const *params);

#endif
