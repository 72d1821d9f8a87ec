/* SPDX-License-Identifier: MIT */
/*
 * test_relay_bad_rows.c - rows the relay must not publish, and rows the
 * broker keeps refusing, never stop the rows behind them:
 *   - invalid rows that only an old or foreign writer could commit (the
 *     test drops constraints in its own database) are quarantined with a
 *     reason, never published, never deleted (prune mode), while every
 *     valid row around them is published;
 *   - envelopes written past the row rules (their bypass) that differ from
 *     their row's columns or carry schema_version 1.0 are quarantined too;
 *   - a row JetStream rejects on every attempt is retried on the backoff
 *     schedule, checked in database time, and dead-lettered exactly at
 *     OUTBOX_MAX_ATTEMPTS;
 *   - a row that crashes every relay that leases it (FAULTS.md T10) is
 *     dead-lettered as lease_expired_without_outcome after
 *     OUTBOX_MAX_LEASE_EXPIRIES expiries, and the good rows all publish.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <nats/nats.h>

#include "harness.h"
#include "relay_check.h"
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
setup_exclusive(void)
{
    harness_servers_exclusive(); /* before connecting: this test restarts nats-server */
    setup();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(bad_rows, .init = setup, .fini = teardown, .timeout = 120);
TestSuite(bad_rows_small_payload, .init = setup_exclusive, .fini = teardown, .timeout = 120);

/* ---- invalid rows ---------------------------------------------------------------------- */

enum { MAX_PAYLOAD = 16384 };

/* An envelope for row `id` (SQL expression) with the given routing; otherwise valid. */
#define ENVELOPE_SQL(id, aggregate_type)                                 \
    "jsonb_build_object('id', " id                                       \
    ", 'event_type', 'review.logged', 'aggregate_type', " aggregate_type \
    ", 'aggregate_id', agg, 'occurred_at', '2026-11-29T09:41:56.123Z', " \
    "'schema_version', 1, 'payload', '{}'::jsonb)"

/* Inserts one row with raw SQL, bypassing the writer; returns its id (malloc'd). */
static char *
insert_raw(const char *aggregate_type, const char *envelope_sql)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "WITH v AS (SELECT outbox.uuid_v7() AS id, gen_random_uuid() AS agg), "
             "e AS (INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, "
             "envelope) SELECT id, '%s', agg, 'review.logged', %s FROM v RETURNING id) "
             "INSERT INTO committed SELECT id FROM e RETURNING id::text",
             aggregate_type, envelope_sql);
    return harness_scalar_text(conn, sql);
}

struct bad_row {
    const char *what;
    const char *reason; /* a part of last_error that names the problem */
    char *id;
};

/* The row's last_error, after checking it is quarantined and untouched otherwise. */
static void
expect_quarantined(const struct bad_row *b)
{
    char sql[512];
    char *reason;

    snprintf(sql, sizeof(sql),
             "SELECT last_error FROM outbox.events WHERE id = '%s' AND status = 'invalid' "
             "AND attempts = 0 AND published_at IS NULL AND lease_token IS NULL",
             b->id);
    reason = harness_scalar_text(conn, sql);
    cr_log_info("%s: quarantined with \"%s\"", b->what, reason);
    cr_assert(strstr(reason, b->reason) != NULL, "%s: reason \"%s\" should mention \"%s\"", b->what,
              reason, b->reason);
    free(reason);
}

