/* SPDX-License-Identifier: MIT */
/*
 * store_conn_pg.c - a store's connection: open, reconnect, close, and the
 * wake-up (LISTEN, then poll on the socket).
 *
 * The connection runs in autocommit and is prepared once per connect:
 * timeouts that notice a dead server within seconds, statement and
 * idle-in-transaction limits, and LISTEN again after a reconnect.
 */
#include "store.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "common/error.h"
#include "common/error_pg.h"
#include "common/sql.h"
#include "sql_gen.h"
#include "store_int.h"
#include "support/pause.h"
#include "support/pg_conn.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static const char *const sql_templates[OBX_STORE_SQL_COUNT] = {
    [OBX_STORE_LEASE] = obx_sql_lease_batch,
    [OBX_STORE_FINISH_ROWS] = obx_sql_finish_rows,
    [OBX_STORE_DONE_PRUNE] = obx_sql_finish_done_prune,
    [OBX_STORE_DONE_MARK] = obx_sql_finish_done_mark,
    [OBX_STORE_PRUNE] = obx_sql_prune_done,
    [OBX_STORE_LISTEN] = obx_sql_listen_wakeup,
    [OBX_STORE_SESSION] = obx_sql_store_session,
    [OBX_STORE_EXTEND] = obx_sql_lease_extend,
    [OBX_STORE_HEALTH] = obx_sql_outbox_health,
    [OBX_STORE_CLAIM_CURSOR] = obx_sql_claim_cursor,
    [OBX_STORE_CLAIM_TAKEOVER] = obx_sql_claim_takeover,
    [OBX_STORE_CLAIM_WINDOW] = obx_sql_claim_window,
    [OBX_STORE_CLAIM_WINDOW_ROWS] = obx_sql_claim_window_rows,
    [OBX_STORE_WAKE_SUCCESSORS] = obx_sql_wake_successors,
    [OBX_STORE_LEASE_ALL] = obx_sql_lease_batch, /* then lease_all_rows() */
};

/*
 * Makes OBX_STORE_LEASE_ALL the row lease of every due row, fresh ones
 * included, as before window claims: lease_batch.sql's marked condition
 * reads `true OR ...`. Only outbox-bench's comparison runs it.
 */
static outbox_status
lease_all_rows(struct obx_pg_session *s, outbox_error *err)
{
    static const char marker[] = "/*came_back*/";
    char *sql = s->sql[OBX_STORE_LEASE_ALL];
    char *at = strstr(sql, marker);
    size_t head, size;
    char *out;

    if (at == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "lease_batch.sql lost its %s marker", marker);
    }
    head = (size_t)(at - sql);
    size = strlen(sql) + sizeof("true OR");
    out = malloc(size);
    if (out == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "open store: out of memory");
    }
    snprintf(out, size, "%.*strue OR%s", (int)head, sql, at + strlen(marker));
    free(sql);
    s->sql[OBX_STORE_LEASE_ALL] = out;
    return OUTBOX_OK;
}

/* What a new connection must set up beyond obx_pg_connect(): see store_session.sql, LISTEN. */
static outbox_status
prepare_session(struct obx_store *store, outbox_error *err)
{
    const char *params[] = {store->schema};
    outbox_status status =
        obx_pg_session_run(&store->pg, OBX_STORE_SESSION, NULL, 0, "set up the session", err);

    if (status != OUTBOX_OK || !store->listening) {
        return status;
    }
    return obx_pg_session_run(&store->pg, OBX_STORE_LISTEN, params, 1, "listen for wake-ups", err);
}

static outbox_status
connect_store(struct obx_store *store, outbox_error *err)
{
    outbox_status status = obx_pg_session_connect(&store->pg, err);

    if (status == OUTBOX_OK) {
        status = prepare_session(store, err);
    }
    if (status != OUTBOX_OK) {
        PQfinish(store->pg.conn);
        store->pg.conn = NULL;
    }
    return status;
}

