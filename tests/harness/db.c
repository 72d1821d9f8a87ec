/* SPDX-License-Identifier: MIT */
/*
 * db.c - a fresh database per test, copied from a migrated template.
 *
 * The runner creates and migrates obx_tpl_<runner pid> once; each test copies
 * it with CREATE DATABASE ... TEMPLATE (a file copy, much faster than
 * migrating again) into obx_t_<runner pid>_<worker pid>_<n>. The names carry
 * the runner's pid so the run can find and drop its own databases on a
 * shared external server, and so parallel test binaries never collide.
 */
#include "harness_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "harness.h"
#include "outbox/outbox.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { MAX_FRESH = 32 };

static char fresh_dbs[MAX_FRESH][64]; /* created by this worker, dropped at exit */
static int n_fresh;
static int fresh_seq;
static char *current_url;

static void
quiet_notices(void *arg, const char *message)
{
    (void)arg;
    (void)message; /* "does not exist, skipping" and the like */
}

static const char *
base_url(void)
{
    const char *url = getenv(HX_ENV_PG);

    return url != NULL && url[0] != '\0' ? url : NULL;
}

PGconn *
hx_pg_connect_db(const char *dbname)
{
    /* A repeated keyword takes the last non-empty value: the URL's database is replaced. */
    const char *keys[] = {"dbname", "dbname", "fallback_application_name", "connect_timeout", NULL};
    const char *values[] = {base_url(), dbname, "obx-harness", "10", NULL};

    return PQconnectdbParams(keys, values, 1);
}

static PGconn *
connect_checked(const char *dbname)
{
    PGconn *conn;
    char msg[1024];

    cr_assert(base_url() != NULL, "harness: %s is not set", HX_ENV_PG);
    conn = hx_pg_connect_db(dbname);
    if (PQstatus(conn) == CONNECTION_OK) {
        return conn;
    }
    snprintf(msg, sizeof(msg), "%s", PQerrorMessage(conn));
    PQfinish(conn);
    cr_assert_fail("harness: cannot connect to database %s: %s", dbname ? dbname : "(admin)", msg);
    return NULL;
}

__attribute__((format(printf, 4, 5))) static void
append(char *buf, size_t len, size_t *used, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*used >= len) {
        return;
    }
    va_start(ap, fmt);
    n = vsnprintf(buf + *used, len - *used, fmt, ap);
    va_end(ap);
    *used = n < 0 ? len : *used + (size_t)n;
}

/* Percent-encodes all but RFC 3986's unreserved characters. */
static void
append_encoded(char *buf, size_t len, size_t *used, const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-._~", c) != NULL) {
            append(buf, len, used, "%c", c);
        } else {
            append(buf, len, used, "%%%02X", c);
        }
    }
}

static const char *
option(const PQconninfoOption *opts, const char *key)
{
    for (; opts->keyword != NULL; opts++) {
        if (strcmp(opts->keyword, key) == 0) {
            return opts->val != NULL && opts->val[0] != '\0' ? opts->val : NULL;
        }
    }
    return NULL;
}

/* The base URL's parameters with another database (and maybe port), as a URI. */
static char *
url_for(const char *dbname, int port)
{
    char *parse_err = NULL;
    PQconninfoOption *opts = PQconninfoParse(base_url(), &parse_err);
    char buf[2048];
    char port_text[64];
    size_t used = 0;
    char sep = '?';

    cr_assert(opts != NULL, "harness: cannot parse %s: %s", HX_ENV_PG,
              parse_err ? parse_err : "out of memory");
    append(buf, sizeof(buf), &used, "postgresql://");
    if (option(opts, "user") != NULL) {
        append_encoded(buf, sizeof(buf), &used, option(opts, "user"));
        append(buf, sizeof(buf), &used, "@");
    }
    if (option(opts, "host") != NULL) {
        append_encoded(buf, sizeof(buf), &used, option(opts, "host"));
    }
    if (port > 0) {
        snprintf(port_text, sizeof(port_text), "%d", port);
    } else {
        snprintf(port_text, sizeof(port_text), "%s",
                 option(opts, "port") ? option(opts, "port") : "");
    }
    if (port_text[0] != '\0') {
        append(buf, sizeof(buf), &used, ":%s", port_text);
    }
    append(buf, sizeof(buf), &used, "/%s", dbname);
    for (const PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val == NULL || o->val[0] == '\0' || strcmp(o->keyword, "dbname") == 0 ||
            strcmp(o->keyword, "user") == 0 || strcmp(o->keyword, "host") == 0 ||
            strcmp(o->keyword, "port") == 0) {
            continue;
        }
        append(buf, sizeof(buf), &used, "%c%s=", sep, o->keyword);
        append_encoded(buf, sizeof(buf), &used, o->val);
        sep = '&';
    }
    PQconninfoFree(opts);
    cr_assert(used < sizeof(buf), "harness: database URL too long");
    return strdup(buf);
}