Test(bad_rows_small_payload, quarantines_invalid_rows_with_a_reason_and_publishes_all_around_them)
{
    char conf_path[] = "/tmp/obx-relay-nats-XXXXXX";
    char *nats_args[] = {"-c", conf_path, NULL};
    struct bad_row bad[] = {
        {"bare business payload as envelope", "envelope has no id", NULL},
        {"unroutable subject", "aggregate_type", NULL},
        {"envelope id differs from the row id", "envelope id differs from the row id", NULL},
        {"envelope larger than max_payload", "bytes", NULL},
    };
    enum { BAD = sizeof(bad) / sizeof(bad[0]), GOOD_PER_GAP = 120 };
    struct harness_proc relay;
    struct relay_env env;
    struct relay_check chk;
    char *log;
    int fd = mkstemp(conf_path);

    cr_assert(fd >= 0 && write(fd, "max_payload: 16384\n", 19) == 19, "cannot write %s", conf_path);
    close(fd);
    harness_nats_restart_with_args(nats_args);

    /* What only an old or foreign writer could write: every event rule lives in one trigger. */
    harness_exec(conn, "DROP TRIGGER events_row_valid ON outbox.events");
    relay_test_enqueue(conn, GOOD_PER_GAP);
    bad[0].id = insert_raw("movie", "'{\"rating\": 5}'::jsonb");
    relay_test_enqueue(conn, GOOD_PER_GAP);
    bad[1].id = insert_raw("mo vie", ENVELOPE_SQL("id", "'mo vie'"));
    relay_test_enqueue(conn, GOOD_PER_GAP);
    bad[2].id = insert_raw("movie", ENVELOPE_SQL("gen_random_uuid()", "'movie'"));
    relay_test_enqueue(conn, GOOD_PER_GAP);
    /* Valid everywhere, and within the writer's 512 KiB, but over this server's 16 KiB. */
    bad[3].id = harness_scalar_text(conn, "INSERT INTO committed SELECT outbox.enqueue('movie', "
                                          "gen_random_uuid(), 'review.logged', "
                                          "jsonb_build_object('fill', repeat('x', 20000))) "
                                          "RETURNING id::text");
    relay_test_enqueue(conn, GOOD_PER_GAP);

    relay_test_env(&env, "BAD_ROWS", "badrows");
    relay_env_set(&env, "OUTBOX_RELAY_MODE", "prune");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "50");
    relay_test_start(&relay, &env, "bad-rows");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_assert_running(&relay, "the relay (bad rows must not crash it)");
    relay_test_stop(&relay, 10000);

    cr_assert_eq(relay_test_count(conn, "true"), BAD,
                 "prune mode deleted a row it never published");
    for (int i = 0; i < BAD; i++) {
        expect_quarantined(&bad[i]);
    }
    log = harness_proc_log(&relay);
    cr_assert_eq(text_count(log, "row quarantined as invalid"), BAD, "%s", log);
    free(log);
    chk = relay_test_check(conn, "BAD_ROWS");
    cr_assert_eq(chk.stream, 5 * GOOD_PER_GAP, "every valid row, and only those, is published");
    cr_assert_eq(chk.quarantined, BAD);
    for (int i = 0; i < BAD; i++) {
        free(bad[i].id);
    }
    unlink(conf_path);
    relay_env_fini(&env);
}

/*
 * Past the row rules through their documented bypass (the SQL writer's own
 * outbox.rows_validated, which any session can set): an envelope whose
 * fields differ from its row's columns, whose schema_version is 1.0, or
 * whose occurred_at names no real instant (published as ce-time), is
 * quarantined naming the field and both values, never published; the good
 * rows behind them are.
 */
static char *
insert_bypassing(const char *columns_sql, const char *envelope_patch)
{
    char sql[2048];
    char *id;

    snprintf(sql, sizeof(sql),
             "WITH v AS (SELECT outbox.uuid_v7() AS id, "
             "'0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b'::uuid AS agg), "
             "e AS (INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, "
             "tenant_id, envelope) SELECT id, %s, "
             "jsonb_build_object('id', id, 'event_type', 'review.logged', 'aggregate_type', "
             "'movie', 'aggregate_id', agg, 'tenant_id', 't1', "
             "'occurred_at', '2026-11-29T09:41:56.123Z', 'schema_version', 1, "
             "'payload', '{}'::jsonb) || '%s'::jsonb FROM v RETURNING id) "
             "INSERT INTO committed SELECT id FROM e RETURNING id::text",
             columns_sql, envelope_patch);
    harness_exec(conn, "BEGIN");
    harness_exec(conn, "SET LOCAL outbox.rows_validated = 'on'");
    id = harness_scalar_text(conn, sql);
    harness_exec(conn, "COMMIT");
    return id;
}

