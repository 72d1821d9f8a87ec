/* SPDX-License-Identifier: MIT */
/*
 * test_doctor.c - `outboxctl doctor`: a healthy deployment has every check
 * and no error (exit 0); a two-minute duplicate window (shorter than the
 * relay's retry horizon), a workqueue stream, a schema behind this build
 * and a ledger kept shorter than the stream's max_age are errors (exit 1),
 * each with its fix; a connection through a proxy is a pooler warning;
 * PgBouncer in transaction mode is an error named PgBouncer while relays
 * LISTEN (the default), a warning once OUTBOX_LISTEN=0, and nothing of the
 * kind in session mode. Through a transaction-mode pool that a relay used
 * before, doctor finds the relay's synchronous_commit=off on the server
 * connection it is handed: an error, since every client of that pool
 * would commit without waiting for durability.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "ctl_test.h"
#include "harness.h"
#include "relay_test.h"
#include "stream_admin_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    relay_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ctl_doctor, .init = setup, .fini = teardown, .timeout = 120);

/* A stream on `prefix`.> with this duplicate window and retention, as an operator made it. */
static void
make_stream(const char *name, const char *prefix, int64_t dupe_window_s,
            jsRetentionPolicy retention)
{
    char subject[64], err[256];
    struct stream_admin_spec spec = {.name = name,
                                     .subjects = subject,
                                     .duplicates_s = dupe_window_s,
                                     .max_age_s = 7LL * 86400,
                                     .retention = retention};

    snprintf(subject, sizeof(subject), "%s.>", prefix);
    cr_assert_eq(stream_admin_put(harness_nats_url(), &spec, err, sizeof(err)), 0, "%s", err);
}

/* The finding `check` of a doctor --json run; fails if there is none. */
static json_t *
finding(const struct ctl_run *r, const char *check)
{
    size_t i;
    json_t *line;

    json_array_foreach(r->lines, i, line)
    {
        const char *c = ctl_str(line, "check");

        if (c != NULL && strcmp(c, check) == 0) {
            return line;
        }
    }
    cr_assert_fail("doctor has no finding %s:\n%s", check, r->out);
    return NULL;
}

static void
expect_level(const struct ctl_run *r, const char *check, const char *level)
{
    json_t *f = finding(r, check);

    cr_assert_str_eq(ctl_str(f, "level"), level, "%s: %s", check, r->out);
}

Test(ctl_doctor, a_healthy_deployment_has_every_check_and_no_error)
{
    static const char *const checks[] = {"schema",
                                         "dead_tuples",
                                         "pooler",
                                         "notify",
                                         "clock",
                                         "idle_in_transaction_session_timeout",
                                         "xmin_horizon",
                                         "idle_in_transaction",
                                         "replication_slots",
                                         "prepared_transactions",
                                         "frozen_xid",
                                         "nats_version",
                                         "stream",
                                         "retention",
                                         "storage",
                                         "stream_replicas",
                                         "duplicate_window",
                                         "max_age",
                                         "jetstream_storage",
                                         "ledger_retention",
                                         "ordering",
                                         NULL};
    struct relay_env env;
    struct ctl_run r;

    make_stream("DOC_OK", "docok", 3600, js_LimitsPolicy);
    relay_test_env(&env, "DOC_OK", "docok");
    ctl_expect(&r, &env, 0, (const char *const[]){"doctor", "--json", NULL});
    for (int i = 0; checks[i] != NULL; i++) {
        json_t *f = finding(&r, checks[i]);

        cr_assert_str_neq(ctl_str(f, "level"), "error", "%s: %s", checks[i], ctl_str(f, "saw"));
    }
    expect_level(&r, "schema", "ok");
    expect_level(&r, "notify", "ok");
    expect_level(&r, "duplicate_window", "ok");
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "errors"), 0);
    ctl_run_fini(&r);
    relay_env_fini(&env);
}

