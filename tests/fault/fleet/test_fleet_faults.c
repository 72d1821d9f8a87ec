/* SPDX-License-Identifier: MIT */
/*
 * test_fleet_faults.c - one fleet relay deployment (two replicas) serving
 * five databases, each migrated into its own schema with its own stream
 * and subject prefix. While events are written, one database has its
 * outbox table locked (LOCK TABLE in a held transaction), one is taken
 * down (connections refused, every backend terminated), and the replica
 * owning a third is SIGKILLed. Asserted: the untouched databases' events
 * keep reaching their streams during each fault; every database is owned
 * by at most one replica at every sample (its ownership lock) and by
 * exactly one once things settle; afterwards every committed id is in its
 * stream exactly once and nothing else is; /metrics and the logs name
 * each database. Also: a bad fleet file is refused naming file, line,
 * field and value; SIGHUP adds and removes databases without a restart.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "harness.h"
#include "http_get.h"
#include "id_set.h"
#include "outbox/outbox.h"
#include "relay_check.h"
#include "relay_test.h"
#include "stream_reader_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { DBS = 5, REPLICAS = 2 };

struct fleet_db {
    PGconn *conn;
    char *url;
    char name[16];    /* in the fleet file: db0..db4 */
    char datname[64]; /* PostgreSQL's */
    char schema[32];
    char stream[48];
    char prefix[48];
};

static struct fleet_db dbs[DBS];
static PGconn *admin;
static char fleet_path[256];

static void
make_db(struct fleet_db *d, int i)
{
    outbox_error err = {0};
    char sql[256];

    d->conn = harness_pg_connect_fresh_empty();
    d->url = strdup(harness_db_url());
    snprintf(d->name, sizeof(d->name), "db%d", i);
    snprintf(d->datname, sizeof(d->datname), "%s", PQdb(d->conn));
    snprintf(d->schema, sizeof(d->schema), "fleet_s%d", i);
    snprintf(d->stream, sizeof(d->stream), "FLEET%d_%d", (int)getpid(), i);
    snprintf(d->prefix, sizeof(d->prefix), "fleet%d.d%d", (int)getpid(), i);
    cr_assert_eq(outbox_migrate(d->conn, d->schema, NULL, &err), OUTBOX_OK, "migrate %s: %s",
                 d->schema, err.message);
    harness_exec(d->conn, "CREATE TABLE committed (id uuid PRIMARY KEY)");
    snprintf(sql, sizeof(sql), "SET search_path = %s, public", d->schema);
    harness_exec(d->conn, sql);
}

/* Writes the fleet file with databases [from, to). */
static void
write_fleet_file(int from, int to)
{
    FILE *f = fopen(fleet_path, "w");

    cr_assert_not_null(f);
    fprintf(f, "# the test's fleet\n\n");
    for (int i = from; i < to; i++) {
        fprintf(f, "%s %s schema=%s stream=%s subject_prefix=%s  # database %d\n", dbs[i].name,
                dbs[i].url, dbs[i].schema, dbs[i].stream, dbs[i].prefix, i);
    }
    fclose(f);
}

static void
setup(void)
{
    admin = harness_pg_connect_admin();
    for (int i = 0; i < DBS; i++) {
        make_db(&dbs[i], i);
    }
    snprintf(fleet_path, sizeof(fleet_path), "/tmp/obx-fleet-%d.conf", (int)getpid());
}

static void
teardown(void)
{
    for (int i = 0; i < DBS; i++) {
        if (dbs[i].conn != NULL) {
            PQfinish(dbs[i].conn);
        }
        free(dbs[i].url);
    }
    PQfinish(admin);
    unlink(fleet_path);
}

TestSuite(fleet, .init = setup, .fini = teardown, .timeout = 180);

/* The test's own connection to database `i`, made again after an outage; 0 if it cannot. */
static int
ensure_conn(int i)
{
    char sql[128];
    PGresult *res = PQexec(dbs[i].conn, "SELECT 1");
    int ok = PQresultStatus(res) == PGRES_TUPLES_OK;

    PQclear(res);
    if (ok) {
        return 1;
    }
    PQreset(dbs[i].conn);
    if (PQstatus(dbs[i].conn) != CONNECTION_OK) {
        return 0;
    }
    snprintf(sql, sizeof(sql), "SET search_path = %s, public", dbs[i].schema);
    PQclear(PQexec(dbs[i].conn, sql));
    return 1;
}

