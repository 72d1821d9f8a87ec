/* SPDX-License-Identifier: MIT */
/*
 * test_migrate.c - outbox_migrate() on real databases: many processes at
 * once (FAULTS T26), idempotence, its own transactions only, hostile
 * schema names refused before a byte is sent, two schemas in one database
 * that migrate without waiting for each other, and ordering: on for a new
 * schema, which appears whole or not at all, as it was for an upgrade.
 *
 * Concurrent migrators are forked children, each with its own connection,
 * released together through a pipe so their calls overlap. Children report
 * through a pipe and leave with _exit(): they must not run the worker's
 * exit handlers (which drop the test's databases) or Criterion's asserts.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "outbox/outbox.h"
#include "sql_gen.h"
#include "test_config.h"
#include "writer/writer_internal.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh_empty();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(migrate, .init = setup, .fini = teardown, .timeout = 240);

/* ---- helpers ------------------------------------------------------------------------- */

static void
migrate_ok(PGconn *c, const char *schema, int want_applied)
{
    outbox_error err;
    int applied = -1;

    cr_assert_eq(outbox_migrate(c, schema, &applied, &err), OUTBOX_OK, "migrate %s: %s %s",
                 schema ? schema : "(default)", outbox_status_name(err.code), err.message);
    cr_assert_eq(applied, want_applied, "migrate %s applied %d, expected %d",
                 schema ? schema : "(default)", applied, want_applied);
}

/* One query with `schema` as $1; returns its single value as a number. */
static long long
scalar_for_schema(PGconn *c, const char *sql, const char *schema)
{
    const char *params[] = {schema};
    PGresult *res = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
    long long value;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", sql, PQresultErrorMessage(res));
    cr_assert_eq(PQntuples(res), 1);
    value = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return value;
}

/* Every migration recorded exactly once, and every table and the SQL writer present. */
static void
expect_migrated(PGconn *c, const char *schema)
{
    char expected_versions[512] = "";
    char sql[512];
    char *versions;
    size_t used = 0;

    for (int i = 0; i < obx_migration_count; i++) {
        used += (size_t)snprintf(expected_versions + used, sizeof(expected_versions) - used, "%s%d",
                                 i ? "," : "", obx_migrations[i].version);
    }
    snprintf(sql, sizeof(sql),
             "SELECT string_agg(version::text, ',' ORDER BY version) "
             "FROM \"%s\".schema_migrations",
             schema);
    versions = harness_scalar_text(c, sql);
    cr_expect_str_eq(versions ? versions : "", expected_versions,
                     "%s.schema_migrations holds versions %s", schema, versions);
    free(versions);
    cr_expect_eq(scalar_for_schema(c,
                                   "SELECT count(*) FROM pg_class k JOIN pg_namespace n "
                                   "ON n.oid = k.relnamespace WHERE n.nspname = $1 "
                                   "AND k.relkind = 'r' AND k.relname IN ('events', "
                                   "'processed_events', 'dead_letters', 'schema_migrations')",
                                   schema),
                 4, "tables missing in %s", schema);
    cr_expect_eq(scalar_for_schema(c,
                                   "SELECT count(*) FROM pg_proc p JOIN pg_namespace n "
                                   "ON n.oid = p.pronamespace WHERE n.nspname = $1 "
                                   "AND p.proname = 'enqueue'",
                                   schema),
                 2, "outbox.enqueue() overloads missing in %s", schema);
}

static int
schema_exists(PGconn *c, const char *schema)
{
    return scalar_for_schema(c, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema) ==
           1;
}

/* All schema names of the database, comma-separated; malloc'd. */
static char *
schema_names(PGconn *c)
{
    return harness_scalar_text(c, "SELECT string_agg(nspname, ',' ORDER BY nspname) "
                                  "FROM pg_namespace");
}

/* libpq's wire trace, to prove that a refused call sent nothing. */
struct wire_trace {
    FILE *file;
    char *text;
    size_t len;
};