#define ROW_COLUMNS(aggregate_type, event_type, tenant) \
    "'" aggregate_type "', agg, '" event_type "', " tenant

Test(bad_rows, quarantines_envelopes_that_differ_from_their_row_or_are_not_version_1)
{
    struct bad_row bad[] = {
        {"schema_version 1.0", "schema_version must be 1 (the integer), not 1.0", NULL},
        {"upper-case aggregate_id",
         "aggregate_id \"0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B\" is not lower-case", NULL},
        {"another aggregate_type",
         "envelope aggregate_type differs from the row aggregate_type: \"book\" in the "
         "envelope, \"movie\" in the row",
         NULL},
        {"another event_type",
         "envelope event_type differs from the row event_type: \"review.deleted\" in the "
         "envelope, \"review.logged\" in the row",
         NULL},
        {"another aggregate_id", "envelope aggregate_id differs from the row aggregate_id", NULL},
        {"another tenant_id",
         "envelope tenant_id differs from the row tenant_id: \"t1\" in the envelope, \"t2\" "
         "in the row",
         NULL},
        {"an impossible occurred_at",
         "envelope occurred_at \"2026-02-30T10:00:00Z\" is not a real date and time", NULL},
    };
    enum { BAD = sizeof(bad) / sizeof(bad[0]), GOOD_PER_GAP = 30 };
    struct harness_proc relay;
    struct relay_env env;
    struct relay_check chk;

    relay_test_enqueue(conn, GOOD_PER_GAP);
    bad[0].id = insert_bypassing(ROW_COLUMNS("movie", "review.logged", "'t1'"),
                                 "{\"schema_version\": 1.0}");
    bad[1].id = insert_bypassing(ROW_COLUMNS("movie", "review.logged", "'t1'"),
                                 "{\"aggregate_id\": \"0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B\"}");
    relay_test_enqueue(conn, GOOD_PER_GAP);
    bad[2].id = insert_bypassing(ROW_COLUMNS("movie", "review.logged", "'t1'"),
                                 "{\"aggregate_type\": \"book\"}");
    bad[3].id = insert_bypassing(ROW_COLUMNS("movie", "review.logged", "'t1'"),
                                 "{\"event_type\": \"review.deleted\"}");
    bad[4].id = insert_bypassing(ROW_COLUMNS("movie", "review.logged", "'t1'"),
                                 "{\"aggregate_id\": \"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5c\"}");
    bad[5].id = insert_bypassing(ROW_COLUMNS("movie", "review.logged", "'t2'"), "{}");
    bad[6].id = insert_bypassing(ROW_COLUMNS("movie", "review.logged", "'t1'"),
                                 "{\"occurred_at\": \"2026-02-30T10:00:00Z\"}");
    relay_test_enqueue(conn, GOOD_PER_GAP);

    relay_test_env(&env, "BAD_MATCH", "badmatch");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "20");
    relay_test_start(&relay, &env, "bad-match");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_assert_running(&relay, "the relay (bad rows must not crash it)");
    relay_test_stop(&relay, 10000);

    for (int i = 0; i < BAD; i++) {
        expect_quarantined(&bad[i]);
    }
    chk = relay_test_check(conn, "BAD_MATCH");
    cr_assert_eq(chk.stream, 3 * GOOD_PER_GAP, "every valid row, and only those, is published");
    cr_assert_eq(chk.quarantined, BAD);
    for (int i = 0; i < BAD; i++) {
        free(bad[i].id);
    }
    relay_env_fini(&env);
}

/* ---- dead letters at max attempts ------------------------------------------------------ */

/* A stream made before the relay starts, whose max_msg_size refuses bigger messages. */
static void
create_stream_refusing_above(const char *name, const char *prefix, int32_t max_msg_size)
{
    char subject[64], err[256];
    struct stream_admin_spec spec = {
        .name = name, .subjects = subject, .duplicates_s = 3600, .max_msg_size = max_msg_size};

    snprintf(subject, sizeof(subject), "%s.>", prefix);
    cr_assert_eq(stream_admin_put(harness_nats_url(), &spec, err, sizeof(err)), 0, "%s", err);
}

