/* SPDX-License-Identifier: MIT */
/*
 * test_harness.c - the test harness itself: its servers answer, fresh
 * databases are isolated, spawned processes are captured, and the faults
 * later tests inject (stop, kill, black hole) really happen and heal.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
connect_fresh(void)
{
    conn = harness_pg_connect_fresh();
}

static void
disconnect(void)
{
    PQfinish(conn);
    conn = NULL;
}

/* Fault tests hold the servers alone, so they never disturb a neighbour. */
static void
exclusive_then_connect_fresh(void)
{
    harness_servers_exclusive();
    conn = harness_pg_connect_fresh();
}

static void
exclusive(void)
{
    harness_servers_exclusive();
}

/* Connects without reconnecting; returns NULL and the status on failure. */
static natsConnection *
nats_connect(const char *url, int timeout_ms, natsStatus *status)
{
    natsOptions *opts = NULL;
    natsConnection *nc = NULL;
    natsStatus s = natsOptions_Create(&opts);

    if (s == NATS_OK) {
        s = natsOptions_SetURL(opts, url);
    }
    if (s == NATS_OK) {
        s = natsOptions_SetTimeout(opts, timeout_ms);
    }
    if (s == NATS_OK) {
        s = natsOptions_SetAllowReconnect(opts, false);
    }
    if (s == NATS_OK) {
        s = natsConnection_Connect(&nc, opts);
    }
    natsOptions_Destroy(opts);
    *status = s;
    return nc;
}

static natsConnection *
nats_connect_ok(const char *url)
{
    natsStatus s;
    natsConnection *nc = nats_connect(url, 5000, &s);

    cr_assert_eq(s, NATS_OK, "connect to %s: %s", url, natsStatus_GetText(s));
    return nc;
}

static void
add_stream(jsCtx *js, const char *name, const char *subject)
{
    jsStreamConfig cfg;
    jsStreamInfo *info = NULL;
    jsErrCode jerr = 0;
    const char *subjects[] = {subject};
    natsStatus s;

    jsStreamConfig_Init(&cfg);
    cfg.Name = name;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    s = js_AddStream(&info, js, &cfg, NULL, &jerr);
    cr_assert_eq(s, NATS_OK, "js_AddStream %s: %s (jetstream error %d)", name,
                 natsStatus_GetText(s), (int)jerr);
    jsStreamInfo_Destroy(info);
}

static void
publish(jsCtx *js, const char *subject, const char *stream, uint64_t expected_seq)
{
    jsPubAck *ack = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_Publish(&ack, js, subject, "hello", 5, NULL, &jerr);

    cr_assert_eq(s, NATS_OK, "js_Publish %s: %s (jetstream error %d)", subject,
                 natsStatus_GetText(s), (int)jerr);
    cr_assert_str_eq(ack->Stream, stream);
    cr_assert_eq(ack->Sequence, expected_seq);
    jsPubAck_Destroy(ack);
}

/* 1 when pid has exited (a zombie counts: PID 1 may never reap an orphan). */
static int
pid_gone(pid_t pid)
{
    char path[64];
    char buf[512];
    FILE *f;
    const char *paren;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return 1;
    }
    buf[0] = '\0';
    if (fgets(buf, sizeof(buf), f) == NULL) {
        buf[0] = '\0';
    }
    fclose(f);
    paren = strrchr(buf, ')');
    return paren == NULL || paren[2] == 'Z' || paren[2] == 'X';
}

/* ---- PostgreSQL ------------------------------------------------------------------------ */

TestSuite(a_fresh_database, .init = connect_fresh, .fini = disconnect, .timeout = 60);

Test(a_fresh_database, answers_and_has_the_outbox_events_table)
{
    char *table = harness_scalar_text(conn, "SELECT to_regclass('outbox.events')::text");

    cr_assert_eq(harness_scalar_ll(conn, "SELECT 1"), 1);
    cr_assert_str_eq(table, "outbox.events");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events"), 0);
    free(table);
}

Test(a_fresh_database, is_distinct_from_and_isolated_from_another_one)
{
    PGconn *other = harness_pg_connect_fresh();
    char *mine = harness_scalar_text(conn, "SELECT current_database()");
    char *theirs = harness_scalar_text(other, "SELECT current_database()");
    const char *count_sql = "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'";

    cr_assert_str_neq(mine, theirs);
    harness_exec(conn, "CREATE TABLE only_here (x int)");
    cr_assert_eq(harness_scalar_ll(conn, count_sql), 1);
    cr_assert_eq(harness_scalar_ll(other, count_sql), 0);
    free(mine);
    free(theirs);
    PQfinish(other);
}