static void
trace_start(PGconn *c, struct wire_trace *t)
{
    memset(t, 0, sizeof(*t));
    t->file = open_memstream(&t->text, &t->len);
    cr_assert_not_null(t->file);
    PQtrace(c, t->file);
    PQsetTraceFlags(c, PQTRACE_SUPPRESS_TIMESTAMPS);
}

/* Stops tracing; returns 1 if the client sent no message at all. */
static int
trace_stop_silent(PGconn *c, struct wire_trace *t)
{
    int silent;

    PQuntrace(c);
    fclose(t->file);
    silent =
        t->text == NULL || (strncmp(t->text, "F\t", 2) != 0 && strstr(t->text, "\nF\t") == NULL);
    return silent;
}

/* ---- concurrent migrators ------------------------------------------------------------ */

/* What a child migrator reports; small enough for one atomic pipe write. */
struct migrator_report {
    int index;
    int connected;
    int status; /* outbox_status */
    int applied;
    char sqlstate[6];
    char message[512];
};

static void
write_all(int fd, const void *data, size_t len)
{
    const char *p = data;

    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return;
        }
        p += n;
        len -= (size_t)n;
    }
}

/* The child: connect, wait at the gate, migrate, report, leave without cleanup. */
static void
migrator_child(int index, const char *url, const char *schema, int gate_fd, int report_fd)
{
    struct migrator_report r;
    PGconn *c = PQconnectdb(url);
    outbox_error err;
    char go;

    memset(&r, 0, sizeof(r));
    r.index = index;
    r.connected = PQstatus(c) == CONNECTION_OK;
    /* Blocks until the parent closes the gate's write end: then all start together. */
    while (read(gate_fd, &go, 1) < 0 && errno == EINTR) {
    }
    if (r.connected) {
        r.status = (int)outbox_migrate(c, schema, &r.applied, &err);
        snprintf(r.sqlstate, sizeof(r.sqlstate), "%s", err.sqlstate);
        snprintf(r.message, sizeof(r.message), "%s", r.status == OUTBOX_OK ? "" : err.message);
    } else {
        snprintf(r.message, sizeof(r.message), "%s", PQerrorMessage(c));
    }
    write_all(report_fd, &r, sizeof(r));
    PQfinish(c);
    _exit(0);
}

/*
 * Runs `count` migrators at once against `url`, child i migrating
 * schemas[i]; fills reports[i]. Asserts each child reported and exited 0.
 */
static void
run_migrators(const char *url, const char *const *schemas, int count,
              struct migrator_report *reports)
{
    int gate[2], report[2];
    pid_t pids[16];
    int got = 0;

    cr_assert_leq(count, 16);
    cr_assert_eq(pipe(gate), 0);
    cr_assert_eq(pipe(report), 0);
    fflush(NULL);
    for (int i = 0; i < count; i++) {
        pids[i] = fork();
        cr_assert_neq(pids[i], -1, "fork: %s", strerror(errno));
        if (pids[i] == 0) {
            close(gate[1]);
            close(report[0]);
            migrator_child(i, url, schemas[i], gate[0], report[1]);
        }
    }
    close(gate[0]);
    close(report[1]);
    close(gate[1]); /* open the gate */
    memset(reports, 0, sizeof(*reports) * (size_t)count);
    for (;;) {
        struct migrator_report r;
        ssize_t n = read(report[0], &r, sizeof(r));

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n != (ssize_t)sizeof(r)) {
            break; /* every child has closed its end */
        }
        if (r.index >= 0 && r.index < count) {
            reports[r.index] = r;
            got++;
        }
    }
    close(report[0]);
    for (int i = 0; i < count; i++) {
        int wstatus = 0;

        while (waitpid(pids[i], &wstatus, 0) < 0 && errno == EINTR) {
        }
        cr_expect(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
                  "migrator %d died (wait status %d)", i, wstatus);
    }
    cr_assert_eq(got, count, "only %d of %d migrators reported", got, count);
}

