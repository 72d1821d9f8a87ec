/* SPDX-License-Identifier: MIT */
/*
 * test_writer_examples.c - the writer examples (examples/python, go, java,
 * node) against real servers: each writes reviews and their events through
 * outbox.enqueue() and outbox.enqueue_many(), has one event refused, and
 * loses one COMMIT's answer on the way (commit_cutter.h); `outboxd relay`
 * publishes to the run's nats-server. Passes only if
 *   - every event the example reports committed is in the stream exactly
 *     once, and nothing else is (FAULTS.md §1's checker);
 *   - the refused event's review is not in the table, and each committed
 *     step left exactly one review (a lost answer resolved, not guessed);
 *   - the lost COMMIT was resolved as it really ended: committed when the
 *     server got it, aborted (then written again) when it did not.
 * Directly, and through PgBouncer in transaction mode with each client's
 * settings for it (on a pool that moves each transaction to another server
 * connection, where a statement prepared by name would be missing). The
 * examples are built by run_example.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <jansson.h>

#include "commit_cutter.h"
#include "harness.h"
#include "relay_check.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum route { DIRECT, VIA_PGBOUNCER };

/* What each example writes: six reviews with one event each, one with two (enqueue_many). */
enum { STEPS = 7, EVENTS = 8 };

/*
 * PgBouncer hands each transaction to the pool's least recently used server
 * connection (warm_pool() makes four): consecutive transactions of one
 * client land on different ones, as on a busy pool, so a statement a client
 * prepared on the server is gone at its next run, and a client without its
 * pooler setting fails here.
 */
#define PGBOUNCER_BUSY_POOL "server_round_robin = 1\n"
enum { POOL_SERVERS = 4 };

/* What an example printed: one JSON object per line. */
struct example_output {
    size_t steps;  /* committed steps: each wrote one review */
    size_t events; /* event ids they reported */
    char refused_review[64];
    char refused_sqlstate[8];
    char in_doubt[4][16]; /* how each lost COMMIT answer was resolved */
    size_t in_doubt_count;
};

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

TestSuite(writer_examples, .init = setup, .fini = teardown, .timeout = 240);

/* Records a committed step's event ids in `committed`, the checker's C. */
static void
take_step(json_t *line, struct example_output *out)
{
    json_t *ids = json_object_get(line, "event_ids"), *doubt = json_object_get(line, "in_doubt");
    size_t i;
    json_t *v;

    cr_assert(json_is_array(ids) && json_is_array(doubt), "a step line without event_ids/in_doubt");
    json_array_foreach(ids, i, v)
    {
        const char *params[] = {json_string_value(v)};
        PGresult *res = PQexecParams(conn, "INSERT INTO committed VALUES ($1::uuid)", 1, NULL,
                                     params, NULL, NULL, 0);

        cr_assert_eq(PQresultStatus(res), PGRES_COMMAND_OK, "event id %s: %s", params[0],
                     PQresultErrorMessage(res));
        PQclear(res);
        out->events++;
    }
    json_array_foreach(doubt, i, v)
    {
        cr_assert_lt(out->in_doubt_count, 4, "too many lost commits");
        snprintf(out->in_doubt[out->in_doubt_count++], sizeof(out->in_doubt[0]), "%s",
                 json_string_value(v));
    }
    out->steps++;
}

static void
take_line(json_t *line, struct example_output *out)
{
    const char *step = json_string_value(json_object_get(line, "step"));
    const char *review = json_string_value(json_object_get(line, "review_id"));
    const char *state = json_string_value(json_object_get(line, "sqlstate"));

    if (step == NULL) {
        return;
    }
    if (strcmp(step, "refused") != 0) {
        take_step(line, out);
    } else if (review != NULL) { /* the review written before the event was refused */
        snprintf(out->refused_review, sizeof(out->refused_review), "%s", review);
    } else if (state != NULL) {
        snprintf(out->refused_sqlstate, sizeof(out->refused_sqlstate), "%s", state);
    }
}

/* Reads the lines of `log` that are JSON objects; the rest is the example's stderr. */
static void
parse_output(char *log, struct example_output *out)
{
    memset(out, 0, sizeof(*out));
    for (char *line = log; line != NULL && *line != '\0';) {
        char *end = strchr(line, '\n');
        json_t *obj;

        if (end != NULL) {
            *end = '\0';
        }
        obj = line[0] == '{' ? json_loads(line, 0, NULL) : NULL;
        if (json_is_object(obj)) {
            take_line(obj, out);
        }
        json_decref(obj);
        line = end != NULL ? end + 1 : NULL;
    }
}

/* Makes the pool behind `url` open `n` server connections: n transactions at once. */
static void
warm_pool(const char *url, int n)
{
    PGconn *c[POOL_SERVERS];

    for (int i = 0; i < n; i++) {
        c[i] = PQconnectdb(url);
        cr_assert_eq(PQstatus(c[i]), CONNECTION_OK, "%s", PQerrorMessage(c[i]));
        harness_exec(c[i], "BEGIN");
        harness_exec(c[i], "SELECT 1");
    }
    for (int i = 0; i < n; i++) {
        harness_exec(c[i], "COMMIT");
        PQfinish(c[i]);
    }
}

