/* SPDX-License-Identifier: MIT */
/*
 * query.h - outboxctl's statements: an embedded template rendered for the
 * schema, run with text parameters, its rows handed back as JSON objects,
 * so the verbs print and read them without touching libpq.
 *
 * Columns become keys; values keep their type: integers and floats as
 * numbers, booleans, json and jsonb as themselves, timestamps as ISO 8601
 * strings (2026-11-29T09:41:56.123+00:00), NULL as null, the rest text.
 * Parameters are all sent as text (NULL for SQL NULL); the statement casts
 * them ($4::uuid), so a parameter a statement does not use is no error.
 */
#ifndef OBX_CTL_QUERY_H
#define OBX_CTL_QUERY_H

#include <jansson.h>
#include <libpq-fe.h>

#include "outbox/outbox.h"
#include "store/store.h"

/* A statement and its parameters. */
struct obx_ctl_stmt {
    const char *tmpl;          /* embedded SQL with schema markers */
    const char *const *params; /* `count` text values, NULL entries for SQL NULL */
    int count;
};

/* The rows as a new JSON array of objects (owned by the caller). */
outbox_status obx_ctl_query(PGconn *conn, const char *schema, const struct obx_ctl_stmt *stmt,
                            json_t **rows, outbox_error *err);

/* The first row (owned), or NULL in *row when there is none. */
outbox_status obx_ctl_query_one(PGconn *conn, const char *schema, const struct obx_ctl_stmt *stmt,
                                json_t **row, outbox_error *err);

/*
 * The rows as a lease the relay's batch code reads (obx_relay_batch_prepare):
 * the statement's first two columns must be the event id and its envelope
 * as text, in the order of lease_batch.sql. `*rows` gets every column as
 * JSON as well (owned). `out` owns the result: obx_lease_fini().
 */
outbox_status obx_ctl_query_lease(PGconn *conn, const char *schema, const struct obx_ctl_stmt *stmt,
                                  struct obx_lease *out, json_t **rows, outbox_error *err);

/* BEGIN, COMMIT or ROLLBACK (or another statement without parameters or rows). */
outbox_status obx_ctl_exec(PGconn *conn, const char *sql, outbox_error *err);

#endif