Test(ctl_doctor, a_two_minute_duplicate_window_is_an_error)
{
    struct relay_env env;
    struct ctl_run r;
    json_t *f;

    make_stream("DOC_2M", "doc2m", 120, js_LimitsPolicy);
    relay_test_env(&env, "DOC_2M", "doc2m");
    /* The relays' defaults: a 60 s lease, 5 s publish timeout, 5 expiries (horizon 335 s). */
    relay_env_set(&env, "OUTBOX_LEASE_SECONDS", "60");
    relay_env_set(&env, "OUTBOX_PUBLISH_TIMEOUT_MS", "5000");
    ctl_expect(&r, &env, 1, (const char *const[]){"doctor", "--json", NULL});
    f = finding(&r, "duplicate_window");
    cr_assert_str_eq(ctl_str(f, "level"), "error");
    cr_assert(strstr(ctl_str(f, "saw"), "retry horizon") != NULL, "%s", ctl_str(f, "saw"));
    cr_assert(strstr(ctl_str(f, "fix"), "nats stream edit DOC_2M --dupe-window 1h") != NULL, "%s",
              ctl_str(f, "fix"));
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 1, (const char *const[]){"doctor", NULL});
    cr_assert(strstr(r.out, "error duplicate_window") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    relay_env_fini(&env);
}

Test(ctl_doctor, a_workqueue_stream_an_old_schema_and_a_short_ledger_are_errors)
{
    struct relay_env env;
    struct ctl_run r;

    make_stream("DOC_WQ", "docwq", 3600, js_WorkQueuePolicy);
    relay_test_env(&env, "DOC_WQ", "docwq");
    relay_env_set(&env, "OUTBOX_LEDGER_RETENTION_DAYS", "1");
    ctl_expect(&r, &env, 1, (const char *const[]){"doctor", "--json", NULL});
    expect_level(&r, "retention", "error");
    expect_level(&r, "ledger_retention", "error");
    cr_assert(strstr(ctl_str(finding(&r, "ledger_retention"), "fix"),
                     "OUTBOX_LEDGER_RETENTION_DAYS=8") != NULL,
              "%s", r.out);
    ctl_run_fini(&r);

    relay_env_set(&env, "OUTBOX_LEDGER_RETENTION_DAYS", "30");
    relay_env_set(&env, "OUTBOX_SCHEMA", "never_migrated");
    ctl_expect(&r, &env, 1, (const char *const[]){"doctor", "--json", NULL});
    expect_level(&r, "schema", "error");
    cr_assert_str_eq(ctl_str(finding(&r, "schema"), "fix"), "outboxctl migrate");
    ctl_run_fini(&r);
    relay_env_fini(&env);
}

Test(ctl_doctor, a_connection_through_a_proxy_is_a_pooler_warning)
{
    struct harness_proxy px;
    struct relay_env env;
    struct ctl_run r;
    char *url;

    make_stream("DOC_PX", "docpx", 3600, js_LimitsPolicy);
    harness_proxy_start(&px, harness_pg_port());
    url = harness_db_url_via(px.port);
    relay_env_init(&env, url, harness_nats_url(), "DOC_PX", "docpx");
    ctl_expect(&r, &env, 0, (const char *const[]){"doctor", "--json", NULL});
    expect_level(&r, "pooler", "warn");
    expect_level(&r, "notify", "ok"); /* a plain TCP proxy keeps the session */
    ctl_run_fini(&r);
    harness_proxy_stop(&px);
    relay_env_fini(&env);
    free(url);
}

Test(ctl_doctor, a_stream_whose_replicas_differ_from_the_setting_is_reported_with_the_edit)
{
    struct relay_env env;
    struct ctl_run r;
    json_t *f;

    make_stream("DOC_R1", "docr1", 3600, js_LimitsPolicy);
    relay_test_env(&env, "DOC_R1", "docr1");
    ctl_expect(&r, &env, 0, (const char *const[]){"doctor", "--json", NULL});
    expect_level(&r, "stream_replicas", "ok"); /* R1 and OUTBOX_STREAM_REPLICAS=1 agree */
    ctl_run_fini(&r);

    relay_env_set(&env, "OUTBOX_STREAM_REPLICAS", "3");
    ctl_run(&r, &env, (const char *const[]){"doctor", "--json", NULL});
    f = finding(&r, "stream_replicas");
    cr_assert_str_eq(ctl_str(f, "level"), "warn", "%s", r.out);
    cr_assert(strstr(ctl_str(f, "saw"), "has 1 replica") != NULL, "%s", r.out);
    cr_assert(strstr(ctl_str(f, "fix"), "nats stream edit DOC_R1 --replicas 3") != NULL, "%s",
              r.out);
    ctl_run_fini(&r);
    relay_env_fini(&env);
}

