/* SPDX-License-Identifier: MIT */
/*
 * test_xmin_horizon.c - FAULTS.md T14, shortened for CI: while a writer
 * commits steadily and a relay publishes, a session opens a transaction,
 * takes an xid (BEGIN; SELECT pg_current_xact_id()) and goes idle.
 *
 * Documenting run: the relay's outbox_relay_xmin_horizon_age_seconds
 * follows the pin's age, its dead-tuple gauge and VACUUM show dead rows
 * that cannot be removed, and `outboxctl doctor` names the session and its
 * age (CI pins for 15 s; the soak form pins past the 5-minute threshold
 * and requires doctor's warning and the metric over 300).
 *
 * With idle_in_transaction_session_timeout set on the pinning session's
 * role (3 s here, 60 s in production): the server ends the session within
 * the timeout + 5 s, the metric falls back, VACUUM removes the dead rows,
 * and the backlog never grows past about a second of production.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "ctl_test.h"
#include "harness.h"
#include "http_get.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static char role[64];

static void
setup(void)
{
    /*
     * Exclusive: the relay's gauge counts its own database only, but doctor and the server's
     * view of the oldest transaction are cluster-wide, so one test's pin would be the other's.
     */
    conn = chaos_begin(relay_test_prepare, 1);
    role[0] = '\0';
}

static void
teardown(void)
{
    if (role[0] != '\0') {
        char sql[256];

        snprintf(sql, sizeof(sql), "DROP OWNED BY %s; DROP ROLE %s", role, role);
        PQclear(PQexec(conn, sql));
    }
    chaos_end(&conn);
}

TestSuite(xmin_horizon, .init = setup, .fini = teardown, .timeout = 900);

#define HORIZON "outbox_relay_xmin_horizon_age_seconds"
#define DEAD    "outbox_relay_table_dead_tuples"

enum { RATE = 200 }; /* events per second */

struct pipeline {
    const char *stream;
    struct harness_proc relay;
    struct relay_env env;
    struct writer_thread w;
    int http;
};

static void
pipeline_start(struct pipeline *p, const char *stream, const char *prefix, int seconds)
{
    char addr[32];

    p->stream = stream;
    p->http = http_free_port();
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", p->http);
    relay_test_env(&p->env, stream, prefix);
    relay_env_set(&p->env, "OUTBOX_HTTP_ADDR", addr);
    relay_test_start(&p->relay, &p->env, "horizon-relay");
    chaos_start_writer(&p->w, RATE * seconds, 10, 50);
}

/* Called once the test has measured what it checks: the writer's remaining events would be idle. */
static void
pipeline_stop(struct pipeline *p)
{
    writer_thread_stop(&p->w);
    HARNESS_WAIT_UNTIL(atomic_load(&p->w.done), 900000);
    writer_thread_join(&p->w);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&p->relay, 10000);
    relay_test_check(conn, p->stream);
}

/* A gauge of the relay's /metrics, -1 if it cannot be read. */
static double
metric(int port, const char *series)
{
    char *body = NULL;
    double v = -1;

    if (http_get(port, "/metrics", &body) == 200) {
        v = http_metric(body, series);
    }
    free(body);
    return v;
}

/* n_dead_tup of the outbox table right after a VACUUM: the dead rows it could not remove. */
static long long
dead_after_vacuum(void)
{
    harness_exec(conn, "VACUUM outbox.events");
    return harness_scalar_ll(conn, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE "
                                   "schemaname = 'outbox' AND relname = 'events'");
}

/* A session that takes an xid and idles in its transaction; its xid in `xid`. */
static PGconn *
pin(const char *url, long long *xid)
{
    PGconn *c = PQconnectdb(url);

    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
    harness_exec(c, "BEGIN");
    *xid = harness_scalar_ll(c, "SELECT pg_current_xact_id()::text::bigint");
    cr_log_info("T14: a session pins the horizon with transaction %lld", *xid);
    return c;
}