Test(a_fresh_database, has_a_url_a_daemon_can_connect_with)
{
    PGconn *again = PQconnectdb(harness_db_url());
    char *mine = harness_scalar_text(conn, "SELECT current_database()");
    char *theirs;

    cr_assert_eq(PQstatus(again), CONNECTION_OK, "%s: %s", harness_db_url(), PQerrorMessage(again));
    theirs = harness_scalar_text(again, "SELECT current_database()");
    cr_assert_str_eq(mine, theirs);
    free(mine);
    free(theirs);
    PQfinish(again);
}

Test(a_fresh_database, reports_sql_nulls_as_null_text)
{
    cr_assert_null(harness_scalar_text(conn, "SELECT NULL::text"));
}

TestSuite(an_empty_fresh_database, .timeout = 60);

Test(an_empty_fresh_database, has_no_outbox_schema)
{
    PGconn *empty = harness_pg_connect_fresh_empty();

    cr_assert_eq(
        harness_scalar_ll(empty, "SELECT count(*) FROM pg_namespace WHERE nspname = 'outbox'"), 0);
    PQfinish(empty);
}

TestSuite(a_test_worker, .timeout = 30);

Test(a_test_worker, sees_the_server_urls_the_runner_exported)
{
    const char *db = getenv("OUTBOX_TEST_DATABASE_URL");
    const char *nats = getenv("OUTBOX_TEST_NATS_URL");

    cr_assert(db != NULL && strncmp(db, "postgres", 8) == 0, "OUTBOX_TEST_DATABASE_URL=%s",
              db ? db : "(unset)");
    cr_assert(nats != NULL && strncmp(nats, "nats://", 7) == 0, "OUTBOX_TEST_NATS_URL=%s",
              nats ? nats : "(unset)");
}

/* ---- NATS ------------------------------------------------------------------------------ */

TestSuite(the_nats_server, .timeout = 60);

Test(the_nats_server, acks_a_jetstream_publish)
{
    natsConnection *nc = nats_connect_ok(harness_nats_url());
    jsCtx *js = NULL;
    char stream[64];
    char subjects[64];
    char subject[64];

    snprintf(stream, sizeof(stream), "HARNESS_%d", (int)getpid());
    snprintf(subjects, sizeof(subjects), "harness.%d.>", (int)getpid());
    snprintf(subject, sizeof(subject), "harness.%d.hello", (int)getpid());
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    add_stream(js, stream, subjects);
    publish(js, subject, stream, 1);
    publish(js, subject, stream, 2);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* ---- processes ------------------------------------------------------------------------- */

TestSuite(a_spawned_process, .timeout = 30);

Test(a_spawned_process, has_its_output_and_exit_status_captured)
{
    struct harness_proc p;
    char *argv[] = {"sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3", NULL};
    char *log;

    harness_spawn(&p, argv, NULL);
    cr_assert_eq(harness_proc_wait(&p, 10000), 3);
    cr_assert(harness_proc_log_contains(&p, "to-stdout"));
    cr_assert(harness_proc_log_contains(&p, "to-stderr"));
    cr_assert_not(harness_proc_log_contains(&p, "absent"));
    log = harness_proc_log(&p);
    cr_assert_str_eq(log, "to-stdout\nto-stderr\n");
    free(log);
}

Test(a_spawned_process, sees_the_test_environment_plus_extra_entries)
{
    struct harness_proc p;
    char *argv[] = {"sh", "-c", "echo \"x=$HARNESS_X db=${OUTBOX_TEST_DATABASE_URL:+set}\"", NULL};
    char *env[] = {"HARNESS_X=42", NULL};

    harness_spawn(&p, argv, env);
    cr_assert_eq(harness_proc_wait(&p, 10000), 0);
    cr_assert(harness_proc_log_contains(&p, "x=42 db=set"));
}

Test(a_spawned_process, killed_by_a_signal_reports_128_plus_the_signal)
{
    struct harness_proc p;
    char *argv[] = {"sh", "-c", "kill -9 $$", NULL};

    harness_spawn(&p, argv, NULL);
    cr_assert_eq(harness_proc_wait(&p, 10000), 128 + SIGKILL);
}

Test(a_spawned_process, outlives_a_wait_that_times_out_and_stops_on_sigterm)
{
    struct harness_proc p;
    char *argv[] = {"sleep", "30", NULL};

    harness_spawn(&p, argv, NULL);
    cr_assert_eq(harness_proc_wait(&p, 50), -1);
    cr_assert(p.pid > 0 && kill(p.pid, 0) == 0);
    cr_assert_eq(harness_proc_stop(&p, 5000), 128 + SIGTERM);
    cr_assert_eq(p.pid, 0);
}

Test(a_spawned_process, is_killed_with_its_children)
{
    struct harness_proc p;
    char *argv[] = {"sh", "-c", "sleep 30 & echo child=$!; wait", NULL};
    char *log;
    const char *at;
    pid_t child;

    harness_spawn(&p, argv, NULL);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&p, "child="), 5000);
    log = harness_proc_log(&p);
    at = strstr(log, "child=");
    child = (pid_t)strtol(at + 6, NULL, 10);
    free(log);
    cr_assert(child > 0 && !pid_gone(child));
    cr_assert_eq(harness_proc_kill(&p), 128 + SIGKILL);
    HARNESS_WAIT_UNTIL(pid_gone(child), 5000);
}