void
obx_store_close(struct obx_store *store)
{
    if (store != NULL) {
        obx_store_release_woken(store);
        obx_pg_session_fini(&store->pg);
        free(store->schema);
        free(store->holder);
        free(store);
    }
}

void
obx_store_use_row_leases(struct obx_store *store, int on)
{
    store->row_leases_only = on != 0;
}

outbox_status
obx_store_open(const struct obx_store_options *opts, struct obx_store **out, outbox_error *err)
{
    struct obx_store *store;
    outbox_status status;

    obx_error_reset(err);
    store = calloc(1, sizeof(*store));
    if (store == NULL || (store->schema = strdup(opts->schema ? opts->schema : "")) == NULL ||
        (store->holder = strdup(opts->holder             ? opts->holder
                                : opts->application_name ? opts->application_name
                                                         : "")) == NULL) {
        if (store != NULL) {
            free(store->schema);
        }
        free(store);
        return obx_fail(err, OUTBOX_ENOMEM, "open store: out of memory");
    }
    status = obx_pg_session_init(&store->pg, opts->conninfo, opts->application_name, opts->schema,
                                 sql_templates, OBX_STORE_SQL_COUNT, err);
    /* Only the store's own statements run in its session: prepared once (pg_conn.h). */
    store->pg.use_prepared = 1;
    if (status == OUTBOX_OK) {
        status = lease_all_rows(&store->pg, err);
    }
    if (status == OUTBOX_OK) {
        status = connect_store(store, err);
    }
    if (status != OUTBOX_OK) {
        obx_store_close(store);
        return status;
    }
    *out = store;
    return OUTBOX_OK;
}

outbox_status
obx_store_reconnect(struct obx_store *store, outbox_error *err)
{
    obx_error_reset(err);
    return connect_store(store, err);
}

outbox_status
obx_store_listen(struct obx_store *store, outbox_error *err)
{
    const char *params[] = {store->schema};
    outbox_status status;

    obx_error_reset(err);
    status = obx_pg_session_require(&store->pg, err);
    if (status == OUTBOX_OK) {
        status =
            obx_pg_session_run(&store->pg, OBX_STORE_LISTEN, params, 1, "listen for wake-ups", err);
    }
    if (status == OUTBOX_OK) {
        store->listening = 1;
    }
    return status;
}

/* Frees every queued notification; returns how many there were. */
static int
drain_notifications(PGconn *conn)
{
    PGnotify *n;
    int count = 0;

    while ((n = PQnotifies(conn)) != NULL) {
        PQfreemem(n);
        count++;
    }
    return count;
}

outbox_status
obx_store_wait(struct obx_store *store, int timeout_ms, int *woken, outbox_error *err)
{
    long long deadline_ms = obx_monotonic_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    outbox_status status;

    obx_error_reset(err);
    status = obx_pg_session_require(&store->pg, err);
    if (status != OUTBOX_OK) {
        return status;
    }
    for (;;) {
        struct pollfd pfd = {.fd = PQsocket(store->pg.conn), .events = POLLIN};
        long long left_ms;

        /*
         * Never blocks (libpq's socket is non-blocking). Notifications read
         * during earlier statements are queued already; this adds what has
         * arrived since, and reads the EOF of a server that went away.
         */
        if (!PQconsumeInput(store->pg.conn)) {
            status = obx_fail_pg(err, store->pg.conn, NULL, "wait for a wake-up");
            obx_pg_one_line(err);
            return status;
        }
        if (drain_notifications(store->pg.conn) > 0) {
            *woken = 1;
            return OUTBOX_OK;
        }
        left_ms = deadline_ms - obx_monotonic_ms();
        if (left_ms <= 0) {
            *woken = 0;
            return OUTBOX_OK;
        }
        if (poll(&pfd, 1, (int)left_ms) < 0 && errno != EINTR) {
            return obx_fail(err, OUTBOX_EUNAVAILABLE, "wait for a wake-up: poll failed: errno %d",
                            errno);
        }
    }
}
