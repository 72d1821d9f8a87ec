/* SPDX-License-Identifier: MIT */
/*
 * test_relay.c - `outboxd relay` end to end against real PostgreSQL and
 * nats-server: mark mode keeps published rows as done, prune mode deletes
 * them, a low id committed late is still published, core NATS delivers to
 * a plain subscriber, a commit wakes an idle relay long before its next
 * poll, neither a slow health sample nor a large retention backlog holds
 * anything up, `outboxctl status --json` counts what operators need, and no
 * log line ever carries the database password. Every test that publishes
 * checks the stream against the database (FAULTS.md §1); each uses its own
 * stream and subject prefix, so tests run in parallel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <jansson.h>
#include <nats/nats.h>

#include "aged_rows.h"
#include "harness.h"
#include "relay_check.h"
#include "relay_test.h"
#include "stream_reader_nats.h"

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

TestSuite(relay, .init = setup, .fini = teardown, .timeout = 120);

Test(relay, marks_every_published_row_done_and_keeps_it_in_mark_mode)
{
    struct relay_env env;
    struct harness_proc relay;
    struct relay_check chk;

    relay_test_enqueue(conn, 600);
    relay_test_env(&env, "RELAY_MARK", "relaymark");
    relay_env_set(&env, "OUTBOX_RELAY_MODE", "mark");
    relay_test_start(&relay, &env, "mark-1");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);

    cr_assert(harness_proc_log_contains(&relay, "batch_size=500"),
              "OUTBOX_BATCH_SIZE unset: a relay claims 500 rows at a time:\n%s",
              harness_proc_log(&relay));
    cr_assert_eq(relay_test_count(conn, "true"), 600, "mark mode deletes nothing");
    cr_assert_eq(relay_test_count(conn, "status = 'done' AND published_at IS NOT NULL "
                                        "AND published_at >= created_at AND attempts = 0 "
                                        "AND lease_token IS NULL AND leased_until IS NULL"),
                 600);
    chk = relay_test_check(conn, "RELAY_MARK");
    cr_assert_eq(chk.stream, 600);
    relay_env_fini(&env);
}

Test(relay, deletes_every_published_row_in_prune_mode)
{
    struct relay_env env;
    struct harness_proc relay;
    struct relay_check chk;

    relay_test_enqueue(conn, 600);
    relay_test_env(&env, "RELAY_PRUNE", "relayprune");
    relay_env_set(&env, "OUTBOX_RELAY_MODE", "prune");
    relay_test_start(&relay, &env, "prune-1");
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "true") == 0, 30000);
    relay_test_stop(&relay, 10000);

    chk = relay_test_check(conn, "RELAY_PRUNE");
    cr_assert_eq(chk.stream, 600, "every deleted row was published first");
    cr_assert_eq(chk.committed, 600);
    relay_env_fini(&env);
}

Test(relay, publishes_a_low_id_committed_after_higher_ones)
{
    PGconn *late = PQconnectdb(harness_db_url());
    struct relay_env env;
    struct harness_proc relay;
    char *low_id, *lower;

    cr_assert_eq(PQstatus(late), CONNECTION_OK, "%s", PQerrorMessage(late));
    relay_test_env(&env, "RELAY_LOWID", "relaylowid");
    relay_test_start(&relay, &env, "lowid-1");
    /* The first id is taken now, committed only after 200 later ids are published. */
    harness_exec(late, "BEGIN");
    low_id = harness_scalar_text(late, "INSERT INTO committed SELECT outbox.enqueue('movie', "
                                       "gen_random_uuid(), 'review.logged', '{}') RETURNING id");
    relay_test_enqueue(conn, 200);
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'done'") == 200, 30000);
    lower = harness_scalar_text(conn, "SELECT min(id::text) FROM committed");
    cr_assert_lt(strcmp(low_id, lower), 0, "%s must sort before every published id (%s)", low_id,
                 lower);
    harness_exec(late, "COMMIT");
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'done'") == 201, 10000);
    relay_test_stop(&relay, 10000);

    cr_assert_eq(relay_test_check(conn, "RELAY_LOWID").stream, 201);
    free(lower);
    free(low_id);
    PQfinish(late);
    relay_env_fini(&env);
}