Test(a_spawned_process, can_be_one_of_our_programs)
{
    const char *outboxd = harness_bin("outboxd");

    cr_assert(strstr(outboxd, "/outboxd") != NULL);
    cr_assert_eq(access(outboxd, X_OK), 0, "%s: %s", outboxd, strerror(errno));
    cr_assert_eq(harness_bin("outboxd"), outboxd, "the same name gives the same string");
}

/* ---- waiting --------------------------------------------------------------------------- */

static int
never(void *arg)
{
    (void)arg;
    return 0;
}

static int
on_third_call(void *arg)
{
    int *calls = arg;

    return ++*calls >= 3;
}

TestSuite(waiting, .timeout = 30);

Test(waiting, gives_up_after_the_timeout)
{
    long long start = harness_now_ms();

    cr_assert_eq(harness_wait_until(never, NULL, 100), 0);
    cr_assert_geq(harness_now_ms() - start, 100);
}

Test(waiting, returns_as_soon_as_the_condition_holds)
{
    int calls = 0;

    cr_assert_eq(harness_wait_until(on_third_call, &calls, 10000), 1);
    cr_assert_eq(calls, 3);
}

/* ---- faults ---------------------------------------------------------------------------- */

TestSuite(a_stopped_postgres, .init = exclusive_then_connect_fresh, .fini = disconnect,
          .timeout = 180);

Test(a_stopped_postgres, answers_again_on_the_same_port_with_its_data)
{
    int port = harness_pg_port();
    PGresult *res;
    PGconn *again;

    harness_exec(conn, "CREATE TABLE kept (x int)");
    harness_exec(conn, "INSERT INTO kept VALUES (42)");
    harness_pg_stop("immediate");
    res = PQexec(conn, "SELECT 1");
    cr_assert_neq(PQresultStatus(res), PGRES_TUPLES_OK, "the server should be down");
    PQclear(res);
    cr_assert_eq(PQping(harness_db_url()), PQPING_NO_RESPONSE);
    harness_pg_start();
    cr_assert_eq(harness_pg_port(), port);
    again = PQconnectdb(harness_db_url());
    cr_assert_eq(PQstatus(again), CONNECTION_OK, "%s", PQerrorMessage(again));
    cr_assert_eq(harness_scalar_ll(again, "SELECT x FROM kept"), 42);
    PQfinish(again);
}

Test(a_stopped_postgres, stops_fast_too)
{
    harness_pg_stop("fast");
    cr_assert_eq(PQping(harness_db_url()), PQPING_NO_RESPONSE);
    harness_pg_start();
    cr_assert_eq(PQping(harness_db_url()), PQPING_OK);
}

TestSuite(a_backend, .init = connect_fresh, .fini = disconnect, .timeout = 60);

Test(a_backend, is_terminated_by_its_application_name)
{
    const char *keys[] = {"dbname", "application_name", NULL};
    const char *values[] = {harness_db_url(), "harness-victim", NULL};
    PGconn *victim = PQconnectdbParams(keys, values, 1);
    PGresult *res;

    cr_assert_eq(PQstatus(victim), CONNECTION_OK, "%s", PQerrorMessage(victim));
    cr_assert_eq(harness_pg_terminate_backends("harness-vic%"), 1);
    res = PQexec(victim, "SELECT 1");
    cr_assert_neq(PQresultStatus(res), PGRES_TUPLES_OK, "the victim should be disconnected");
    PQclear(res);
    PQfinish(victim);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT 1"), 1, "other connections survive");
}

TestSuite(a_killed_nats_server, .init = exclusive, .timeout = 180);

