/* SPDX-License-Identifier: MIT */
/*
 * test_consumer_examples.c - the consumer examples (examples/go-consumer,
 * node-consumer) against real servers: `outboxd relay` publishes 2,000
 * events, one of them poisoned (its effect fails every time), to the run's
 * nats-server; two replicas of the example pull them from one durable
 * consumer, each event's effect in a transaction with outbox.try_claim(),
 * and one replica is SIGKILLed mid-run, holding messages it fetched (some
 * with their effects committed, unacked). The first 200 messages are then
 * published again under new Nats-Msg-Ids (as a requeue or a relay's
 * republish past the duplicate window would): the same events, delivered
 * twice. Passes only if
 *   - every other event has exactly one effect (one `effects` row), and
 *     there are no others: nothing lost, nothing twice;
 *   - the poisoned event has none, and is in outbox.dead_letters for the
 *     example's handler with attempts = max_attempts;
 *   - the killed replica had committed effects before it died, and the run
 *     was not over then (the kill is mid-run);
 *   - the other replica stops cleanly on SIGTERM;
 *   - each aggregate's effects ran in its events' order: the schema is
 *     ordered, as `outboxctl migrate` makes a new one, and the ordinary
 *     events belong to AGGREGATES aggregates, so the killed replica's
 *     events come back after later ones of their aggregates were
 *     delivered to the other, which must wait for them.
 * The examples are built by run_example.sh (once per build tree).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_nats.h"
#include "harness.h"
#include "relay_check.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* 2,000 events, one poisoned; the poisoned one is dead after MAX_ATTEMPTS failures. */
enum { EVENTS = 2000, MAX_ATTEMPTS = 3 };

/* The ordinary events' aggregates: about 20 events each, in turn. */
enum { AGGREGATES = 100 };

/* Messages of the stream published a second time, from the first. */
enum { DUPLICATES = 200 };

/* The killed replica is killed once it has committed this many effects. */
enum { KILL_AFTER_EFFECTS = 100 };

/* Seconds before a killed replica's unsettled messages are delivered again. */
#define ACK_WAIT_SECONDS "3"

#define HANDLER "effects"

#define BY_A "SELECT count(*) FROM effects WHERE replica = 'a'"

/* The examples create it too (IF NOT EXISTS); the test polls it before they run. */
#define EFFECTS_TABLE                                                                      \
    "CREATE TABLE effects (event_id uuid NOT NULL, replica text NOT NULL, at timestamptz " \
    "NOT NULL DEFAULT clock_timestamp())"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh_ordered();
    relay_test_prepare(conn);
    harness_exec(conn, EFFECTS_TABLE);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(consumer_examples, .init = setup, .fini = teardown, .timeout = 240);

/* The example's settings: this test's database, stream and consumer; short waits. */
static void
replica_env(struct relay_env *env, const char *stream, const char *prefix, const char *replica)
{
    memset(env, 0, sizeof(*env));
    cr_assert_eq(relay_env_set(env, "DATABASE_URL", harness_db_url()), 0);
    relay_env_set(env, "OUTBOX_NATS_URL", harness_nats_url());
    relay_env_set(env, "OUTBOX_STREAM", stream);
    relay_env_set(env, "OUTBOX_SUBJECT_PREFIX", prefix);
    relay_env_set(env, "OUTBOX_CONSUMER_NAME", "effects");
    relay_env_set(env, "OUTBOX_ACK_WAIT_SECONDS", ACK_WAIT_SECONDS);
    relay_env_set_int(env, "OUTBOX_MAX_ATTEMPTS", MAX_ATTEMPTS);
    relay_env_set(env, "OUTBOX_BACKOFF_BASE_MS", "100");
    relay_env_set(env, "OUTBOX_BACKOFF_CAP_MS", "1000");
    relay_env_set(env, "HANDLER", HANDLER);
    relay_env_set(env, "BATCH_SIZE", "20");
    cr_assert_eq(relay_env_set(env, "REPLICA", replica), 0);
}