/* Commits `n` events into database `i` and records their ids; 0 if the database refused. */
static int
enqueue(int i, int n)
{
    char sql[512];
    PGresult *res;
    int ok, len;

    if (!ensure_conn(i)) {
        return 0;
    }
    len = snprintf(sql, sizeof(sql),
                   "WITH e AS (INSERT INTO committed SELECT %s.enqueue('movie', gen_random_uuid(), "
                   "'review.logged', jsonb_build_object('n', g)) FROM generate_series(1, %d) AS g "
                   "RETURNING 1) SELECT count(*) FROM e",
                   dbs[i].schema, n);
    /* gcc -O2 cannot bound the schema's length through dbs[i]: a checked length, not a guess. */
    cr_assert(len > 0 && (size_t)len < sizeof(sql), "enqueue statement of %d bytes", len);
    res = PQexec(dbs[i].conn, sql);
    ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    PQclear(res);
    return ok;
}

/* Rows of database `i` not yet published (pending or leased); -1 if it cannot be asked. */
static long long
unfinished(int i)
{
    char sql[256];
    PGresult *res;
    long long n = -1;

    if (!ensure_conn(i)) {
        return -1;
    }
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM %s.events WHERE status IN ('pending', 'leased')", dbs[i].schema);
    res = PQexec(dbs[i].conn, sql);
    if (PQresultStatus(res) == PGRES_TUPLES_OK) {
        n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    }
    PQclear(res);
    return n;
}

/* Holders of database `i`'s ownership lock, by the admin connection (pg_locks is global). */
static long long
owners(int i)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
             "WHERE l.locktype = 'advisory' AND l.granted AND d.datname = '%s' "
             "AND l.classid = hashtext('pgoutbox.fleet')::oid",
             dbs[i].datname);
    return harness_scalar_ll(admin, sql);
}

/* The replica ("A" or "B") holding database `i`'s lock, malloc'd; NULL if none. */
static char *
owner_name(int i)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "SELECT coalesce(max(split_part(a.application_name, '.', 1)), '') FROM pg_locks l "
             "JOIN pg_database d ON d.oid = l.database JOIN pg_stat_activity a ON a.pid = l.pid "
             "WHERE l.locktype = 'advisory' AND l.granted AND d.datname = '%s' "
             "AND l.classid = hashtext('pgoutbox.fleet')::oid",
             dbs[i].datname);
    return harness_scalar_text(admin, sql);
}

/* Every database's lock: at most one holder, always. */
static void
assert_single_owners(void)
{
    for (int i = 0; i < DBS; i++) {
        long long n = owners(i);

        cr_assert_leq(n, 1, "%s is owned by %lld replicas at once", dbs[i].name, n);
    }
}

static int
all_owned(void)
{
    for (int i = 0; i < DBS; i++) {
        if (owners(i) != 1) {
            return 0;
        }
    }
    return 1;
}

/*
 * Writes a round of events into every database in `write` and waits until
 * those in `flowing` have published everything, checking ownership all
 * along. Fails if they do not within `timeout_ms`: a fault elsewhere held
 * them up.
 */
static void
write_and_expect_flow(const int *write, const int *flowing, int rounds, int timeout_ms)
{
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < DBS; i++) {
            if (write[i]) {
                enqueue(i, 20);
            }
        }
        assert_single_owners();
        harness_sleep_ms(100);
    }
    for (int i = 0; i < DBS; i++) {
        long long deadline = harness_now_ms() + timeout_ms;

        while (flowing[i] && unfinished(i) != 0) {
            cr_assert(harness_now_ms() < deadline,
                      "%s's events stopped flowing during a fault elsewhere (%lld unfinished)",
                      dbs[i].name, unfinished(i));
            assert_single_owners();
            harness_sleep_ms(50);
        }
    }
}