Test(relay, delivers_to_a_core_nats_subscriber_and_finishes_the_rows_with_the_nats_core_bus)
{
    natsConnection *nc = NULL;
    natsSubscription *sub = NULL;
    struct relay_env env;
    struct harness_proc relay;
    struct relay_check chk;
    struct id_set got;
    char err[256] = "";

    cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_SubscribeSync(&sub, nc, "relaycore.>"), NATS_OK);
    cr_assert_eq(natsConnection_Flush(nc), NATS_OK, "the server must know the subscription");
    relay_test_enqueue(conn, 300);
    relay_test_env(&env, "RELAY_CORE_UNUSED", "relaycore");
    relay_env_set(&env, "OUTBOX_BUS", "nats-core");
    relay_test_start(&relay, &env, "core-1");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);
    cr_assert_eq(relay_test_count(conn, "status = 'done' AND published_at IS NOT NULL"), 300);

    id_set_init(&got);
    for (int i = 0; i < 300; i++) {
        natsMsg *m = NULL;
        const char *id = NULL;

        cr_assert_eq(natsSubscription_NextMsg(&m, sub, 5000), NATS_OK, "message %d of 300", i + 1);
        cr_assert_eq(natsMsgHeader_Get(m, "Nats-Msg-Id", &id), NATS_OK);
        cr_assert_eq(id_set_add(&got, id), 0);
        natsMsg_Destroy(m);
    }
    cr_assert_eq(relay_check_run(conn, RELAY_COMMITTED_SQL, &got, &chk, err, sizeof(err)), 0, "%s",
                 err);
    cr_assert_eq(chk.lost + chk.phantom + chk.stream_dups, 0,
                 "core delivery: lost=%zu phantom=%zu dups=%zu", chk.lost, chk.phantom,
                 chk.stream_dups);
    /* Fire-and-forget needs no stream, and the relay made none. */
    cr_assert_lt(stream_message_count(harness_nats_url(), "RELAY_CORE_UNUSED", err, sizeof(err)), 0,
                 "a core NATS relay created a stream");
    id_set_fini(&got);
    natsSubscription_Destroy(sub);
    natsConnection_Destroy(nc);
    relay_env_fini(&env);
}

Test(relay, publishes_an_event_committed_while_idle_well_before_the_next_poll)
{
    struct relay_env env;
    struct harness_proc relay;
    long long latency_ms;

    relay_test_env(&env, "RELAY_WAKE", "relaywake");
    relay_env_set(&env, "OUTBOX_POLL_MAX_MS", "5000");
    relay_test_start(&relay, &env, "wake-1");
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&relay, "broker connected"), 30000);
    /*
     * Not waiting for a condition: this lets the idle relay's poll interval
     * grow (5 ms doubling) to its 5000 ms cap. After 5.5 s it is inside a
     * 5000 ms wait that began near 5.1 s, so polling alone would find the
     * event about 4.6 s after its commit; only the wake-up is faster.
     */
    harness_sleep_ms(5500);
    relay_test_enqueue(conn, 1);
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'done'") == 1, 15000);
    /* Commit to publish in database time: created_at is the (autocommit) insert's now(). */
    latency_ms = harness_scalar_ll(conn, "SELECT (extract(epoch FROM published_at - created_at) "
                                         "* 1000)::bigint FROM outbox.events");
    cr_log_info("idle relay published %lld ms after the commit (poll interval 5000 ms)",
                latency_ms);
    cr_assert_lt(latency_ms, 1000, "published %lld ms after the commit: no wake-up, only the poll",
                 latency_ms);
    relay_test_stop(&relay, 10000);
    relay_test_check(conn, "RELAY_WAKE");
    relay_env_fini(&env);
}

