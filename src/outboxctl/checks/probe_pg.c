/* SPDX-License-Identifier: MIT */
/*
 * probe_pg.c - doctor's session probes (see probe.h). Each leaves the
 * session as it found it: the probe setting is the session's own, the
 * channel is unlistened, nothing is committed anywhere.
 */
#include "probe.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/error_pg.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* One row of text values from a statement without parameters; NULL and `err` on failure. */
static PGresult *
one_row(PGconn *conn, const char *sql, outbox_error *err)
{
    PGresult *res = PQexec(conn, sql);

    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        obx_fail_pg(err, conn, res, "doctor probe");
        PQclear(res);
        return NULL;
    }
    return res;
}

/*
 * A second session with this one's parameters, `dbname` replaced when not
 * NULL (PgBouncer's admin console is the database "pgbouncer"). NULL if it
 * could not be set up; check PQstatus() otherwise.
 */
static PGconn *
connect_like(PGconn *conn, const char *dbname)
{
    PQconninfoOption *opts = PQconninfo(conn);
    const char *keys[64], *values[64];
    PGconn *other;
    int n = 0;

    if (opts == NULL) {
        return NULL;
    }
    for (PQconninfoOption *o = opts; o->keyword != NULL && n < 62; o++) {
        if (o->val != NULL && o->val[0] != '\0') {
            keys[n] = o->keyword;
            values[n] = dbname != NULL && strcmp(o->keyword, "dbname") == 0 ? dbname : o->val;
            n++;
        }
    }
    keys[n] = values[n] = NULL;
    other = PQconnectdbParams(keys, values, 0);
    PQconninfoFree(opts);
    return other;
}

/*
 * Two client sessions never share a server process, unless a pooler in
 * transaction (or statement) mode hands the process our first statement
 * gave back to the next client: PgBouncer reuses the most recently freed
 * one first. This catches a pooler serving one client, where every
 * statement of ours runs on the same process and keeps its settings.
 */
static int
backend_shared(PGconn *conn, const char *first_pid)
{
    PGconn *other = connect_like(conn, NULL);
    PGresult *res = NULL;
    int shared = 0;

    if (other != NULL && PQstatus(other) == CONNECTION_OK) {
        res = PQexec(other, "SELECT pg_backend_pid()");
        shared = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
                 strcmp(PQgetvalue(res, 0, 0), first_pid) == 0;
    }
    PQclear(res);
    PQfinish(other);
    return shared;
}

/*
 * Names the pooler when it is PgBouncer: its admin console answers SHOW
 * VERSION to an admin, and "not allowed" to anyone else; PostgreSQL has no
 * database of that name (or one that cannot say SHOW VERSION).
 */
static void
name_pooler(PGconn *conn, char *name, size_t len)
{
    PGconn *admin = connect_like(conn, "pgbouncer");
    PGresult *res = NULL;

    name[0] = '\0';
    if (admin == NULL) {
        return;
    }
    if (PQstatus(admin) == CONNECTION_OK) {
        res = PQexec(admin, "SHOW VERSION");
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
            strncmp(PQgetvalue(res, 0, 0), "PgBouncer", 9) == 0) {
            snprintf(name, len, "%s", PQgetvalue(res, 0, 0));
        }
    } else if (strstr(PQerrorMessage(admin), "not allowed") != NULL) {
        snprintf(name, len, "PgBouncer");
    }
    PQclear(res);
    PQfinish(admin);
}

outbox_status
obx_ctl_probe_session(PGconn *conn, struct obx_ctl_session_probe *out, outbox_error *err)
{
    PGresult *first, *second;
    const char *port = PQport(conn);

    memset(out, 0, sizeof(*out));
    snprintf(out->client_port, sizeof(out->client_port), "%s", port != NULL ? port : "");
    first = one_row(conn,
                    "SELECT current_setting('port'), pg_backend_pid(), "
                    "set_config('outbox.doctor_probe', 'on', false)",
                    err);
    if (first == NULL) {
        return err != NULL ? err->code : OUTBOX_EDB;
    }
    out->backend_shared = backend_shared(conn, PQgetvalue(first, 0, 1));
    second = one_row(conn,
                     "SELECT pg_backend_pid(), "
                     "coalesce(current_setting('outbox.doctor_probe', true), '')",
                     err);
    if (second == NULL) {
        PQclear(first);
        return err != NULL ? err->code : OUTBOX_EDB;
    }
    snprintf(out->server_port, sizeof(out->server_port), "%s", PQgetvalue(first, 0, 0));
    out->backend_changed = strcmp(PQgetvalue(first, 0, 1), PQgetvalue(second, 0, 0)) != 0;
    out->setting_lost = strcmp(PQgetvalue(second, 0, 1), "on") != 0;
    PQclear(second);
    PQclear(first);
    PQclear(PQexec(conn, "RESET outbox.doctor_probe"));
    if (out->backend_changed || out->setting_lost || out->backend_shared) {
        name_pooler(conn, out->pooler, sizeof(out->pooler));
    }
    return OUTBOX_OK;
}