/* Runs `sql` on an internal connection; returns 0, or -1 with the message in err. */
static int
exec_internal(PGconn *conn, const char *sql, char *err, size_t len)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType status = PQresultStatus(res);
    int rc = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK ? 0 : -1;

    if (rc != 0 && err != NULL) {
        snprintf(err, len, "%s: %s", sql, res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
    }
    PQclear(res);
    return rc;
}

/* CREATE DATABASE <name> from `template_db`; retries a name a dead worker left behind. */
static void
create_database(PGconn *admin, const char *runner, const char *template_db, char *name,
                size_t name_len)
{
    char sql[256];
    char err[1024];
    PGresult *res;

    for (int attempt = 0;; attempt++) {
        snprintf(name, name_len, "obx_t_%s_%d_%d", runner, (int)getpid(), fresh_seq++);
        snprintf(sql, sizeof(sql), "CREATE DATABASE %s TEMPLATE %s%s", name, template_db,
                 PQserverVersion(admin) >= 150000 ? " STRATEGY FILE_COPY" : "");
        res = PQexec(admin, sql);
        if (PQresultStatus(res) == PGRES_COMMAND_OK) {
            PQclear(res);
            return;
        }
        snprintf(err, sizeof(err), "%s", PQresultErrorMessage(res));
        if (attempt < 10 && PQresultErrorField(res, PG_DIAG_SQLSTATE) != NULL &&
            strcmp(PQresultErrorField(res, PG_DIAG_SQLSTATE), "42P04") == 0) {
            PQclear(res);
            continue; /* duplicate_database: our pid was reused within the run */
        }
        PQclear(res);
        PQfinish(admin);
        cr_assert_fail("harness: %s failed: %s", sql, err);
    }
}

static PGconn *
connect_fresh_from(const char *template_db)
{
    struct hx_state st;
    char runner[16];
    PGconn *admin;
    PGconn *conn;

    hx_servers_lock(0);
    hx_worker_atexit();
    hx_state_load(&st);
    cr_assert(n_fresh < MAX_FRESH, "harness: more than %d fresh databases in one test", MAX_FRESH);
    admin = connect_checked(NULL);
    PQsetNoticeProcessor(admin, quiet_notices, NULL);
    snprintf(runner, sizeof(runner), "%d", (int)st.runner_pid);
    create_database(admin, runner, template_db != NULL ? template_db : st.template_db,
                    fresh_dbs[n_fresh], sizeof(fresh_dbs[n_fresh]));
    PQfinish(admin);
    conn = connect_checked(fresh_dbs[n_fresh++]);
    free(current_url);
    current_url = url_for(fresh_dbs[n_fresh - 1], 0);
    return conn;
}

PGconn *
harness_pg_connect_fresh(void)
{
    return connect_fresh_from(NULL);
}

PGconn *
harness_pg_connect_fresh_empty(void)
{
    return connect_fresh_from("template0");
}

PGconn *
harness_pg_connect_fresh_ordered(void)
{
    PGconn *conn = connect_fresh_from(NULL);

    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    return conn;
}

PGconn *
harness_pg_connect_admin(void)
{
    hx_servers_lock(0);
    return connect_checked(NULL);
}