Test(relay, claims_go_on_while_a_health_sample_waits)
{
    struct relay_env env;
    struct harness_proc relay;
    PGconn *locker = PQconnectdb(harness_db_url());

    cr_assert_eq(PQstatus(locker), CONNECTION_OK, "%s", PQerrorMessage(locker));
    relay_test_env(&env, "RELAY_GAUGES", "relaygauges");
    relay_test_start(&relay, &env, "gauges-1");
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&relay, "broker connected"), 30000);
    /*
     * The health sample counts the relay's dead letters: a lock on their table holds it up,
     * as a bloated table under load did for 0.1-1.8 s a sample. After 5.5 s a sample (every
     * 5 s) is waiting for the lock. The gauges have their own session and thread, so the
     * claims go on; on the claim loop's session, nothing was relayed until the lock went.
     */
    harness_exec(locker, "BEGIN");
    harness_exec(locker, "LOCK TABLE outbox.dead_letters IN ACCESS EXCLUSIVE MODE");
    harness_sleep_ms(5500);
    relay_test_enqueue(conn, 50);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 5000);
    harness_exec(locker, "ROLLBACK");
    PQfinish(locker);
    relay_test_stop(&relay, 10000);
    relay_test_check(conn, "RELAY_GAUGES");
    relay_env_fini(&env);
}

Test(relay, retention_keeps_up_with_a_large_backlog_of_old_rows)
{
    struct relay_env env;
    struct harness_proc relay;

    /*
     * 40,000 rows published two hours ago under a retention of one hour, and 10 new events
     * that stay. On the claim loop a pass was held to 20 x 1,000 rows every 30 s: half of the
     * old rows were still there half a minute later. The upkeep's pass goes on while its
     * batches come full.
     */
    relay_test_enqueue(conn, 40000);
    aged_rows_from_pending(conn, "done");
    relay_test_enqueue(conn, 10);
    relay_test_env(&env, "RELAY_RETAIN", "relayretain");
    relay_env_set(&env, "OUTBOX_RELAY_MODE", "mark");
    relay_env_set(&env, "OUTBOX_RETENTION_HOURS", "1");
    relay_test_start(&relay, &env, "retain-1");
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "true") == 10, 20000);
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'done'") == 10, 10000);
    relay_test_stop(&relay, 10000);
    relay_env_fini(&env);
}

/* ---- outboxctl status --json ------------------------------------------------------------ */

/* Runs `outboxctl status --json` on this test's database; returns the parsed object. */
static json_t *
status_json(void)
{
    char *argv[] = {(char *)harness_bin("outboxctl"), "status", "--json", NULL};
    struct relay_env env;
    struct harness_proc ctl;
    json_error_t jerr;
    json_t *doc;
    char *out;

    relay_env_init(&env, harness_db_url(), "nats://127.0.0.1:1", "UNUSED", "unused");
    harness_spawn(&ctl, argv, env.vars);
    cr_assert_eq(harness_proc_wait(&ctl, 20000), 0, "outboxctl status failed: %s",
                 harness_proc_log(&ctl));
    out = harness_proc_log(&ctl);
    doc = json_loads(out, JSON_DISABLE_EOF_CHECK, &jerr);
    cr_assert_not_null(doc, "not JSON: %s (%s)", out, jerr.text);
    free(out);
    relay_env_fini(&env);
    return doc;
}

static long long
json_count(json_t *doc, const char *key)
{
    json_t *v = json_object_get(doc, key);

    cr_assert(json_is_integer(v), "status --json has no integer %s", key);
    return (long long)json_integer_value(v);
}