/* Each report is a success with no SQLSTATE; returns the sum of `applied`. */
static int
expect_all_succeeded(const struct migrator_report *reports, int count, const char *round)
{
    int applied = 0;

    for (int i = 0; i < count; i++) {
        const struct migrator_report *r = &reports[i];

        cr_expect(r->connected, "%s: migrator %d could not connect: %s", round, i, r->message);
        cr_expect_eq(r->status, OUTBOX_OK, "%s: migrator %d: %s [%s] %s", round, i,
                     outbox_status_name((outbox_status)r->status), r->sqlstate, r->message);
        applied += r->applied;
    }
    return applied;
}

/* ---- tests --------------------------------------------------------------------------- */

Test(migrate, creates_every_table_on_an_empty_database_and_records_each_migration)
{
    cr_assert_eq(schema_exists(conn, "outbox"), 0, "the empty database has an outbox schema");
    migrate_ok(conn, NULL, obx_migration_count);
    expect_migrated(conn, "outbox");
    cr_expect_eq(PQtransactionStatus(conn), PQTRANS_IDLE, "migrate left a transaction open");
}

Test(migrate, a_second_run_applies_nothing_and_keeps_the_data)
{
    migrate_ok(conn, "outbox", obx_migration_count);
    harness_exec(conn, "SELECT outbox.enqueue('movie', gen_random_uuid(), 'review.logged', '{}')");
    migrate_ok(conn, "outbox", 0);
    migrate_ok(conn, NULL, 0);
    expect_migrated(conn, "outbox");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events"), 1);
}

Test(migrate, refuses_to_run_inside_a_transaction)
{
    struct wire_trace t;
    outbox_error err;
    int applied = -1;

    harness_exec(conn, "BEGIN");
    trace_start(conn, &t);
    cr_assert_eq(outbox_migrate(conn, "outbox", &applied, &err), OUTBOX_EINVAL, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    cr_expect(trace_stop_silent(conn, &t), "migrate sent messages:\n%s", t.text);
    cr_expect(strstr(err.message, "inside a transaction") != NULL, "%s", err.message);
    cr_expect_eq(applied, -1, "applied written on failure");
    cr_expect_eq(PQtransactionStatus(conn), PQTRANS_INTRANS, "migrate ended the transaction");
    harness_exec(conn, "COMMIT");
    cr_expect_eq(schema_exists(conn, "outbox"), 0);
    free(t.text);

    /* Nor inside a failed one. */
    harness_exec(conn, "BEGIN");
    PQclear(PQexec(conn, "SELECT 1 / 0"));
    cr_expect_eq(outbox_migrate(conn, "outbox", NULL, &err), OUTBOX_EINVAL, "got %s: %s",
                 outbox_status_name(err.code), err.message);
    harness_exec(conn, "ROLLBACK");
    cr_expect_eq(schema_exists(conn, "outbox"), 0);
}

Test(migrate, eight_processes_migrating_an_empty_database_at_once_all_succeed)
{
    enum { ROUNDS = 20, MIGRATORS = 8 };
    const char *schemas[MIGRATORS];

    for (int i = 0; i < MIGRATORS; i++) {
        schemas[i] = "outbox";
    }
    for (int round = 0; round < ROUNDS; round++) {
        struct migrator_report reports[MIGRATORS];
        PGconn *db = round == 0 ? conn : harness_pg_connect_fresh_empty();
        char *url = strdup(harness_db_url());
        char name[32];
        int applied;

        snprintf(name, sizeof(name), "round %d", round + 1);
        run_migrators(url, schemas, MIGRATORS, reports);
        applied = expect_all_succeeded(reports, MIGRATORS, name);
        /* Each migration was applied by exactly one of them. */
        cr_expect_eq(applied, obx_migration_count, "%s: %d migrations applied in total", name,
                     applied);
        expect_migrated(db, "outbox");
        free(url);
        if (db != conn) {
            PQfinish(db);
        }
    }
}

Test(migrate, hostile_schema_names_are_refused_before_anything_is_sent)
{
    char too_long[80];
    const char *hostile[] = {
        "x\"; DROP TABLE outbox.events; --",
        "web\".session WHERE $1=$1;--",
        "Outbox",
        "OUTBOX",
        too_long,
        "",
        "outbox.events",
        "out box",
        "pg_temp",
    };
    char *before, *after;
    outbox_config *cfg = outbox_config_new(OUTBOX_CONFIG_WRITER);
    char kept[64];

    memset(too_long, 'a', 64);
    too_long[64] = '\0';
    migrate_ok(conn, "outbox", obx_migration_count);
    harness_exec(conn, "SELECT outbox.enqueue('movie', gen_random_uuid(), 'review.logged', '{}')");
    before = schema_names(conn);

    for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
        struct wire_trace t;
        outbox_error err;
        int applied = -1;

        trace_start(conn, &t);
        cr_expect_eq(outbox_migrate(conn, hostile[i], &applied, &err), OUTBOX_EINVAL,
                     "schema \"%s\": got %s: %s", hostile[i], outbox_status_name(err.code),
                     err.message);
        cr_expect(trace_stop_silent(conn, &t), "schema \"%s\": migrate sent:\n%s", hostile[i],
                  t.text);
        cr_expect(strncmp(err.message, "schema ", 7) == 0, "schema \"%s\": %s", hostile[i],
                  err.message);
        cr_expect_eq(applied, -1);
        free(t.text);

        /* A writer cannot even be configured with it. */
        cr_expect_eq(outbox_config_set(cfg, "schema", hostile[i], &err), OUTBOX_EINVAL,
                     "schema \"%s\": a writer configuration took it", hostile[i]);
        cr_expect(strncmp(err.message, "schema ", 7) == 0, "schema \"%s\": %s", hostile[i],
                  err.message);
        outbox_config_get(cfg, "schema", kept, sizeof(kept), NULL);
        cr_expect_str_eq(kept, "outbox", "schema \"%s\" changed the configuration", hostile[i]);
    }
    outbox_config_free(cfg);

    /* The existing outbox is intact, and no schema appeared. */
    after = schema_names(conn);
    cr_expect_str_eq(after, before, "schemas changed");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events"), 1);
    expect_migrated(conn, "outbox");
    free(before);
    free(after);

    /* The longest valid name (63 bytes, PostgreSQL's limit) is not cut short. */
    too_long[63] = '\0';
    migrate_ok(conn, too_long, obx_migration_count);
    expect_migrated(conn, too_long);
}