Test(a_killed_nats_server, keeps_its_streams_after_harness_nats_start)
{
    natsConnection *nc = nats_connect_ok(harness_nats_url());
    jsCtx *js = NULL;
    jsStreamInfo *info = NULL;
    jsErrCode jerr = 0;
    natsStatus s;

    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    add_stream(js, "RESTART", "restart.>");
    publish(js, "restart.one", "RESTART", 1);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    harness_nats_kill(SIGKILL);
    nc = nats_connect(harness_nats_url(), 1000, &s);
    cr_assert_neq(s, NATS_OK, "nothing should answer after SIGKILL");
    harness_nats_start();
    nc = nats_connect_ok(harness_nats_url());
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    s = js_GetStreamInfo(&info, js, "RESTART", NULL, &jerr);
    cr_assert_eq(s, NATS_OK, "stream lost: %s (jetstream error %d)", natsStatus_GetText(s),
                 (int)jerr);
    cr_assert_eq(info->State.Msgs, 1);
    jsStreamInfo_Destroy(info);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

Test(a_killed_nats_server, times_out_connects_while_stopped_and_answers_when_continued)
{
    natsStatus s;
    long long start;

    harness_nats_kill(SIGSTOP);
    start = harness_now_ms();
    cr_assert_null(nats_connect(harness_nats_url(), 1000, &s));
    cr_assert_neq(s, NATS_OK);
    cr_assert_geq(harness_now_ms() - start, 900, "it failed before the timeout: %s",
                  natsStatus_GetText(s));
    harness_nats_kill(SIGCONT);
    natsConnection_Destroy(nats_connect_ok(harness_nats_url()));
}

Test(a_killed_nats_server, restarts_with_extra_arguments_and_back)
{
    char conf[] = "/tmp/obx-harness-nats-XXXXXX";
    int fd = mkstemp(conf);
    char *extra[] = {"-c", conf, NULL};
    natsConnection *nc;

    cr_assert(fd >= 0 && write(fd, "max_payload: 4096\n", 18) == 18);
    close(fd);
    harness_nats_restart_with_args(extra);
    unlink(conf); /* read at start; gone now even if an assert below fails */
    nc = nats_connect_ok(harness_nats_url());
    cr_assert_eq(natsConnection_GetMaxPayload(nc), 4096);
    natsConnection_Destroy(nc);
    harness_nats_restart_with_args(NULL);
    nc = nats_connect_ok(harness_nats_url());
    cr_assert_eq(natsConnection_GetMaxPayload(nc), 1024 * 1024);
    natsConnection_Destroy(nc);
}

Test(a_killed_nats_server, restarts_with_authentication_the_harness_cannot_use)
{
    char *extra[] = {"--user", "harness", "--pass", "s3cret", NULL};
    char url[96];
    natsStatus s;

    harness_nats_restart_with_args(extra);
    cr_assert_null(nats_connect(harness_nats_url(), 2000, &s));
    cr_assert_eq(s, NATS_CONNECTION_AUTH_FAILED, "got %s", natsStatus_GetText(s));
    snprintf(url, sizeof(url), "nats://harness:s3cret@127.0.0.1:%d", harness_nats_port());
    natsConnection_Destroy(nats_connect_ok(url));
    harness_nats_restart_with_args(NULL);
    natsConnection_Destroy(nats_connect_ok(harness_nats_url()));
}

TestSuite(a_proxy, .init = connect_fresh, .fini = disconnect, .timeout = 60);

Test(a_proxy, forwards_connections_to_its_target)
{
    struct harness_proxy px;
    char *url;
    PGconn *via;

    harness_proxy_start(&px, harness_pg_port());
    url = harness_db_url_via(px.port);
    via = PQconnectdb(url);
    cr_assert_eq(PQstatus(via), CONNECTION_OK, "%s: %s", url, PQerrorMessage(via));
    cr_assert_eq(harness_scalar_ll(via, "SELECT 1"), 1);
    PQfinish(via);
    free(url);
    harness_proxy_stop(&px);
}

Test(a_proxy, black_holes_connects_while_paused)
{
    struct harness_proxy px;
    char url[64];
    natsStatus s;
    long long start;

    harness_proxy_start(&px, harness_nats_port());
    snprintf(url, sizeof(url), "nats://127.0.0.1:%d", px.port);
    natsConnection_Destroy(nats_connect_ok(url));
    harness_proxy_pause(&px);
    start = harness_now_ms();
    cr_assert_null(nats_connect(url, 1000, &s));
    cr_assert_neq(s, NATS_OK);
    cr_assert_geq(harness_now_ms() - start, 900, "it failed before the timeout: %s",
                  natsStatus_GetText(s));
    harness_proxy_resume(&px);
    natsConnection_Destroy(nats_connect_ok(url));
    harness_proxy_stop(&px);
}