static void
check_stream(int i)
{
    char msg[256], sql[128];
    struct id_set stream, committed;
    PGresult *res;
    size_t lost = 0, phantom = 0, dups;
    char example[ID_TEXT_CAP] = "";

    id_set_init(&stream);
    id_set_init(&committed);
    cr_assert_eq(stream_read_ids(harness_nats_url(), dbs[i].stream, &stream, msg, sizeof(msg)), 0,
                 "read %s: %s", dbs[i].stream, msg);
    cr_assert(ensure_conn(i));
    snprintf(sql, sizeof(sql), "SELECT id::text FROM committed");
    res = PQexec(dbs[i].conn, sql);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK);
    for (int r = 0; r < PQntuples(res); r++) {
        id_set_add(&committed, PQgetvalue(res, r, 0));
    }
    PQclear(res);
    id_set_sort(&stream);
    id_set_sort(&committed);
    for (size_t k = 0; k < committed.count; k++) {
        lost += !id_set_has(&stream, committed.ids[k]);
    }
    for (size_t k = 0; k < stream.count; k++) {
        phantom += !id_set_has(&committed, stream.ids[k]);
    }
    dups = id_set_dups(&stream, example);
    cr_log_info("%s: committed %zu, in stream %zu", dbs[i].name, committed.count, stream.count);
    cr_assert_gt(committed.count, 0);
    cr_assert_eq(lost, 0, "%s lost %zu of %zu events", dbs[i].name, lost, committed.count);
    cr_assert_eq(phantom, 0, "%s: %zu ids in the stream were never committed", dbs[i].name,
                 phantom);
    cr_assert_eq(dups, 0, "%s: %zu ids twice in the stream (e.g. %s)", dbs[i].name, dups, example);
    id_set_fini(&stream);
    id_set_fini(&committed);
}

/* Sessions of database `i` whose application_name is `app`. */
static long long
sessions(int i, const char *app)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' AND application_name "
             "LIKE '%s'",
             dbs[i].datname, app);
    return harness_scalar_ll(admin, sql);
}

/* `outbox_fleet_database_owned{database=...}` on replica `port`; -1 if not served. */
static double
owned_metric(int port, int i)
{
    char *body = NULL, series[128];
    double v = -1;

    snprintf(series, sizeof(series), "outbox_fleet_database_owned{database=\"%s\"}", dbs[i].name);
    if (http_get(port, "/metrics", &body) == 200) {
        v = http_metric(body, series);
    }
    free(body);
    return v;
}

/*
 * Once settled, each database has one owner by every account: one lock
 * holder, one replica saying it owns it, one relay session and one for
 * its upkeep; the other replica holds nothing there.
 */
static void
assert_settled_ownership(const int *ports, int replicas)
{
    for (int i = 0; i < DBS; i++) {
        double sum = 0;

        HARNESS_WAIT_UNTIL(owners(i) == 1 && sessions(i, "outboxd-relay") == 1 &&
                               sessions(i, "outboxd-relay-upkeep") == 1 &&
                               sessions(i, "%fleet-lock") == 1,
                           10000);
        for (int r = 0; r < replicas; r++) {
            sum += owned_metric(ports[r], i);
        }
        cr_assert_eq(sum, 1, "%s: the replicas' owned gauges add up to %g", dbs[i].name, sum);
    }
}

/* A fleet replica named `name` with /metrics on `port`; `window`, if > 0, is its
 * OUTBOX_MAX_IN_FLIGHT and OUTBOX_BATCH_SIZE both. */
static void
start_replica_windowed(struct harness_proc *p, const char *name, int port, int window)
{
    struct relay_env env;
    char addr[64], n[16];

    /* The base URL is only a default; every database comes from the file. */
    relay_test_env(&env, "FLEETBASE", "fleetbase");
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    relay_env_set(&env, "OUTBOX_FLEET_FILE", fleet_path);
    relay_env_set(&env, "OUTBOX_FLEET_TRY_MS", "300");
    relay_env_set(&env, "OUTBOX_HTTP_ADDR", addr);
    relay_env_set(&env, "OUTBOX_LOG_LEVEL", "info");
    if (window > 0) {
        snprintf(n, sizeof(n), "%d", window);
        relay_env_set(&env, "OUTBOX_MAX_IN_FLIGHT", n);
        relay_env_set(&env, "OUTBOX_BATCH_SIZE", n);
    }
    relay_test_start(p, &env, name);
    relay_env_fini(&env);
}