/* doctor --json through a PgBouncer in `pool_mode`, with OUTBOX_LISTEN=`listen`; exits `want`. */
static void
doctor_via_pgbouncer(const char *pool_mode, const char *listen, int want, struct ctl_run *r)
{
    struct harness_pgbouncer pb;
    struct relay_env env;
    char *url;

    make_stream("DOC_PB", "docpb", 3600, js_LimitsPolicy);
    harness_pgbouncer_start(&pb, harness_pg_port(), pool_mode);
    url = harness_db_url_via(pb.port);
    relay_env_init(&env, url, harness_nats_url(), "DOC_PB", "docpb");
    relay_env_set(&env, "OUTBOX_LISTEN", listen);
    ctl_expect(r, &env, want, (const char *const[]){"doctor", "--json", NULL});
    harness_pgbouncer_stop(&pb);
    relay_env_fini(&env);
    free(url);
}

Test(ctl_doctor, pgbouncer_in_transaction_mode_is_an_error_naming_it_and_the_setting)
{
    struct ctl_run r;
    json_t *f;

    doctor_via_pgbouncer("transaction", "1", 1, &r);
    f = finding(&r, "pooler");
    cr_assert_str_eq(ctl_str(f, "level"), "error", "%s", r.out);
    cr_assert(strstr(ctl_str(f, "saw"), "PgBouncer") != NULL, "%s", r.out);
    cr_assert(strstr(ctl_str(f, "saw"), "transaction mode") != NULL, "%s", r.out);
    cr_assert(strstr(ctl_str(f, "fix"), "OUTBOX_LISTEN=0") != NULL, "%s", r.out);
    ctl_run_fini(&r);
}

Test(ctl_doctor, pgbouncer_in_transaction_mode_with_polling_relays_is_a_warning)
{
    struct ctl_run r;
    json_t *f;

    doctor_via_pgbouncer("transaction", "0", 0, &r);
    f = finding(&r, "pooler");
    cr_assert_str_eq(ctl_str(f, "level"), "warn", "%s", r.out);
    cr_assert(strstr(ctl_str(f, "saw"), "PgBouncer") != NULL, "%s", r.out);
    cr_assert(strstr(ctl_str(f, "fix"), "outboxctl migrate") != NULL, "%s", r.out);
    f = finding(&r, "pooled_session_state"); /* nothing carried over yet: the rule, as a warning */
    cr_assert_str_eq(ctl_str(f, "level"), "warn", "%s", r.out);
    cr_assert(strstr(ctl_str(f, "fix"), "pool of their own") != NULL, "%s", r.out);
    ctl_run_fini(&r);
}

Test(ctl_doctor, a_transaction_pool_carrying_a_relays_synchronous_commit_off_is_an_error)
{
    struct harness_pgbouncer pb;
    struct harness_proc relay;
    struct relay_env env;
    struct ctl_run r;
    json_t *f;
    char *url;

    make_stream("DOC_PBR", "docpbr", 3600, js_LimitsPolicy);
    /* One server connection: the relay's two sessions (claims, upkeep) and doctor's all land
     * on it, as they would on whichever connection a larger pool hands out. */
    harness_pgbouncer_start_with(&pb, harness_pg_port(), "transaction", "default_pool_size = 1\n");
    url = harness_db_url_via(pb.port);
    relay_env_init(&env, url, harness_nats_url(), "DOC_PBR", "docpbr");
    relay_env_set(&env, "OUTBOX_LISTEN", "0");
    relay_test_start(&relay, &env, "pooled");
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&relay, "outboxd ready"), 20000);
    relay_test_stop(&relay, 10000); /* its server connections stay in the pool, as they were */
    ctl_expect(&r, &env, 1, (const char *const[]){"doctor", "--json", NULL});
    f = finding(&r, "pooled_session_state");
    cr_assert_str_eq(ctl_str(f, "level"), "error", "%s", r.out);
    cr_assert(strstr(ctl_str(f, "saw"), "synchronous_commit=off") != NULL, "%s", r.out);
    cr_assert(strstr(ctl_str(f, "fix"), "pool of their own") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    harness_pgbouncer_stop(&pb);
    relay_env_fini(&env);
    free(url);
}

Test(ctl_doctor, pgbouncer_in_session_mode_keeps_the_session)
{
    struct ctl_run r;

    doctor_via_pgbouncer("session", "1", 0, &r);
    expect_level(&r, "pooler", "warn"); /* another port: something is in between */
    expect_level(&r, "notify", "ok");
    ctl_run_fini(&r);
}