/* Starts replica `replica` of examples/<example> through run_example.sh. */
static void
replica_start(struct harness_proc *p, const char *example, const char *stream, const char *prefix,
              const char *replica)
{
    char *argv[] = {OBX_SOURCE_DIR "/tests/integration/examples/run_example.sh", (char *)example,
                    OBX_BIN_DIR "/../examples", NULL};
    struct relay_env env;

    replica_env(&env, stream, prefix, replica);
    harness_spawn(p, argv, env.vars);
    relay_env_fini(&env);
}

/* Waits for the replica's "ready" line (the first build included); fails if it exits or hangs. */
static void
replica_wait_ready(struct harness_proc *p, const char *what)
{
    long long deadline_ms = harness_now_ms() + 150000;

    while (!harness_proc_log_contains(p, "\"ready\":")) {
        if (harness_proc_wait(p, 0) != -1 || harness_now_ms() > deadline_ms) {
            char *log = harness_proc_log(p);

            cr_assert_fail("%s %s before it was ready:\n%s", what,
                           p->pid == 0 ? "exited" : "timed out", log);
        }
        harness_sleep_ms(10);
    }
}

/* Commits the events: EVENTS - 1 ordinary ones around the poisoned one; returns its id. */
static char *
enqueue_events(void)
{
    static const char ordinary[] =
        "WITH e AS (INSERT INTO committed SELECT outbox.enqueue('movie', "
        "('00000000-0000-4000-8000-' || lpad(to_hex(g %% %d), 12, '0'))::uuid, "
        "'review.logged', jsonb_build_object('n', g)) FROM generate_series(1, %d) AS g "
        "RETURNING 1) SELECT count(*) FROM e";
    char sql[512];
    char *poisoned;

    snprintf(sql, sizeof(sql), ordinary, AGGREGATES, EVENTS / 2);
    cr_assert_eq(harness_scalar_ll(conn, sql), EVENTS / 2);
    poisoned = harness_scalar_text(
        conn, "WITH e AS (INSERT INTO committed SELECT outbox.enqueue('movie', "
              "gen_random_uuid(), 'review.logged', '{\"poison\": true}') RETURNING id) "
              "SELECT id::text FROM e");
    cr_assert_not_null(poisoned);
    snprintf(sql, sizeof(sql), ordinary, AGGREGATES, EVENTS - EVENTS / 2 - 1);
    cr_assert_eq(harness_scalar_ll(conn, sql), EVENTS - EVENTS / 2 - 1);
    return poisoned;
}

/* A count over the effects and the ledger, with `poisoned` as $1. */
static long long
count_with(const char *sql, const char *poisoned)
{
    const char *params[] = {poisoned};
    PGresult *res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
    long long n;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", sql, PQresultErrorMessage(res));
    n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return n;
}

/* 1 once every message is settled: none waits for a delivery, none for an ack. */
static int
consumer_settled(const char *stream)
{
    struct consume_nats_state st;
    char err[256];

    if (consume_nats_state_read(harness_nats_url(), stream, "effects", &st, err, sizeof(err)) !=
        0) {
        return 0;
    }
    return st.num_pending == 0 && st.num_ack_pending == 0;
}

/* 1 once every ordinary event has an effect, the poisoned one is dead and the stream settled. */
static int
run_over(const char *stream, const char *poisoned)
{
    return count_with("SELECT count(DISTINCT event_id) FROM effects WHERE event_id <> $1::uuid",
                      poisoned) == EVENTS - 1 &&
           count_with("SELECT count(*) FROM outbox.dead_letters WHERE event_id = $1::uuid "
                      "AND handler = '" HANDLER "'",
                      poisoned) == 1 &&
           consumer_settled(stream);
}

/* Publishes the stream's first DUPLICATES messages again, once the relay has published all. */
static void
publish_duplicates(const char *stream)
{
    uint64_t last = 0;
    size_t published = 0;
    char err[256] = "";

    HARNESS_WAIT_UNTIL(consume_nats_last_seq(harness_nats_url(), stream, &last, err, sizeof(err)) ==
                               0 &&
                           last >= EVENTS,
                       30000);
    cr_assert_eq(consume_nats_republish(harness_nats_url(), stream, 1, DUPLICATES, 1, &published,
                                        err, sizeof(err)),
                 0, "republishing: %s", err);
    cr_assert_eq(published, DUPLICATES);
}