static void
start_replica(struct harness_proc *p, const char *name, int port)
{
    start_replica_windowed(p, name, port, 0);
}

/*
 * One round: database `locked` gets its outbox table locked and `down` is
 * taken down; once `down` is back, the replica owning `victim` is
 * SIGKILLed while the lock still holds. The others must keep flowing
 * throughout. Returns the index of the replica that survived.
 */
static int
fault_round(struct harness_proc *replica, const char *const *names, const int *ports, int victim,
            int locked, int down)
{
    int all[DBS] = {1, 1, 1, 1, 1}, flowing[DBS];
    PGconn *locker;
    char sql[512], *killed_name;
    int killed, survivor;

    for (int i = 0; i < DBS; i++) {
        flowing[i] = i != locked && i != down;
    }
    cr_log_info("round: %s locked, %s down and back, the owner of %s killed", dbs[locked].name,
                dbs[down].name, dbs[victim].name);

    /* Its outbox table locked by a transaction that stays open. */
    enqueue(locked, 50); /* some of these may still be pending when the lock lands */
    locker = PQconnectdb(dbs[locked].url);
    cr_assert_eq(PQstatus(locker), CONNECTION_OK);
    snprintf(sql, sizeof(sql), "BEGIN; LOCK TABLE %s.events IN EXCLUSIVE MODE", dbs[locked].schema);
    harness_exec(locker, sql); /* its relay now blocks in its lease; writes there would too */

    /* Down: new connections refused, every backend (the relay's, the lock's) ended. */
    snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" ALLOW_CONNECTIONS false", dbs[down].datname);
    harness_exec(admin, sql);
    snprintf(sql, sizeof(sql),
             "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '%s'",
             dbs[down].datname);
    harness_scalar_ll(admin, sql);
    write_and_expect_flow(flowing, flowing, 10, 10000);

    /* Back up: it has one owner again, and the replica that lost it holds nothing there
     * (an owner that missed losing its lock would still run a relay beside the new one). */
    snprintf(sql, sizeof(sql), "ALTER DATABASE \"%s\" ALLOW_CONNECTIONS true", dbs[down].datname);
    harness_exec(admin, sql);
    flowing[down] = 1;
    write_and_expect_flow(flowing, flowing, 5, 20000);
    assert_settled_ownership(ports, REPLICAS);

    /* The replica owning `victim` SIGKILLed while the table lock holds. */
    killed_name = owner_name(victim);
    cr_assert(killed_name != NULL && killed_name[0] != '\0', "%s has no owner", dbs[victim].name);
    killed = strcmp(killed_name, names[0]) == 0 ? 0 : 1;
    survivor = 1 - killed;
    free(killed_name);
    harness_proc_kill(&replica[killed]);
    write_and_expect_flow(flowing, flowing, 10, 15000);

    /* Unlocked: everything drains through the survivor. */
    harness_exec(locker, "COMMIT");
    PQfinish(locker);
    write_and_expect_flow(all, all, 5, 30000);
    HARNESS_WAIT_UNTIL(all_owned(), 20000);
    assert_settled_ownership(ports + survivor, 1);
    for (int i = 0; i < DBS; i++) {
        char *who = owner_name(i);

        cr_assert_str_eq(who, names[survivor], "%s is owned by \"%s\", not the survivor",
                         dbs[i].name, who);
        free(who);
    }
    return survivor;
}

