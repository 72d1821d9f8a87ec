/* SPDX-License-Identifier: MIT */
/*
 * enqueue_pg.c - the writer: insert events inside the caller's transaction.
 *
 * The library never owns the caller's connection: no BEGIN or COMMIT, no
 * SET, no named prepared statements (their names could collide with the
 * caller's). Everything that can be checked is checked before a byte is
 * sent, so a bad event leaves the caller's transaction usable.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/error_pg.h"
#include "common/sql.h"
#include "config/config.h"
#include "sql_gen.h"
#include "writer_internal.h"

#include "common/banned.h" /* last: poisons unsafe functions */

struct outbox_writer {
    char *sql_one;   /* owned; enqueue_one.sql for this schema */
    char *sql_batch; /* owned; enqueue_batch.sql for this schema */
    size_t max_envelope_bytes;
};

void
outbox_writer_free(outbox_writer *w)
{
    if (w == NULL) {
        return;
    }
    free(w->sql_one);
    free(w->sql_batch);
    free(w);
}

/* The schema and the size limit were checked when they were set (config/). */
static outbox_status
writer_make(const struct obx_config *c, outbox_writer **out, outbox_error *err)
{
    char quoted[OBX_SCHEMA_QUOTED_CAP];
    outbox_writer *w;
    outbox_status status;

    if (c->parts != OBX_FOR_WRITER) {
        return obx_fail(
            err, OUTBOX_EINVAL,
            "a writer needs a writer configuration (outbox_config_new(OUTBOX_CONFIG_WRITER))");
    }
    status = obx_sql_quote_schema(c->schema, quoted, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    w->sql_one = obx_sql_render(obx_sql_enqueue_one, quoted);
    w->sql_batch = obx_sql_render(obx_sql_enqueue_batch, quoted);
    w->max_envelope_bytes = (size_t)c->max_envelope_bytes;
    if (w->sql_one == NULL || w->sql_batch == NULL) {
        outbox_writer_free(w);
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    *out = w;
    return OUTBOX_OK;
}

outbox_status
outbox_writer_new(const outbox_config *cfg, outbox_writer **out, outbox_error *err)
{
    struct obx_config defaults;
    outbox_status status;

    obx_error_reset(err);
    if (cfg != NULL) {
        return writer_make(&cfg->values, out, err);
    }
    status = obx_config_init(&defaults, OBX_FOR_WRITER, err);
    if (status == OUTBOX_OK) {
        status = writer_make(&defaults, out, err);
    }
    obx_config_fini(&defaults);
    return status;
}

/* The connection must be idle inside an open transaction. */
static outbox_status
check_in_transaction(PGconn *conn, outbox_error *err)
{
    if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "enqueue: no database connection");
    }
    switch (PQtransactionStatus(conn)) {
    case PQTRANS_INTRANS:
        return OUTBOX_OK;
    case PQTRANS_IDLE:
        return obx_fail(err, OUTBOX_ENOTXN,
                        "enqueue: the connection is not inside a transaction; BEGIN first, "
                        "so the event commits with your data");
    case PQTRANS_INERROR:
        return obx_fail(err, OUTBOX_ENOTXN,
                        "enqueue: the transaction has already failed; roll it back");
    case PQTRANS_ACTIVE:
        return obx_fail(err, OUTBOX_EINVAL, "enqueue: the connection is busy with a command");
    case PQTRANS_UNKNOWN:
        break;
    }
    return obx_fail(err, OUTBOX_EUNAVAILABLE, "enqueue: the connection is in an unknown state");
}

/* Serializes one event and checks its size against the writer's limit. */
static outbox_status
envelope_within_limit(const outbox_writer *w, outbox_event *ev, const char **json, size_t *len,
                      outbox_error *err)
{
    outbox_status status = obx_event_envelope(ev, json, len, err);

    if (status == OUTBOX_OK && *len > w->max_envelope_bytes) {
        status = obx_fail(err, OUTBOX_EINVAL, "envelope is %zu bytes, over the limit of %zu", *len,
                          w->max_envelope_bytes);
    }
    return status;
}