Test(relay, status_json_counts_each_status_and_ignores_rows_parked_in_backoff)
{
    json_t *doc;
    double age;

    relay_test_enqueue(conn, 7);
    /* One row per state, ranked by id. Old created_at everywhere except on the due row,
     * so only a wrong filter could make the oldest age exceed 30 s. */
    harness_exec(conn, "WITH r AS (SELECT id, row_number() OVER (ORDER BY id) AS n "
                       "FROM outbox.events) "
                       "UPDATE outbox.events e SET "
                       "created_at = CASE WHEN r.n = 1 THEN now() - interval '30 s' "
                       "                  ELSE now() - interval '2 hours' END, "
                       "status = (ARRAY['pending','pending','leased','leased','done','dead',"
                       "                'invalid'])[r.n], "
                       "attempts = CASE WHEN r.n = 2 THEN 2 ELSE 0 END, "
                       "next_attempt_at = CASE WHEN r.n = 2 THEN now() + interval '1 hour' "
                       "                       ELSE now() END, "
                       "lease_token = CASE WHEN r.n IN (3, 4) THEN gen_random_uuid() END, "
                       "leased_until = CASE WHEN r.n = 3 THEN now() + interval '1 hour' "
                       "                    WHEN r.n = 4 THEN now() + interval '1 hour' END, "
                       "published_at = CASE WHEN r.n = 5 THEN now() END "
                       "FROM r WHERE e.id = r.id");
    doc = status_json();
    cr_assert_eq(json_count(doc, "pending"), 2);
    cr_assert_eq(json_count(doc, "leased"), 2);
    cr_assert_eq(json_count(doc, "done"), 1);
    cr_assert_eq(json_count(doc, "dead"), 1);
    cr_assert_eq(json_count(doc, "invalid"), 1);
    cr_assert(json_is_number(json_object_get(doc, "oldest_pending_age_s")));
    age = json_number_value(json_object_get(doc, "oldest_pending_age_s"));
    cr_assert(age >= 30 && age < 60, "oldest_pending_age_s %.1f: only the due row counts", age);
    json_decref(doc);

    /* A lease that ran out makes its row due again, and it is two hours old. */
    harness_exec(conn, "UPDATE outbox.events SET leased_until = now() - interval '1 s' "
                       "WHERE id = (SELECT id FROM outbox.events WHERE status = 'leased' "
                       "ORDER BY id DESC LIMIT 1)");
    doc = status_json();
    age = json_number_value(json_object_get(doc, "oldest_pending_age_s"));
    cr_assert(age >= 7200 && age < 7300, "oldest_pending_age_s %.1f after a lease expired", age);
    json_decref(doc);
}

/* ---- secrets ---------------------------------------------------------------------------- */

/* postgresql://`user`:RELAY_TEST_SECRET@host:port/`db` for this test's server (`port` if > 0). */
static char *
url_with_password(const char *user, int port, const char *db)
{
    PQconninfoOption *opts = PQconninfoParse(harness_db_url(), NULL);
    const char *host = "127.0.0.1", *db_port = "5432";
    char buf[1024];

    cr_assert_not_null(opts);
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val != NULL && strcmp(o->keyword, "host") == 0) {
            host = o->val;
        } else if (o->val != NULL && strcmp(o->keyword, "port") == 0) {
            db_port = o->val;
        }
    }
    if (port > 0) {
        snprintf(buf, sizeof(buf), "postgresql://%s:%s@%s:%d/%s", user, RELAY_TEST_SECRET, host,
                 port, db);
    } else {
        snprintf(buf, sizeof(buf), "postgresql://%s:%s@%s:%s/%s", user, RELAY_TEST_SECRET, host,
                 db_port, db);
    }
    PQconninfoFree(opts);
    return strdup(buf);
}

/* `outboxctl status` with `url` must fail, and say why without the password. */
static void
expect_ctl_failure_without_password(const char *url)
{
    char *argv[] = {(char *)harness_bin("outboxctl"), "status", NULL};
    struct relay_env env;
    struct harness_proc ctl;
    char *log;

    relay_env_init(&env, url, "nats://127.0.0.1:1", "UNUSED", "unused");
    harness_spawn(&ctl, argv, env.vars);
    cr_assert_eq(harness_proc_wait(&ctl, 30000), 1, "outboxctl status should fail");
    log = harness_proc_log(&ctl);
    cr_assert(strstr(log, "cannot connect") != NULL, "%s", log);
    cr_assert(strstr(log, RELAY_TEST_SECRET) == NULL, "outboxctl printed the password:\n%s", log);
    free(log);
    relay_env_fini(&env);
}