/* CI: one round, about 10 s. Soak (OUTBOX_TEST_SOAK=1): ten, each fault on other databases. */
Test(fleet, faults_in_one_database_never_hold_up_the_others_and_nothing_is_lost)
{
    struct harness_proc replica[REPLICAS] = {0};
    const char *const names[REPLICAS] = {"A", "B"};
    int ports[REPLICAS] = {http_free_port(), http_free_port()};
    int all[DBS] = {1, 1, 1, 1, 1}, rounds = chaos_soak() ? 10 : 1, survivor = 0;
    char *log, *body = NULL;

    write_fleet_file(0, DBS);
    for (int r = 0; r < REPLICAS; r++) {
        start_replica(&replica[r], names[r], ports[r]);
    }
    HARNESS_WAIT_UNTIL(all_owned(), 30000);
    write_and_expect_flow(all, all, 5, 20000);
    assert_settled_ownership(ports, REPLICAS);

    for (int round = 0; round < rounds; round++) {
        survivor =
            fault_round(replica, names, ports, round % DBS, (round + 1) % DBS, (round + 2) % DBS);
        if (round + 1 < rounds) { /* the killed one back, to be a survivor next time */
            start_replica(&replica[1 - survivor], names[1 - survivor], ports[1 - survivor]);
            HARNESS_WAIT_UNTIL(harness_proc_log_contains(&replica[1 - survivor], "fleet members"),
                               20000);
            assert_settled_ownership(ports, REPLICAS);
        }
    }

    /* The survivor's /metrics label every database; its logs name them too. */
    cr_assert_eq(http_get(ports[survivor], "/metrics", &body), 200);
    for (int i = 0; i < DBS; i++) {
        char series[128];

        snprintf(series, sizeof(series), "outbox_fleet_database_owned{database=\"%s\"}",
                 dbs[i].name);
        cr_assert_eq(http_metric(body, series), 1, "%s missing from:\n%s", series, body);
        snprintf(series, sizeof(series), "outbox_relay_published_total{database=\"%s\"}",
                 dbs[i].name);
        cr_assert_geq(http_metric(body, series), 0, "%s missing", series);
        snprintf(series, sizeof(series), "outbox_database_up{database=\"%s\"}", dbs[i].name);
        cr_assert_eq(http_metric(body, series), 1, "%s not 1", series);
    }
    cr_assert_eq(http_metric(body, "outbox_fleet_databases_owned"), DBS);
    free(body);
    log = harness_proc_log(&replica[survivor]);
    cr_assert(strstr(log, "database=db2") != NULL, "no log line names db2");
    free(log);

    relay_test_stop(&replica[survivor], 20000); /* the other was killed in the last round */
    for (int i = 0; i < DBS; i++) {
        check_stream(i);
    }
}

Test(fleet, a_bad_fleet_file_is_refused_naming_the_file_line_field_and_value)
{
    struct harness_proc p = {0};
    struct relay_env env;
    FILE *f = fopen(fleet_path, "w");
    char *log;

    cr_assert_not_null(f);
    fprintf(f, "# ok so far\ndb0 %s schema=fleet_s0\ndb1 %s strem=X\n", dbs[0].url, dbs[1].url);
    fclose(f);
    relay_test_env(&env, "FLEETBAD", "fleetbad");
    relay_env_set(&env, "OUTBOX_FLEET_FILE", fleet_path);
    relay_test_start(&p, &env, "bad");
    relay_env_fini(&env);
    cr_assert_eq(harness_proc_wait(&p, 20000), 2);
    log = harness_proc_log(&p);
    cr_assert(strstr(log, fleet_path) && strstr(log, "line 3") && strstr(log, "strem") &&
                  strstr(log, "\"X\""),
              "the message does not name file, line, field and value:\n%s", log);
    cr_assert(strstr(log, RELAY_TEST_SECRET) == NULL, "a URL was printed:\n%s", log);
    free(log);

    f = fopen(fleet_path, "w");
    cr_assert_not_null(f);
    fprintf(f, "db0 %s schema=Bad-Schema\n", dbs[0].url);
    fclose(f);
    relay_test_env(&env, "FLEETBAD", "fleetbad");
    relay_env_set(&env, "OUTBOX_FLEET_FILE", fleet_path);
    relay_test_start(&p, &env, "bad2");
    relay_env_fini(&env);
    cr_assert_eq(harness_proc_wait(&p, 20000), 2);
    log = harness_proc_log(&p);
    cr_assert(strstr(log, "line 1") && strstr(log, "field schema") && strstr(log, "Bad-Schema"),
              "the message does not name line, field and value:\n%s", log);
    free(log);
}

static int
no_connections(void *sql)
{
    return harness_scalar_ll(admin, sql) == 0;
}