static outbox_status
run_insert(PGconn *conn, const char *sql, const char *const *params, int nparams, const char *doing,
           outbox_error *err)
{
    PGresult *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
    outbox_status status = OUTBOX_OK;

    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        status = obx_fail_pg(err, conn, res, doing);
    }
    PQclear(res);
    return status;
}

outbox_status
outbox_writer_enqueue(const outbox_writer *w, PGconn *conn, outbox_event *ev, outbox_error *err)
{
    const char *json;
    size_t len;
    outbox_status status;

    obx_error_reset(err);
    if (w == NULL || ev == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "enqueue: writer and event are required");
    }
    status = envelope_within_limit(w, ev, &json, &len, err);
    if (status == OUTBOX_OK) {
        status = check_in_transaction(conn, err);
    }
    if (status == OUTBOX_OK) {
        const char *params[7];

        /* The columns as values: cheaper for the server than reading them from the envelope. */
        obx_event_columns(ev, params);
        params[6] = json;
        status = run_insert(conn, w->sql_one, params, 7, "enqueue", err);
    }
    return status;
}

/* Builds the JSON array of every envelope; names the first bad event. */
static outbox_status
batch_array(const outbox_writer *w, outbox_event *const *events, size_t count, struct obx_buf *out,
            outbox_error *err)
{
    outbox_error inner;

    obx_buf_append_str(out, "[");
    for (size_t i = 0; i < count; i++) {
        const char *json;
        size_t len;

        obx_error_reset(&inner);
        if (events[i] == NULL) {
            return obx_fail(err, OUTBOX_EINVAL, "enqueue batch: event %zu is NULL", i);
        }
        if (envelope_within_limit(w, events[i], &json, &len, &inner) != OUTBOX_OK) {
            return obx_fail(err, inner.code, "enqueue batch: event %zu (%s): %s", i,
                            outbox_event_id(events[i]), inner.message);
        }
        if (i > 0) {
            obx_buf_append_str(out, ",");
        }
        obx_buf_append(out, json, len);
    }
    obx_buf_append_str(out, "]");
    if (obx_buf_failed(out)) {
        return obx_fail(err, OUTBOX_ENOMEM, "enqueue batch: out of memory");
    }
    return OUTBOX_OK;
}

outbox_status
outbox_writer_enqueue_batch(const outbox_writer *w, PGconn *conn, outbox_event *const *events,
                            size_t count, outbox_error *err)
{
    struct obx_buf array;
    outbox_status status;

    obx_error_reset(err);
    if (w == NULL || (events == NULL && count > 0)) {
        return obx_fail(err, OUTBOX_EINVAL, "enqueue batch: writer and events are required");
    }
    if (count == 0) {
        return check_in_transaction(conn, err);
    }
    obx_buf_init(&array);
    status = batch_array(w, events, count, &array, err);
    if (status == OUTBOX_OK) {
        status = check_in_transaction(conn, err);
    }
    if (status == OUTBOX_OK) {
        const char *param = array.data;

        status = run_insert(conn, w->sql_batch, &param, 1, "enqueue batch", err);
    }
    obx_buf_fini(&array);
    return status;
}

/* The writer behind outbox_enqueue(): the default configuration, made once per process. */
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static outbox_writer *default_writer;

static void
make_default_writer(void)
{
    outbox_writer_new(NULL, &default_writer, NULL);
}

static const outbox_writer *
get_default_writer(outbox_error *err)
{
    pthread_once(&default_once, make_default_writer);
    if (default_writer == NULL) {
        obx_fail(err, OUTBOX_ENOMEM, "enqueue: out of memory");
    }
    return default_writer;
}

outbox_status
outbox_enqueue(PGconn *conn, outbox_event *ev, outbox_error *err)
{
    const outbox_writer *w = get_default_writer(err);

    return w ? outbox_writer_enqueue(w, conn, ev, err) : OUTBOX_ENOMEM;
}

outbox_status
outbox_enqueue_batch(PGconn *conn, outbox_event *const *events, size_t count, outbox_error *err)
{
    const outbox_writer *w = get_default_writer(err);

    return w ? outbox_writer_enqueue_batch(w, conn, events, count, err) : OUTBOX_ENOMEM;
}