/* 1 once no transaction at or below `xid` runs: every new snapshot's xmin is past it. */
static int
horizon_passed(long long xid)
{
    return harness_scalar_ll(conn, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint") >
           xid;
}

/*
 * n_dead_tup after a VACUUM once the pin is gone, taken again for up to 15 s
 * until it is under `pinned`: the writer and the relay go on making dead rows,
 * and a VACUUM that meets a page its cleanup cannot lock counts that page's
 * dead rows as kept. The sessions that hold the horizon are logged if it stays.
 */
static long long
dead_once_free(long long pinned)
{
    long long until = harness_now_ms() + 15000, dead = dead_after_vacuum();

    while (dead >= pinned && harness_now_ms() < until) {
        /* Not waiting for a condition alone: each try is a VACUUM, a second apart. */
        harness_sleep_ms(1000);
        dead = dead_after_vacuum();
    }
    if (dead >= pinned) {
        char *holders = harness_scalar_text(
            conn, "SELECT coalesce(string_agg(format('%s pid %s %s xid %s xmin %s', "
                  "application_name, pid, state, backend_xid, backend_xmin), '; '), 'none') "
                  "FROM pg_stat_activity WHERE backend_xid IS NOT NULL OR backend_xmin IS NOT "
                  "NULL");

        cr_log_error("T14: sessions holding a horizon: %s", holders);
        free(holders);
    }
    return dead;
}

Test(xmin_horizon, t14_a_pinned_horizon_shows_in_metrics_and_doctor)
{
    int pin_s = chaos_soak() ? 330 : 15;
    struct pipeline p;
    struct ctl_run doctor;
    PGconn *pinner;
    long long pinned_at, pinned_xid, dead_pinned, dead_free;
    double age = -1, dead_gauge = -1;
    const char *saw = NULL;
    size_t i;
    json_t *line;

    pipeline_start(&p, "T14_PIN", "t14pin", pin_s + 10);
    harness_sleep_ms(2000); /* Not waiting for a condition: the steady state before the pin. */
    pinner = pin(harness_db_url(), &pinned_xid);
    pinned_at = harness_now_ms();
    while (harness_now_ms() - pinned_at < (long long)pin_s * 1000) {
        /* Not waiting for a condition: the pin lasts this long, the gauge is sampled meanwhile. */
        harness_sleep_ms(1000);
        age = metric(p.http, HORIZON);
        dead_gauge = metric(p.http, DEAD);
    }
    dead_pinned = dead_after_vacuum();
    ctl_run(&doctor, &p.env, (const char *const[]){"doctor", "--json", NULL});
    json_array_foreach(doctor.lines, i, line)
    {
        const char *check = ctl_str(line, "check");

        if (check != NULL && strcmp(check, "xmin_horizon") == 0) {
            saw = ctl_str(line, "saw");
            cr_log_info("T14: doctor: %s: %s", ctl_str(line, "level"), saw);
            if (chaos_soak()) {
                cr_assert_str_eq(ctl_str(line, "level"), "warn", "doctor must warn past 300 s");
            }
        }
    }
    cr_assert_not_null(saw, "doctor has no xmin_horizon finding:\n%s", doctor.out);
    cr_assert(strstr(saw, "idle in transaction") != NULL,
              "doctor does not name the idle session: %s", saw);
    /* Its backend ends a moment after the client goes: until then the pin holds. */
    PQfinish(pinner);
    HARNESS_WAIT_UNTIL(horizon_passed(pinned_xid), 10000);
    dead_free = dead_once_free(dead_pinned);
    cr_log_info("T14: pinned %d s: horizon gauge %.0f s, dead-tuple gauge %.0f; after VACUUM %lld "
                "dead rows stayed while pinned, %lld once the pin was gone",
                pin_s, age, dead_gauge, dead_pinned, dead_free);
    cr_assert_geq(age, pin_s - 7, "the horizon gauge shows %.0f s for a %d s pin", age, pin_s);
    if (chaos_soak()) {
        cr_assert_gt(age, 300, "the horizon gauge must cross its 5-minute threshold");
    }
    cr_assert_gt(dead_gauge, 0, "the dead-tuple gauge saw nothing");
    cr_assert_gt(dead_pinned, dead_free,
                 "VACUUM removed as much with the pin (%lld dead rows kept) as without (%lld)",
                 dead_pinned, dead_free);
    ctl_run_fini(&doctor);
    pipeline_stop(&p);
    relay_env_fini(&p.env);
}

/* The backlog (unfinished rows) sampled once a second for `seconds`; returns the largest. */
static long long
backlog_max_over(int seconds)
{
    long long worst = 0, until = harness_now_ms() + (long long)seconds * 1000;

    while (harness_now_ms() < until) {
        long long b = relay_test_unfinished(conn);

        worst = b > worst ? b : worst;
        /* Not waiting for a condition: sampling the backlog through a fixed span. */
        harness_sleep_ms(1000);
    }
    return worst;
}

Test(xmin_horizon, t14_idle_in_transaction_session_timeout_on_the_role_ends_the_pin)
{
    enum { TIMEOUT_S = 3 };
    struct pipeline p;
    PGconn *pinner;
    PGresult *res;
    char sql[256], *url;
    long long started, ended_ms = -1, backlog, dead_free, pinned_xid;
    double age_during = -1, age_after;

    snprintf(role, sizeof(role), "t14_pinner_%d", (int)getpid());
    snprintf(sql, sizeof(sql),
             "CREATE ROLE %s LOGIN; ALTER ROLE %s SET "
             "idle_in_transaction_session_timeout = '%ds'",
             role, role, TIMEOUT_S);
    harness_exec(conn, sql);
    pipeline_start(&p, "T14_TIMEOUT", "t14timeout", 25);
    harness_sleep_ms(2000); /* Not waiting for a condition: the steady state before the pin. */
    url = malloc(strlen(harness_db_url()) + 128);
    cr_assert_not_null(url);
    snprintf(url, strlen(harness_db_url()) + 128, "%s%suser=%s", harness_db_url(),
             strchr(harness_db_url(), '?') != NULL ? "&" : "?", role);
    pinner = pin(url, &pinned_xid);
    started = harness_now_ms();
    while (ended_ms < 0 && harness_now_ms() - started < (TIMEOUT_S + 5) * 1000) {
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM pg_stat_activity WHERE usename = '%s'",
                 role);
        if (harness_scalar_ll(conn, sql) == 0) {
            ended_ms = harness_now_ms() - started;
        } else {
            age_during =
                metric(p.http, HORIZON) > age_during ? metric(p.http, HORIZON) : age_during;
            harness_sleep_ms(50);
        }
    }
    res = PQexec(pinner, "SELECT 1");
    cr_log_info("T14: the pinning session ended %lld ms after it went idle (timeout %d s); its "
                "next statement: %s",
                ended_ms, TIMEOUT_S, PQerrorMessage(pinner));
    cr_assert(ended_ms >= 0 && ended_ms <= (TIMEOUT_S + 5) * 1000,
              "the server did not end the idle transaction within %d s", TIMEOUT_S + 5);
    cr_assert_neq(PQresultStatus(res), PGRES_TUPLES_OK, "the pinning session survived");
    PQclear(res);
    PQfinish(pinner);
    backlog = backlog_max_over(12);
    age_after = metric(p.http, HORIZON);
    dead_free = dead_after_vacuum();
    cr_log_info("T14: horizon gauge at most %.0f s during the pin, %.0f s after; backlog at most "
                "%lld rows (%d events/s); %lld dead rows left after VACUUM",
                age_during, age_after, backlog, RATE, dead_free);
    cr_assert_leq(age_after, 5, "the horizon gauge stays up after the pin ended");
    cr_assert_leq(backlog, RATE + 100, "the backlog grew past a second of production");
    pipeline_stop(&p);
    free(url);
    relay_env_fini(&p.env);
}