outbox_status
obx_ctl_probe_inherited(PGconn *conn, char *settings, size_t cap, int *sync_off, outbox_error *err)
{
    /* The pooler sets the client's startup parameters on the server connection it hands
     * over; outboxctl's connection sets the two timeouts (session_setup.sql). */
    PGresult *res = one_row(
        conn,
        "SELECT coalesce(string_agg(name || '=' || setting, ', ' ORDER BY name), ''), "
        "coalesce(bool_or(name = 'synchronous_commit' AND setting = 'off'), false) "
        "FROM pg_settings WHERE source = 'session' AND name NOT LIKE 'outbox.%' "
        "AND name NOT IN ('application_name', 'client_encoding', 'DateStyle', 'IntervalStyle', "
        "'TimeZone', 'standard_conforming_strings', 'extra_float_digits', 'statement_timeout', "
        "'idle_in_transaction_session_timeout')",
        err);

    if (res == NULL) {
        return err != NULL ? err->code : OUTBOX_EDB;
    }
    snprintf(settings, cap, "%s", PQgetvalue(res, 0, 0));
    *sync_off = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    PQclear(res);
    return OUTBOX_OK;
}

static outbox_status
exec_command(PGconn *conn, const char *sql, outbox_error *err)
{
    PGresult *res = PQexec(conn, sql);
    outbox_status st = OUTBOX_OK;

    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        st = obx_fail_pg(err, conn, res, "notify probe");
    }
    PQclear(res);
    return st;
}

/* Waits for a notification on `channel`; 1 if it came within `wait_ms`. */
static int
wait_for(PGconn *conn, const char *channel, int wait_ms)
{
    long long deadline = obx_monotonic_ms() + wait_ms;

    for (;;) {
        PGnotify *n;
        struct pollfd pfd = {.fd = PQsocket(conn), .events = POLLIN};
        long long left = deadline - obx_monotonic_ms();

        PQconsumeInput(conn);
        while ((n = PQnotifies(conn)) != NULL) {
            int ours = strcmp(n->relname, channel) == 0;

            PQfreemem(n);
            if (ours) {
                return 1;
            }
        }
        if (left <= 0 || pfd.fd < 0) {
            return 0;
        }
        poll(&pfd, 1, (int)left);
    }
}

outbox_status
obx_ctl_probe_notify(PGconn *conn, int wait_ms, int *heard, outbox_error *err)
{
    char channel[64], listen[96], notify[96], unlisten[96];
    outbox_status st;

    /* Digits only: the channel needs no quoting. Unsigned: behind PgBouncer the "pid" is
     * the pooler's random cancel key, negative half the time. */
    snprintf(channel, sizeof(channel), "outbox_doctor_%u", (unsigned)PQbackendPID(conn));
    snprintf(listen, sizeof(listen), "LISTEN %s", channel);
    snprintf(notify, sizeof(notify), "NOTIFY %s", channel);
    snprintf(unlisten, sizeof(unlisten), "UNLISTEN %s", channel);
    *heard = 0;
    st = exec_command(conn, listen, err);
    if (st == OUTBOX_OK) {
        st = exec_command(conn, notify, err);
    }
    if (st == OUTBOX_OK) {
        *heard = wait_for(conn, channel, wait_ms);
    }
    PQclear(PQexec(conn, unlisten));
    return st;
}

static long long
wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

outbox_status
obx_ctl_probe_clock(PGconn *conn, long long *skew_ms, long long *rtt_ms, outbox_error *err)
{
    long long before = wall_ms(), after, db;
    PGresult *res =
        one_row(conn, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint", err);

    after = wall_ms();
    if (res == NULL) {
        return err != NULL ? err->code : OUTBOX_EDB;
    }
    db = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    *skew_ms = db - (before + after) / 2;
    *rtt_ms = after - before;
    return OUTBOX_OK;
}