Test(migrate, two_schemas_migrate_at_once_without_touching_each_other)
{
    enum { MIGRATORS = 8 };
    const char *schemas[MIGRATORS];
    struct migrator_report reports[MIGRATORS];
    char *url = strdup(harness_db_url());
    outbox_writer *alpha = NULL;
    outbox_event *ev = outbox_event_new();
    outbox_error err;

    for (int i = 0; i < MIGRATORS; i++) {
        schemas[i] = i % 2 ? "beta_outbox" : "alpha_outbox";
    }
    run_migrators(url, schemas, MIGRATORS, reports);
    cr_expect_eq(expect_all_succeeded(reports, MIGRATORS, "alpha and beta"),
                 2 * obx_migration_count);
    expect_migrated(conn, "alpha_outbox");
    expect_migrated(conn, "beta_outbox");
    cr_expect_eq(schema_exists(conn, "outbox"), 0, "the default schema was created too");

    /* An event written through one schema's writer stays in that schema. */
    alpha = test_writer("alpha_outbox", 0);
    cr_assert_eq(outbox_event_set_route(ev, "movie", "review.logged", &err), OUTBOX_OK);
    cr_assert_eq(outbox_event_set_aggregate_id(ev, "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b", &err),
                 OUTBOX_OK);
    cr_assert_eq(outbox_event_set_payload_json(ev, "{}", 2, &err), OUTBOX_OK);
    harness_exec(conn, "BEGIN");
    cr_assert_eq(outbox_writer_enqueue(alpha, conn, ev, &err), OUTBOX_OK, "%s", err.message);
    harness_exec(conn, "COMMIT");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM alpha_outbox.events"), 1);
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM beta_outbox.events"), 0);
    outbox_event_free(ev);
    outbox_writer_free(alpha);
    free(url);
}