static void
check_effects(const char *example, const char *poisoned)
{
    long long missing = count_with(
        "SELECT count(*) FROM committed AS c WHERE c.id <> $1::uuid AND (SELECT count(*) "
        "FROM effects AS e WHERE e.event_id = c.id) <> 1",
        poisoned);

    cr_assert_eq(missing, 0, "%s: %lld events without exactly one effect", example, missing);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM effects"), EVENTS - 1,
                 "%s: effects besides one per ordinary event", example);
    cr_assert_eq(count_with("SELECT count(*) FROM effects WHERE event_id = $1::uuid", poisoned), 0,
                 "%s: the poisoned event has an effect", example);
    cr_assert_eq(count_with("SELECT attempts FROM outbox.dead_letters WHERE event_id = $1::uuid "
                            "AND handler = '" HANDLER "'",
                            poisoned),
                 MAX_ATTEMPTS, "%s: the poisoned event's dead letter", example);
    /* Every ordinary event is numbered, and its effect is its aggregate's n-th. */
    cr_assert_eq(count_with("SELECT count(*) FROM outbox.events WHERE aggregate_seq IS NULL "
                            "AND id <> $1::uuid",
                            poisoned),
                 0, "%s: events without a number: the schema is not ordered", example);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM (SELECT e.aggregate_seq, "
                                         "row_number() OVER (PARTITION BY e.aggregate_id "
                                         "ORDER BY f.at) AS k FROM effects AS f "
                                         "JOIN outbox.events AS e ON e.id = f.event_id) AS x "
                                         "WHERE x.aggregate_seq <> x.k"),
                 0, "%s: effects out of their aggregate's order", example);
}

/*
 * The relay publishes, replicas a and b consume; a is SIGKILLed once it
 * has committed KILL_AFTER_EFFECTS effects; b finishes the run.
 */
static void
example_consumes(const char *example)
{
    struct relay_env env;
    struct harness_proc relay, a, b;
    char stream[64], prefix[64], *poisoned;
    long long done_at_kill, by_a;

    snprintf(stream, sizeof(stream), "CONSUMER_%s", strncmp(example, "go", 2) == 0 ? "GO" : "NODE");
    snprintf(prefix, sizeof(prefix), "consumer%s", strncmp(example, "go", 2) == 0 ? "go" : "node");
    relay_test_env(&env, stream, prefix);
    relay_test_start(&relay, &env, "consumer-examples-1");
    replica_start(&a, example, stream, prefix, "a");
    replica_start(&b, example, stream, prefix, "b");
    replica_wait_ready(&a, "replica a");
    replica_wait_ready(&b, "replica b");

    poisoned = enqueue_events();
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, BY_A) >= KILL_AFTER_EFFECTS, 30000);
    harness_proc_kill(&a);
    done_at_kill = harness_scalar_ll(conn, "SELECT count(DISTINCT event_id) FROM effects");
    cr_log_info("%s: replica a killed with %lld of %d effects done", example, done_at_kill,
                EVENTS - 1);
    cr_assert_lt(done_at_kill, EVENTS - 1, "%s: the run was over before the kill", example);
    publish_duplicates(stream);

    HARNESS_WAIT_UNTIL(run_over(stream, poisoned), 90000);
    relay_test_assert_running(&b, "replica b");
    cr_assert_eq(harness_proc_stop(&b, 10000), 0, "%s: replica b on SIGTERM:\n%s", example,
                 harness_proc_log(&b));
    by_a = harness_scalar_ll(conn, BY_A);
    cr_log_info("%s: effects by a %lld, by b %lld", example, by_a, (long long)(EVENTS - 1) - by_a);
    cr_assert_geq(by_a, KILL_AFTER_EFFECTS, "%s: the killed replica's effects", example);
    check_effects(example, poisoned);

    relay_test_stop(&relay, 10000);
    relay_env_fini(&env);
    free(poisoned);
}

Test(consumer_examples, go_runs_each_effect_once_across_a_killed_replica_and_dead_letters_poison)
{
    example_consumes("go-consumer");
}

Test(consumer_examples, node_runs_each_effect_once_across_a_killed_replica_and_dead_letters_poison)
{
    example_consumes("node-consumer");
}