Test(fleet, sighup_adds_and_removes_databases_without_a_restart)
{
    struct harness_proc p = {0};
    int port = http_free_port();
    char *body = NULL;
    int two[DBS] = {1, 1, 0, 0, 0}, three[DBS] = {0, 1, 1, 0, 0};

    write_fleet_file(0, 2);
    start_replica(&p, "H", port);
    HARNESS_WAIT_UNTIL(owners(0) == 1 && owners(1) == 1, 30000);
    write_and_expect_flow(two, two, 3, 20000);
    cr_assert_eq(owners(2), 0);

    write_fleet_file(1, 3); /* db0 leaves, db2 joins */
    harness_proc_signal(&p, SIGHUP);
    HARNESS_WAIT_UNTIL(owners(2) == 1 && owners(0) == 0, 20000);
    write_and_expect_flow(three, three, 3, 20000);
    relay_test_assert_running(&p, "the fleet relay after SIGHUP");
    cr_assert_eq(http_get(port, "/metrics", &body), 200);
    cr_assert_eq(http_metric(body, "outbox_fleet_databases"), 2);
    cr_assert(strstr(body, "database=\"db0\"") == NULL, "db0 still reported:\n%s", body);
    free(body);
    /* A database it no longer serves holds none of its connections. */
    {
        char sql[256];

        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM pg_stat_activity WHERE datname = '%s' AND pid <> "
                 "pg_backend_pid() AND application_name NOT LIKE 'obx-harness%%'",
                 dbs[0].datname);
        if (!harness_wait_until(no_connections, sql, 10000)) {
            char list[512];
            char *who;

            snprintf(list, sizeof(list),
                     "SELECT string_agg(application_name, ',') FROM pg_stat_activity WHERE "
                     "datname = '%s' AND pid <> pg_backend_pid()",
                     dbs[0].datname);
            who = harness_scalar_text(admin, list);
            cr_assert_fail("connections to db0 after it left the file: %s", who);
            free(who);
        }
    }
    relay_test_stop(&p, 20000);
    cr_assert(harness_proc_log_contains(&p, "batch_size=100") &&
                  !harness_proc_log_contains(&p, "batch_size=500"),
              "OUTBOX_BATCH_SIZE unset: a fleet relay claims 100 rows a database, not a lone "
              "relay's 500:\n%s",
              harness_proc_log(&p));
    check_stream(1);
    check_stream(2);
}

/*
 * A replica whose window holds one batch (OUTBOX_MAX_IN_FLIGHT = batch = 50)
 * serving three databases with a backlog each: their relays take turns in
 * it, so each waits for room at times; all three drain, every event once,
 * and the window never holds more than its size.
 */
Test(fleet, three_databases_take_turns_in_a_window_of_one_batch)
{
    struct harness_proc p = {0};
    int port = http_free_port(), three[DBS] = {1, 1, 1, 0, 0}, waited = 0;
    long long deadline;
    char *body = NULL;

    write_fleet_file(0, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert(enqueue(i, 600));
    }
    start_replica_windowed(&p, "W", port, 50);
    deadline = harness_now_ms() + 60000;
    while (unfinished(0) + unfinished(1) + unfinished(2) != 0) {
        cr_assert(harness_now_ms() < deadline, "the backlogs did not drain");
        if (http_get(port, "/metrics", &body) == 200) {
            double in_flight = http_metric(body, "outbox_fleet_window_in_flight");

            cr_assert_leq(in_flight, 50, "%.0f messages in a window of 50", in_flight);
        }
        free(body);
        body = NULL;
        harness_sleep_ms(20);
    }
    write_and_expect_flow(three, three, 1, 20000);
    cr_assert_eq(http_get(port, "/metrics", &body), 200);
    cr_assert_eq(http_metric(body, "outbox_fleet_window_capacity"), 50);
    for (int i = 0; i < 3; i++) {
        char series[128];
        double seconds;

        snprintf(series, sizeof(series), "outbox_fleet_window_wait_seconds_total{database=\"%s\"}",
                 dbs[i].name);
        seconds = http_metric(body, series);
        cr_assert_geq(seconds, 0, "%s missing from:\n%s", series, body);
        cr_log_info("%s waited %.3f s for room", dbs[i].name, seconds);
        waited += seconds > 0;
    }
    free(body);
    cr_assert_geq(waited, 2,
                  "fewer than two of three databases ever waited for room: "
                  "the window is not shared");
    relay_test_stop(&p, 20000);
    for (int i = 0; i < 3; i++) {
        check_stream(i);
    }
}