enum { MAX_ATTEMPTS = 4, BASE_MS = 1000 };

Test(bad_rows, dead_letters_a_rejected_row_exactly_at_max_attempts_on_the_backoff_schedule)
{
    struct harness_proc relay;
    struct relay_env env;
    struct relay_check chk;
    char *big, sql[1024];

    create_stream_refusing_above("BAD_DLQ", "baddlq", 2048);
    /* Every change of attempts, in database time: now() is the finishing statement's. */
    harness_exec(conn, "CREATE TABLE attempt_log (id uuid, attempts int, status text, "
                       "at timestamptz, next_attempt_at timestamptz, last_error text)");
    harness_exec(conn, "CREATE FUNCTION log_attempt() RETURNS trigger LANGUAGE plpgsql AS $$ "
                       "BEGIN INSERT INTO attempt_log VALUES (NEW.id, NEW.attempts, NEW.status, "
                       "now(), NEW.next_attempt_at, NEW.last_error); RETURN NULL; END $$");
    harness_exec(conn, "CREATE TRIGGER log_attempt AFTER UPDATE ON outbox.events FOR EACH ROW "
                       "WHEN (NEW.attempts <> OLD.attempts) EXECUTE FUNCTION log_attempt()");
    relay_test_enqueue(conn, 100);
    big = harness_scalar_text(conn, "INSERT INTO committed SELECT outbox.enqueue('movie', "
                                    "gen_random_uuid(), 'review.logged', "
                                    "jsonb_build_object('fill', repeat('x', 4000))) "
                                    "RETURNING id::text");
    relay_test_enqueue(conn, 100);

    relay_test_env(&env, "BAD_DLQ", "baddlq");
    relay_env_set_int(&env, "OUTBOX_MAX_ATTEMPTS", MAX_ATTEMPTS);
    relay_env_set_int(&env, "OUTBOX_BACKOFF_BASE_MS", BASE_MS);
    relay_env_set(&env, "OUTBOX_BACKOFF_CAP_MS", "300000");
    relay_test_start(&relay, &env, "dlq");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 40000);
    relay_test_stop(&relay, 10000);

    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM outbox.events WHERE id = '%s' AND status = 'dead' "
             "AND attempts = %d AND lease_expiries = 0",
             big, MAX_ATTEMPTS);
    cr_assert_eq(harness_scalar_ll(conn, sql), 1, "dead after exactly %d attempts", MAX_ATTEMPTS);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM outbox.dead_letters WHERE event_id = '%s' AND handler = '' "
             "AND attempts = %d AND reason LIKE '%%jetstream refused%%' AND envelope IS NOT NULL",
             big, MAX_ATTEMPTS);
    cr_assert_eq(harness_scalar_ll(conn, sql), 1, "one dead letter with the broker's reason");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"), 1);
    cr_assert_eq(relay_test_count(conn, "status = 'done' AND attempts = 0"), 200);

    /* Attempt k waited base * 2^(k-1) +-10 % (exact to the ms: same now()), and the
     * next try came when due: never before next_attempt_at, and promptly after it. */
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM attempt_log"), MAX_ATTEMPTS);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM attempt_log WHERE attempts < %d AND status = 'pending' AND "
             "extract(epoch FROM next_attempt_at - at) * 1000 BETWEEN "
             "0.9 * %d * 2 ^ (attempts - 1) - 1 AND 1.1 * %d * 2 ^ (attempts - 1) + 1",
             MAX_ATTEMPTS, BASE_MS, BASE_MS);
    cr_assert_eq(harness_scalar_ll(conn, sql), MAX_ATTEMPTS - 1, "retry delays off schedule");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM attempt_log a JOIN attempt_log p "
                                         "ON p.attempts = a.attempts - 1 "
                                         "WHERE a.at >= p.next_attempt_at "
                                         "AND a.at < p.next_attempt_at + interval '3 s'"),
                 MAX_ATTEMPTS - 1, "a retry came early or late");
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM attempt_log WHERE attempts = %d AND status = 'dead'",
             MAX_ATTEMPTS);
    cr_assert_eq(harness_scalar_ll(conn, sql), 1);

    chk = relay_test_check(conn, "BAD_DLQ");
    cr_assert_eq(chk.stream, 200);
    cr_assert_eq(chk.dead, 1);
    free(big);
    relay_env_fini(&env);
}