const char *
harness_db_url(void)
{
    cr_assert(current_url != NULL, "harness_db_url: call harness_pg_connect_fresh() first");
    return current_url;
}

char *
harness_db_url_via(int port)
{
    cr_assert(n_fresh > 0, "harness_db_url_via: call harness_pg_connect_fresh() first");
    return url_for(fresh_dbs[n_fresh - 1], port);
}

int
hx_template_create(struct hx_state *st, char *err, size_t len)
{
    char sql[256];
    outbox_error oerr;
    outbox_status status;
    PGconn *conn = hx_pg_connect_db(NULL);

    snprintf(st->template_db, sizeof(st->template_db), "obx_tpl_%d", (int)st->runner_pid);
    PQsetNoticeProcessor(conn, quiet_notices, NULL);
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", st->template_db);
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, len, "cannot connect to %s: %s", base_url(), PQerrorMessage(conn));
        PQfinish(conn);
        return -1;
    }
    /* A template left by a killed run whose pid we now have is dropped first. */
    if (exec_internal(conn, sql, err, len) != 0 ||
        (snprintf(sql, sizeof(sql), "CREATE DATABASE %s", st->template_db),
         exec_internal(conn, sql, err, len) != 0)) {
        PQfinish(conn);
        return -1;
    }
    PQfinish(conn);
    conn = hx_pg_connect_db(st->template_db);
    status = outbox_migrate(conn, "outbox", NULL, &oerr);
    if (status != OUTBOX_OK) {
        snprintf(err, len, "outbox_migrate on %s: %s: %s", st->template_db,
                 outbox_status_name(status), oerr.message);
        PQfinish(conn);
        return -1;
    }
    /*
     * A new schema starts ordered; the template does not. Most tests are
     * about one event's path (a failing row that retries behind younger
     * ones, a redelivery, a dead letter) and say nothing of order; the
     * ordered ones switch it on themselves, and test_migrate checks the
     * default on schemas of its own.
     */
    if (exec_internal(conn, "SELECT outbox.set_ordering(false)", err, len) != 0) {
        PQfinish(conn);
        return -1;
    }
    PQfinish(conn);
    return 0;
}

static void
drop_databases(PGconn *admin, char names[][64], int count)
{
    char sql[256];

    for (int i = 0; i < count; i++) {
        int n = snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s%s", names[i],
                         PQserverVersion(admin) >= 130000 ? " WITH (FORCE)" : "");

        /* Names are at most 63 bytes; checking the length also tells -O3 so. */
        if (n > 0 && (size_t)n < sizeof(sql)) {
            exec_internal(admin, sql, NULL, 0);
        }
    }
}

void
hx_dbs_drop_all(const struct hx_state *st)
{
    char sql[256];
    char names[256][64];
    int count = 0;
    PGconn *admin = base_url() != NULL ? hx_pg_connect_db(NULL) : NULL;
    PGresult *res;

    if (PQstatus(admin) != CONNECTION_OK) {
        PQfinish(admin);
        return;
    }
    PQsetNoticeProcessor(admin, quiet_notices, NULL);
    snprintf(sql, sizeof(sql),
             "SELECT datname FROM pg_database WHERE datname LIKE 'obx\\_t\\_%d\\_%%' OR "
             "datname = '%s'",
             (int)st->runner_pid, st->template_db);
    res = PQexec(admin, sql);
    for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res) && i < 256; i++) {
        snprintf(names[count++], sizeof(names[0]), "%s", PQgetvalue(res, i, 0));
    }
    PQclear(res);
    drop_databases(admin, names, count);
    PQfinish(admin);
}

void
hx_dbs_cleanup(void)
{
    PGconn *admin;

    free(current_url);
    current_url = NULL;
    if (n_fresh == 0 || base_url() == NULL) {
        return;
    }
    /* Disk, not correctness: the run drops them all at the end anyway. */
    admin = hx_pg_connect_db(NULL);
    if (PQstatus(admin) == CONNECTION_OK) {
        PQsetNoticeProcessor(admin, quiet_notices, NULL);
        drop_databases(admin, fresh_dbs, n_fresh);
    }
    PQfinish(admin);
    n_fresh = 0;
}