/* 1 when a backend of this database is waiting for a lock. */
static int
someone_waits_for_a_lock(PGconn *c)
{
    return harness_scalar_ll(c,
                             "SELECT count(*) FROM pg_stat_activity "
                             "WHERE datname = current_database() AND wait_event_type = 'Lock'") > 0;
}

Test(migrate, a_stuck_migration_of_one_schema_does_not_hold_up_another)
{
    PGconn *locker = PQconnectdb(harness_db_url());
    struct migrator_report report;
    char *url = strdup(harness_db_url());
    pid_t pid;
    int gate[2], report_pipe[2];
    int wstatus = 0;

    cr_assert_eq(PQstatus(locker), CONNECTION_OK, "%s", PQerrorMessage(locker));
    migrate_ok(conn, "alpha_outbox", obx_migration_count);

    /* Hold alpha's version table so that an alpha migrator gets stuck reading it. */
    harness_exec(locker, "BEGIN");
    harness_exec(locker, "LOCK TABLE alpha_outbox.schema_migrations IN ACCESS EXCLUSIVE MODE");
    cr_assert_eq(pipe(gate), 0);
    cr_assert_eq(pipe(report_pipe), 0);
    fflush(NULL);
    pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(gate[1]);
        close(report_pipe[0]);
        migrator_child(0, url, "alpha_outbox", gate[0], report_pipe[1]);
    }
    close(gate[0]);
    close(report_pipe[1]);
    close(gate[1]);
    HARNESS_WAIT_UNTIL(someone_waits_for_a_lock(conn), 20000);

    /* Beta must not queue behind it: bound the wait, so a shared lock fails, not hangs. */
    harness_exec(conn, "SET statement_timeout = '15s'");
    migrate_ok(conn, "beta_outbox", obx_migration_count);
    harness_exec(conn, "RESET statement_timeout");
    expect_migrated(conn, "beta_outbox");

    /* Released, alpha's migrator finishes and has nothing to apply. */
    harness_exec(locker, "COMMIT");
    cr_assert_eq(read(report_pipe[0], &report, sizeof(report)), (ssize_t)sizeof(report));
    cr_expect_eq(report.status, OUTBOX_OK, "%s", report.message);
    cr_expect_eq(report.applied, 0);
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    close(report_pipe[0]);
    PQfinish(locker);
    free(url);
}

static void
count_notice(void *arg, const PGresult *res)
{
    (void)res;
    (*(int *)arg)++;
}

/*
 * The library never prints: a re-run's "already exists, skipping" notices
 * would reach the caller's notice processor, and libpq's default one
 * writes them to stderr. Its settings end with its own transactions.
 */
Test(migrate, sends_no_notices_and_leaves_the_session_settings_alone)
{
    int notices = 0;
    char *level, *timeout;

    PQsetNoticeReceiver(conn, count_notice, &notices);
    migrate_ok(conn, "outbox", obx_migration_count);
    migrate_ok(conn, "outbox", 0);
    migrate_ok(conn, "second_outbox", obx_migration_count);
    cr_expect_eq(notices, 0, "%d notices reached the caller", notices);

    /* Notices of the caller's own still arrive. */
    harness_exec(conn, "CREATE SCHEMA IF NOT EXISTS outbox");
    cr_expect_eq(notices, 1, "the caller's notice was lost");
    level = harness_scalar_text(conn, "SHOW client_min_messages");
    timeout = harness_scalar_text(conn, "SHOW lock_timeout");
    cr_expect_str_eq(level, "notice");
    cr_expect_str_eq(timeout, "0");
    free(level);
    free(timeout);
}

/* ---- ordering's default ---------------------------------------------------------------- */

static int
ordering_on(PGconn *c, const char *schema)
{
    char sql[128];

    snprintf(sql, sizeof(sql), "SELECT \"%s\".ordering_on()::int", schema);
    return (int)harness_scalar_ll(c, sql);
}