/* ---- a row that crashes its relay ------------------------------------------------------ */

enum { CRASH_RELAYS = 3, MAX_LEASE_EXPIRIES = 5 };

Test(bad_rows, dead_letters_a_row_that_crashes_every_relay_and_publishes_the_good_ones)
{
    struct harness_proc relays[CRASH_RELAYS];
    struct relay_env env;
    struct relay_check chk;
    char *poison, sql[512], name[32];
    int crashes = 0, restarts[CRASH_RELAYS] = {0};
    long long deadline;

    relay_test_enqueue(conn, 250);
    poison = harness_scalar_text(conn, "INSERT INTO committed SELECT outbox.enqueue('movie', "
                                       "gen_random_uuid(), 'poison', '{}') RETURNING id::text");
    relay_test_enqueue(conn, 250);
    relay_test_env(&env, "BAD_CRASH", "badcrash");
    relay_env_set(&env, "OUTBOX_TEST_CRASH_ON_EVENT_TYPE", "poison");
    relay_env_set(&env, "OUTBOX_LEASE_SECONDS", "1");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "50");
    for (int i = 0; i < CRASH_RELAYS; i++) {
        snprintf(name, sizeof(name), "crash-%d.%d", i + 1, restarts[i]);
        relay_test_start(&relays[i], &env, name);
    }
    /* A supervisor: whatever dies is counted and started again. */
    snprintf(sql, sizeof(sql), "id = '%s' AND status = 'dead'", poison);
    deadline = harness_now_ms() + 60000;
    while (relay_test_count(conn, sql) == 0 || relay_test_unfinished(conn) > 0) {
        cr_assert_lt(harness_now_ms(), deadline, "not settled: %d crashes, %lld unfinished",
                     crashes, relay_test_unfinished(conn));
        for (int i = 0; i < CRASH_RELAYS; i++) {
            int status = harness_proc_wait(&relays[i], 0);

            if (status != -1) {
                cr_assert_eq(status, 128 + SIGABRT, "relay %d exited with %d", i + 1, status);
                crashes++;
                snprintf(name, sizeof(name), "crash-%d.%d", i + 1, ++restarts[i]);
                relay_test_start(&relays[i], &env, name);
            }
        }
        harness_sleep_ms(10);
    }
    for (int i = 0; i < CRASH_RELAYS; i++) {
        relay_test_stop(&relays[i], 10000);
    }
    cr_log_info("poison row dead-lettered after %d relay crashes", crashes);
    cr_assert_eq(crashes, MAX_LEASE_EXPIRIES, "one crash per lease of the poison row");
    snprintf(sql, sizeof(sql),
             "id = '%s' AND status = 'dead' AND lease_expiries = %d AND attempts = 0 "
             "AND last_error = 'lease_expired_without_outcome'",
             poison, MAX_LEASE_EXPIRIES);
    cr_assert_eq(relay_test_count(conn, sql), 1);
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM outbox.dead_letters WHERE event_id = '%s' "
             "AND reason = 'lease_expired_without_outcome'",
             poison);
    cr_assert_eq(harness_scalar_ll(conn, sql), 1);
    cr_assert_eq(relay_test_count(conn, "status = 'done'"), 500,
                 "every good row is published: %lld done, %lld dead",
                 relay_test_count(conn, "status = 'done'"),
                 relay_test_count(conn, "status = 'dead'"));
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"), 1,
                 "only the poison row is dead-lettered");
    chk = relay_test_check(conn, "BAD_CRASH");
    cr_assert_eq(chk.stream, 500);
    free(poison);
    relay_env_fini(&env);
}