/* Runs run_example.sh for `lang` against `url`; returns its output (malloc'd). */
static char *
run_example(const char *lang, const char *url)
{
    char *argv[] = {OBX_SOURCE_DIR "/tests/integration/examples/run_example.sh", (char *)lang,
                    OBX_BIN_DIR "/../examples", NULL};
    char env_url[1024];
    char *env[] = {env_url, NULL};
    struct harness_proc p;
    int status;
    char *log;

    snprintf(env_url, sizeof(env_url), "DATABASE_URL=%s", url);
    harness_spawn(&p, argv, env);
    status = harness_proc_wait(&p, 200 * 1000);
    if (status == -1) {
        harness_proc_kill(&p);
    }
    log = harness_proc_log(&p);
    cr_log_info("%s example:\n%s", lang, log);
    cr_assert_eq(status, 0, "the %s example exited %d:\n%s", lang, status, log);
    return log;
}

static long long
count_reviews(const char *where_id)
{
    const char *params[] = {where_id};
    PGresult *res =
        PQexecParams(conn,
                     where_id != NULL ? "SELECT count(*) FROM reviews WHERE id = $1::uuid"
                                      : "SELECT count(*) FROM reviews",
                     where_id != NULL ? 1 : 0, NULL, params, NULL, NULL, 0);
    long long n;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return n;
}

static void
check_output(const char *lang, const struct example_output *out, const char *want_fate)
{
    cr_assert_eq(out->steps, STEPS, "%s: %zu committed steps reported, want %d", lang, out->steps,
                 STEPS);
    cr_assert_eq(out->events, EVENTS, "%s: %zu events reported, want %d", lang, out->events,
                 EVENTS);
    cr_assert_str_eq(out->refused_sqlstate, "22023", "%s: the refused event's SQLSTATE", lang);
    cr_assert_neq(out->refused_review[0], '\0', "%s: no refused review id reported", lang);
    cr_assert_eq(count_reviews(out->refused_review), 0,
                 "%s: review %s outlived the event refused in its transaction", lang,
                 out->refused_review);
    cr_assert_eq(count_reviews(NULL), STEPS,
                 "%s: %lld reviews, want one per committed step (a lost commit written twice, "
                 "or an aborted one not again?)",
                 lang, count_reviews(NULL));
    cr_assert_eq(out->in_doubt_count, 1, "%s: %zu lost commits resolved, want the one cut", lang,
                 out->in_doubt_count);
    cr_assert_str_eq(out->in_doubt[0], want_fate, "%s: the lost commit resolved as %s, not %s",
                     lang, out->in_doubt[0], want_fate);
}

/*
 * The example behind a commit cutter (and PgBouncer for VIA_PGBOUNCER),
 * the relay straight to PostgreSQL; then the stream against the database.
 */
static void
example_runs(const char *lang, enum route route)
{
    struct harness_pgbouncer pb;
    struct commit_cutter cut;
    struct relay_env env;
    struct harness_proc relay;
    struct example_output out;
    char stream[64], prefix[64], *url, *log;
    int target = harness_pg_port();
    const char *want_fate = route == DIRECT ? "committed" : "aborted";

    if (route == VIA_PGBOUNCER) {
        target = harness_pgbouncer_start_with(&pb, harness_pg_port(), "transaction",
                                              PGBOUNCER_BUSY_POOL);
        url = harness_db_url_via(target);
        warm_pool(url, POOL_SERVERS);
        free(url);
    }
    cr_assert_gt(
        commit_cutter_start(&cut, target, route == DIRECT ? CUT_AFTER_COMMIT : CUT_BEFORE_COMMIT),
        0, "commit cutter: cannot listen");
    url = harness_db_url_via(cut.port);
    snprintf(stream, sizeof(stream), "EXAMPLE_%s_%d", lang, (int)route);
    snprintf(prefix, sizeof(prefix), "example%s%d", lang, (int)route);
    relay_test_env(&env, stream, prefix);
    relay_test_start(&relay, &env, "examples-1");

    log = run_example(lang, url);
    commit_cutter_stop(&cut);
    cr_assert_eq(cut.cuts, 1, "%s: the example never sent COMMIT", lang);
    parse_output(log, &out);
    check_output(lang, &out, want_fate);

    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);
    cr_assert_eq(relay_test_count(conn, "true"), EVENTS, "%s: outbox rows besides the %d committed",
                 lang, EVENTS);
    cr_assert_eq(relay_test_check(conn, stream).stream, EVENTS,
                 "%s: the stream holds each event once", lang);
    if (route == VIA_PGBOUNCER) {
        harness_pgbouncer_stop(&pb);
    }
    relay_env_fini(&env);
    free(log);
    free(url);
}

Test(writer_examples, python_writes_each_event_once_and_resolves_a_lost_commit_as_committed)
{
    example_runs("python", DIRECT);
}

Test(writer_examples, python_through_pgbouncer_writes_again_after_a_lost_commit_that_aborted)
{
    example_runs("python", VIA_PGBOUNCER);
}

Test(writer_examples, go_writes_each_event_once_and_resolves_a_lost_commit_as_committed)
{
    example_runs("go", DIRECT);
}

Test(writer_examples, go_through_pgbouncer_writes_again_after_a_lost_commit_that_aborted)
{
    example_runs("go", VIA_PGBOUNCER);
}

Test(writer_examples, java_writes_each_event_once_and_resolves_a_lost_commit_as_committed)
{
    example_runs("java", DIRECT);
}

Test(writer_examples, java_through_pgbouncer_writes_again_after_a_lost_commit_that_aborted)
{
    example_runs("java", VIA_PGBOUNCER);
}

Test(writer_examples, node_writes_each_event_once_and_resolves_a_lost_commit_as_committed)
{
    example_runs("node", DIRECT);
}

Test(writer_examples, node_through_pgbouncer_writes_again_after_a_lost_commit_that_aborted)
{
    example_runs("node", VIA_PGBOUNCER);
}