/* ---- statements ------------------------------------------------------------------------ */

void
harness_exec(PGconn *conn, const char *sql)
{
    char err[2048];

    if (exec_internal(conn, sql, err, sizeof(err)) != 0) {
        cr_assert_fail("harness_exec failed: %s", err);
    }
}

/* The result of a query that must return exactly one row of one column. */
static PGresult *
one_value(PGconn *conn, const char *sql, const char *who)
{
    PGresult *res = PQexec(conn, sql);
    char err[2048];

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) == 1) {
        return res;
    }
    if (PQresultStatus(res) == PGRES_TUPLES_OK) {
        snprintf(err, sizeof(err), "returned %d rows of %d columns, not one value", PQntuples(res),
                 PQnfields(res));
    } else {
        snprintf(err, sizeof(err), "%s", res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
    }
    PQclear(res);
    cr_assert_fail("%s(`%s`): %s", who, sql, err);
    return NULL;
}

long long
harness_scalar_ll(PGconn *conn, const char *sql)
{
    PGresult *res = one_value(conn, sql, "harness_scalar_ll");
    char text[64];
    char *end = NULL;
    long long value;
    int is_null = PQgetisnull(res, 0, 0);

    snprintf(text, sizeof(text), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    cr_assert(!is_null, "harness_scalar_ll(`%s`): the value is NULL", sql);
    errno = 0;
    value = strtoll(text, &end, 10);
    cr_assert(errno == 0 && end != text && *end == '\0',
              "harness_scalar_ll(`%s`): \"%s\" is not an integer", sql, text);
    return value;
}

char *
harness_scalar_text(PGconn *conn, const char *sql)
{
    PGresult *res = one_value(conn, sql, "harness_scalar_text");
    char *text = PQgetisnull(res, 0, 0) ? NULL : strdup(PQgetvalue(res, 0, 0));
    int is_null = PQgetisnull(res, 0, 0);

    PQclear(res);
    cr_assert(is_null || text != NULL, "harness_scalar_text: out of memory");
    return text;
}

int
harness_pg_terminate_backends(const char *app_name_like)
{
    char names[MAX_FRESH * 66 + 3];
    size_t used = 0;
    const char *params[2] = {app_name_like, names};
    PGconn *admin;
    PGresult *res;
    char count[32];

    cr_assert(n_fresh > 0, "harness_pg_terminate_backends: this test has no fresh database");
    append(names, sizeof(names), &used, "{");
    for (int i = 0; i < n_fresh; i++) {
        append(names, sizeof(names), &used, "%s%s", i > 0 ? "," : "", fresh_dbs[i]);
    }
    append(names, sizeof(names), &used, "}");
    admin = harness_pg_connect_admin();
    /* Since PostgreSQL 14 the call can wait until the backend is gone, which tests want. */
    res = PQexecParams(admin,
                       PQserverVersion(admin) >= 140000
                           ? "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) "
                             "FROM pg_stat_activity WHERE application_name LIKE $1 "
                             "AND datname = ANY ($2::text[]) AND pid <> pg_backend_pid()"
                           : "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                             "FROM pg_stat_activity WHERE application_name LIKE $1 "
                             "AND datname = ANY ($2::text[]) AND pid <> pg_backend_pid()",
                       2, NULL, params, NULL, NULL, 0);
    snprintf(count, sizeof(count), "%s",
             PQresultStatus(res) == PGRES_TUPLES_OK ? PQgetvalue(res, 0, 0) : "");
    if (count[0] == '\0') {
        char err[1024];

        snprintf(err, sizeof(err), "%s", PQresultErrorMessage(res));
        PQclear(res);
        PQfinish(admin);
        cr_assert_fail("harness_pg_terminate_backends(%s): %s", app_name_like, err);
    }
    PQclear(res);
    PQfinish(admin);
    return (int)strtol(count, NULL, 10);
}