/*
 * Every relay test runs with passwords in its URLs (relay_test.h); this one
 * adds a role that has a password, written as user:password@ in the URL,
 * and the failure paths: a server that refuses the connection, a database
 * that does not exist, and outboxctl failing to connect.
 */
Test(relay, never_logs_the_database_password_connected_or_not)
{
    char *db = harness_scalar_text(conn, "SELECT current_database()");
    char role[128], sql[512];
    char *good_url, *refused_url, *missing_url;
    struct relay_env env;
    struct harness_proc good, refused, missing;

    snprintf(role, sizeof(role), "relay_%s", db);
    snprintf(sql, sizeof(sql), "CREATE ROLE %s LOGIN PASSWORD '%s'", role, RELAY_TEST_SECRET);
    harness_exec(conn, sql);
    snprintf(sql, sizeof(sql),
             "GRANT USAGE ON SCHEMA outbox TO %s; "
             "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA outbox TO %s",
             role, role);
    harness_exec(conn, sql);
    good_url = url_with_password(role, 0, db);
    refused_url = url_with_password(role, 1, db); /* nothing listens on port 1 */
    missing_url = url_with_password(role, 0, "no_such_database");
    relay_test_enqueue(conn, 50);

    relay_test_env(&env, "RELAY_SECRET", "relaysecret");
    relay_env_set(&env, "OUTBOX_DATABASE_URL", good_url);
    relay_test_start(&good, &env, "secret-good");
    relay_env_set(&env, "OUTBOX_DATABASE_URL", refused_url);
    relay_test_start(&refused, &env, "secret-refused");
    relay_env_set(&env, "OUTBOX_DATABASE_URL", missing_url);
    relay_test_start(&missing, &env, "secret-missing");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&refused, "database unavailable"), 20000);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&missing, "no_such_database"), 20000);
    cr_assert(harness_proc_log_contains(&good, "database connected"));
    cr_assert(harness_proc_log_contains(&good, "lease batch"), "debug lines are logged too");
    /* Each checks its log for the password. */
    relay_test_stop(&good, 10000);
    relay_test_stop(&refused, 10000);
    relay_test_stop(&missing, 10000);
    expect_ctl_failure_without_password(refused_url);
    expect_ctl_failure_without_password(missing_url);
    relay_test_check(conn, "RELAY_SECRET");

    snprintf(sql, sizeof(sql), "DROP OWNED BY %s; DROP ROLE %s", role, role);
    harness_exec(conn, sql);
    free(missing_url);
    free(refused_url);
    free(good_url);
    free(db);
    relay_env_fini(&env);
}

/* ---- a stream lost under a running relay ------------------------------------------------- */

static void
delete_stream(const char *name)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;

    cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    cr_assert_eq(js_DeleteStream(js, name, NULL, NULL), NATS_OK);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/*
 * A stream deleted under a running relay (an operator, or a server that
 * restarted with an empty store) is made again by the relay, which then
 * publishes what was committed after: the publishes that found no stream
 * hand their rows back without spending an attempt.
 */
Test(relay, makes_its_stream_again_when_it_disappears_under_it)
{
    struct relay_env env;
    struct harness_proc relay;
    char err[256] = "";

    relay_test_enqueue(conn, 100);
    relay_test_env(&env, "RELAY_GONE", "relaygone");
    relay_test_start(&relay, &env, "gone-1");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    delete_stream("RELAY_GONE");
    harness_exec(conn, "TRUNCATE committed");
    relay_test_enqueue(conn, 100);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);
    cr_assert(harness_proc_log_contains(&relay, "stream ready"), "no stream was made");
    cr_assert_eq(stream_message_count(harness_nats_url(), "RELAY_GONE", err, sizeof(err)), 100,
                 "the recreated stream must hold every event committed after the loss: %s", err);
    relay_test_check(conn, "RELAY_GONE");
    cr_assert_eq(relay_test_count(conn, "attempts > 0"), 0, "a missing stream spent attempts");
    relay_env_fini(&env);
}