/* Brings `schema` to `version` only, as an older release left it. */
static void
migrate_through(PGconn *c, const char *schema, int version)
{
    outbox_error err;
    int applied = -1, want = 0;

    for (int i = 0; i < obx_migration_count && obx_migrations[i].version <= version; i++) {
        want++;
    }
    cr_assert_eq(obx_migrate_through(c, schema, version, &applied, &err), OUTBOX_OK,
                 "migrate %s through %d: %s", schema, version, err.message);
    cr_assert_eq(applied, want, "migrate %s through %d applied %d", schema, version, applied);
}

Test(migrate, a_new_schema_starts_ordered)
{
    migrate_ok(conn, "outbox", obx_migration_count);
    cr_expect_eq(ordering_on(conn, "outbox"), 1, "a new schema is unordered");
    harness_exec(conn, "SELECT outbox.enqueue('order', '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b',"
                       " 'created', '{}')");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT aggregate_seq FROM outbox.events"), 1);

    /* A later run is an upgrade with nothing to do: the operator's choice stays. */
    harness_exec(conn, "SELECT outbox.set_ordering(false)");
    migrate_ok(conn, "outbox", 0);
    cr_expect_eq(ordering_on(conn, "outbox"), 0, "a re-run switched ordering back on");
}

Test(migrate, an_upgrade_keeps_the_ordering_it_had)
{
    /* From a release before ordering existed: it stays unordered. */
    migrate_through(conn, "before_ordering", OBX_ORDERING_FIRST_VERSION - 1);
    migrate_ok(conn, "before_ordering", obx_migration_count - (OBX_ORDERING_FIRST_VERSION - 1));
    cr_expect_eq(ordering_on(conn, "before_ordering"), 0, "an upgrade switched ordering on");

    /* From the release before this one, switched off by its operator: off. */
    migrate_through(conn, "switched_off", obx_migrations[obx_migration_count - 2].version);
    harness_exec(conn, "SELECT switched_off.set_ordering(false)");
    migrate_ok(conn, "switched_off", 1);
    cr_expect_eq(ordering_on(conn, "switched_off"), 0, "an upgrade switched ordering on");

    /* And one that was on stays on. */
    migrate_through(conn, "switched_on", obx_migrations[obx_migration_count - 2].version);
    cr_expect_eq(ordering_on(conn, "switched_on"), 1);
    migrate_ok(conn, "switched_on", 1);
    cr_expect_eq(ordering_on(conn, "switched_on"), 1, "an upgrade switched ordering off");
}

/*
 * A new schema is one transaction: a migration that fails half-way leaves
 * no table and no version behind, so the next run makes it new, ordered,
 * rather than finishing an unordered upgrade.
 */
Test(migrate, a_new_schema_that_fails_half_way_leaves_nothing)
{
    outbox_error err;
    int applied = -1;

    /* Something in the way of migration 0014's table. */
    harness_exec(conn, "CREATE SCHEMA blocked_outbox;"
                       " CREATE TABLE blocked_outbox.aggregate_heads (x int)");
    cr_assert_neq(outbox_migrate(conn, "blocked_outbox", &applied, &err), OUTBOX_OK);
    cr_expect(strstr(err.message, "0014") != NULL, "the failure does not name 0014: %s",
              err.message);
    cr_expect_eq(applied, -1);
    cr_expect_eq(scalar_for_schema(conn,
                                   "SELECT count(*) FROM pg_class k JOIN pg_namespace n "
                                   "ON n.oid = k.relnamespace WHERE n.nspname = $1 "
                                   "AND k.relname IN ('events', 'schema_migrations')",
                                   "blocked_outbox"),
                 0, "the failed migration left tables behind");
    cr_expect_eq(PQtransactionStatus(conn), PQTRANS_IDLE);

    harness_exec(conn, "DROP TABLE blocked_outbox.aggregate_heads");
    migrate_ok(conn, "blocked_outbox", obx_migration_count);
    expect_migrated(conn, "blocked_outbox");
    cr_expect_eq(ordering_on(conn, "blocked_outbox"), 1);
}
