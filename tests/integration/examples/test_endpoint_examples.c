/* SPDX-License-Identifier: MIT */
/*
 * test_endpoint_examples.c - the HTTP endpoint examples
 * (examples/python/endpoint.py, examples/java/ReviewEndpoint.java) behind
 * `outboxd consume`'s http: handler, against real servers: 2,000 events
 * written with outbox.enqueue(), one of them poisoned; `outboxd relay`
 * publishes them; two `outboxd consume` replicas of one group and handler
 * ("reviews") each POST to their own endpoint replica (two processes),
 * which run the effect (a review_feed row) with outbox.try_claim() under
 * the endpoint's own handler name. One endpoint replica is SIGKILLed once
 * it has handled some events (requests in flight die with it: an effect
 * may commit with its answer lost, and the daemon sends it again); its
 * consumer finds the connection refused (an outage: paused, its events
 * given back to the stream, no attempt spent), and the replica is then
 * restarted on its port, as a supervisor would. At the end 200 handled
 * events are POSTed again, as retries after lost answers would be. Passes
 * only if
 *   - every event but the poisoned one has exactly one effect row, and no
 *     row belongs to another event (the retries and the kill added none);
 *   - the poisoned event has no effect, and is in outbox.dead_letters for
 *     the daemon's handler with attempts = OUTBOX_MAX_ATTEMPTS, alone;
 *   - the daemon's ledger says done for each other event, the endpoint's
 *     claims say done for each, and the stream is drained: nothing lost;
 *   - both replicas handled events, the killed one before its kill.
 * The schema is ordered, as `outboxctl migrate` makes a new one.
 * With an endpoint that ignores try_claim's result, the replayed events
 * (and the kill's lost answers) leave duplicate effects and it fails.
 * The examples are built and run by run_example.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define MAX_ATTEMPTS_TEXT "3"

enum {
    EVENTS = 2000,          /* one of them poisoned */
    MAX_ATTEMPTS = 3,       /* OUTBOX_MAX_ATTEMPTS, MAX_ATTEMPTS_TEXT */
    KILL_AFTER = 150,       /* effects of the first replica before it is killed */
    REPLAYED = 200,         /* handled events POSTed again at the end (the LIMIT below) */
    RUN_TIMEOUT_MS = 40000, /* the whole run, kill and outage included */
};

static PGconn *conn;
static char dir[64];

static void
setup(void)
{
    conn = harness_pg_connect_fresh_ordered();
    relay_test_prepare(conn);
    harness_exec(conn, "CREATE TABLE review_feed (event_id uuid NOT NULL, endpoint text NOT NULL, "
                       "aggregate_id uuid NOT NULL, event_type text NOT NULL, "
                       "payload jsonb NOT NULL, at timestamptz NOT NULL DEFAULT now())");
    consume_test_dir_make(dir);
}

static void
teardown(void)
{
    consume_test_dir_remove(dir);
    PQfinish(conn);
    conn = NULL;
}

TestSuite(endpoint_examples, .init = setup, .fini = teardown, .timeout = 180);

/* A number from SQL, with `arg` as $1 (NULL: none). */
static long long
ll(const char *sql, const char *arg)
{
    return arg != NULL ? consume_test_ll(conn, sql, arg) : harness_scalar_ll(conn, sql);
}

/* 1,999 reviews and one poisoned event, recorded in `committed`; `poison` gets its id. */
static void
write_events(char poison[40])
{
    PGresult *res;

    cr_assert_eq(harness_scalar_ll(conn, "WITH e AS (INSERT INTO committed "
                                         "SELECT outbox.enqueue('movie', gen_random_uuid(), "
                                         "'review.logged', jsonb_build_object('review', g, "
                                         "'stars', g % 5 + 1)) "
                                         "FROM generate_series(1, 1999) AS g RETURNING 1) "
                                         "SELECT count(*) FROM e"),
                 EVENTS - 1);
    res = PQexec(conn, "INSERT INTO committed SELECT outbox.enqueue('movie', gen_random_uuid(), "
                       "'review.logged', '{\"poison\": true}') RETURNING id::text");
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    snprintf(poison, 40, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
}

/* Starts endpoint replica `name` of `lang` on `port` (0: a free one); returns its port. */
static int
endpoint_start(struct harness_proc *p, const char *lang, const char *name, const char *handler,
               int port)
{
    char *argv[] = {OBX_SOURCE_DIR "/tests/integration/examples/run_example.sh", (char *)lang,
                    OBX_BIN_DIR "/../examples", "endpoint", NULL};
    char env_url[1024], env_name[64], env_handler[64], env_port[32];
    char *env[] = {env_url, env_name, env_handler, env_port, NULL};
    const char *at;
    char *log = NULL;

    snprintf(env_url, sizeof(env_url), "DATABASE_URL=%s", harness_db_url());
    snprintf(env_name, sizeof(env_name), "ENDPOINT_NAME=%s", name);
    snprintf(env_handler, sizeof(env_handler), "ENDPOINT_HANDLER=%s", handler);
    snprintf(env_port, sizeof(env_port), "PORT=%d", port);
    port = 0;
    harness_spawn(p, argv, env);
    for (int waited = 0; port == 0 && waited < 60000; waited += 50) {
        free(log);
        log = harness_proc_log(p);
        at = strstr(log, "{\"listening\": ");
        if (at != NULL && strchr(at, '}') != NULL) {
            port = (int)strtol(at + strlen("{\"listening\": "), NULL, 10);
        } else {
            cr_assert_eq(harness_proc_wait(p, 50), -1, "endpoint %s exited:\n%s", name, log);
        }
    }
    cr_assert_gt(port, 0, "endpoint %s never listened:\n%s", name, log);
    free(log);
    return port;
}

/* Starts `outboxd consume` replica `name`, handler "reviews" POSTing to `port`. */
static void
consumer_start(struct harness_proc *p, struct relay_env *env, const char *name, int port)
{
    char spec[128];
    const char *const handlers[] = {spec, NULL};

    snprintf(spec, sizeof(spec), "reviews=http:http://127.0.0.1:%d/events", port);
    consume_test_start(p, env, name, handlers);
}

/* 1 once every event is settled: 1,999 done for "reviews", the poisoned one dead. */
static int
settled(void)
{
    return ll("SELECT count(*) FROM outbox.processed_events WHERE handler = $1 "
              "AND status = 'done'",
              "reviews") == EVENTS - 1 &&
           ll("SELECT count(*) FROM outbox.dead_letters WHERE handler = $1", "reviews") == 1;
}

/*
 * POSTs REPLAYED handled events to `port` again, each with the headers the
 * daemon sends and the envelope it sent (outbox.events keeps it in mark
 * mode), with curl; every answer must be a 2xx.
 */
static void
replay_handled(int port)
{
    char cfg_path[128], url[128];
    FILE *cfg;
    PGresult *res;
    struct harness_proc p;
    char *argv[] = {"curl", "--silent", "--show-error", "--config", cfg_path, NULL};
    char *log;
    int status, ok = 0;

    snprintf(cfg_path, sizeof(cfg_path), "%s/replay.curl", dir);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/events", port);
    res =
        PQexecParams(conn,
                     "SELECT e.id::text, e.envelope::text FROM outbox.events AS e "
                     "WHERE e.id IN (SELECT event_id FROM review_feed) ORDER BY random() LIMIT 200",
                     0, NULL, NULL, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
    cr_assert_eq(PQntuples(res), REPLAYED);
    cfg = fopen(cfg_path, "w");
    cr_assert_not_null(cfg);
    for (int i = 0; i < PQntuples(res); i++) {
        char body_path[128];
        FILE *body;

        snprintf(body_path, sizeof(body_path), "%s/replay-%d.json", dir, i);
        body = fopen(body_path, "w");
        cr_assert_not_null(body);
        fputs(PQgetvalue(res, i, 1), body);
        fclose(body);
        fprintf(cfg,
                "%surl = \"%s\"\noutput = \"/dev/null\"\nwrite-out = \"status=%%{http_code}\\n\"\n"
                "header = \"ce-specversion: 1.0\"\nheader = \"ce-id: %s\"\n"
                "header = \"Idempotency-Key: %s\"\nheader = \"Content-Type: application/json\"\n"
                "data-binary = \"@%s\"\n",
                i > 0 ? "next\n" : "", url, PQgetvalue(res, i, 0), PQgetvalue(res, i, 0),
                body_path);
    }
    fclose(cfg);
    PQclear(res);
    harness_spawn(&p, argv, NULL);
    status = harness_proc_wait(&p, 30000);
    log = harness_proc_log(&p);
    for (const char *at = log; (at = strstr(at, "status=2")) != NULL; at++) {
        ok++;
    }
    cr_assert_eq(status, 0, "curl exited %d:\n%s", status, log);
    cr_assert_eq(ok, REPLAYED, "%d of %d replayed events answered 2xx:\n%s", ok, REPLAYED, log);
    free(log);
}

/* Effect rows of `endpoint` (a replica's name). */
static long long
effects_of(const char *endpoint)
{
    return ll("SELECT count(*) FROM review_feed WHERE endpoint = $1", endpoint);
}

static void
endpoints_run(const char *lang, const char *handler)
{
    struct consume_group g;
    struct harness_proc ep[2], consumer[2];
    char poison[40], name[3][32], tag[16];
    int port[2];
    long long dup_ids, bad, t0 = harness_now_ms();

    write_events(poison);
    for (int i = 0; i < 2; i++) {
        snprintf(name[i], sizeof(name[i]), "%s-%d", lang, i + 1);
        port[i] = endpoint_start(&ep[i], lang, name[i], handler, 0);
    }
    cr_log_info("%s: endpoints listening after %lld ms", lang, harness_now_ms() - t0);
    snprintf(tag, sizeof(tag), "ep%s", lang);
    consume_group_init(&g, "jetstream", tag, NULL);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", MAX_ATTEMPTS_TEXT);
    relay_env_set(&g.env, "OUTBOX_BACKOFF_BASE_MS", "100");
    relay_env_set(&g.env, "OUTBOX_BACKOFF_CAP_MS", "400");
    consumer_start(&consumer[0], &g.env, "consume-1", port[0]);
    consumer_start(&consumer[1], &g.env, "consume-2", port[1]);
    HARNESS_WAIT_UNTIL((harness_sleep_ms(20), effects_of(name[0]) + effects_of(name[1]) > 0),
                       RUN_TIMEOUT_MS);
    cr_log_info("%s: first effect at %lld ms", lang, harness_now_ms() - t0);

    HARNESS_WAIT_UNTIL((harness_sleep_ms(20), effects_of(name[0]) >= KILL_AFTER), RUN_TIMEOUT_MS);
    harness_proc_kill(&ep[0]); /* SIGKILL mid-run: requests in flight die with it */
    cr_log_info("%s: replica 1 killed after %lld effects (replica 2: %lld), at %lld ms", lang,
                effects_of(name[0]), effects_of(name[1]), harness_now_ms() - t0);
    /* Its consumer finds it gone (an outage: paused, no attempt spent); then it is restarted. */
    HARNESS_WAIT_UNTIL((harness_sleep_ms(20),
                        harness_proc_log_contains(&consumer[0], "cannot reach its endpoint")),
                       RUN_TIMEOUT_MS);
    snprintf(name[2], sizeof(name[2]), "%s-1-restarted", lang);
    cr_assert_eq(endpoint_start(&ep[0], lang, name[2], handler, port[0]), port[0]);
    cr_log_info("%s: replica 1 restarted at %lld ms", lang, harness_now_ms() - t0);

    HARNESS_WAIT_UNTIL((harness_sleep_ms(200), settled()), RUN_TIMEOUT_MS);
    HARNESS_WAIT_UNTIL(consume_test_nats_drained(g.stream, g.consumer), 10000);
    cr_log_info("%s: settled at %lld ms", lang, harness_now_ms() - t0);
    replay_handled(port[1]);
    cr_log_info("%s: replayed at %lld ms", lang, harness_now_ms() - t0);

    /* Exactly once: one effect row per event but the poisoned one, none for anything else. */
    dup_ids = ll("SELECT count(*) FROM (SELECT event_id FROM review_feed GROUP BY event_id "
                 "HAVING count(*) > 1) AS d",
                 NULL);
    cr_assert_eq(dup_ids, 0, "%s: %lld events have more than one effect", lang, dup_ids);
    bad = ll("SELECT count(*) FROM committed AS c WHERE c.id <> $1::uuid "
             "AND NOT EXISTS (SELECT FROM review_feed AS f WHERE f.event_id = c.id)",
             poison);
    cr_assert_eq(bad, 0, "%s: %lld events lost (no effect)", lang, bad);
    cr_assert_eq(ll("SELECT count(*) FROM review_feed", NULL), EVENTS - 1, "%s: effect rows", lang);
    cr_assert_eq(ll("SELECT count(*) FROM review_feed AS f WHERE NOT EXISTS "
                    "(SELECT FROM committed AS c WHERE c.id = f.event_id)",
                    NULL),
                 0, "%s: effects of events never committed", lang);
    cr_assert_eq(ll("SELECT count(*) FROM review_feed WHERE event_id = $1::uuid", poison), 0,
                 "%s: the poisoned event has an effect", lang);

    /* The poisoned event: dead for the daemon's handler, after every attempt; nothing else. */
    cr_assert_eq(ll("SELECT coalesce(max(attempts), -1) FROM outbox.dead_letters "
                    "WHERE event_id = $1::uuid AND handler = 'reviews'",
                    poison),
                 MAX_ATTEMPTS, "%s: the poisoned event's dead letter", lang);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.dead_letters WHERE event_id = $1::uuid "
                    "AND reason LIKE '%500%' AND reason LIKE '%poisoned%'",
                    poison),
                 1, "%s: the dead letter's reason is the endpoint's 500 and its body", lang);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.dead_letters", NULL), 1,
                 "%s: dead letters besides the poisoned event", lang);

    /* The endpoint's own claims: done once each, as the effects. */
    cr_assert_eq(ll("SELECT count(*) FROM outbox.processed_events WHERE handler = $1 "
                    "AND status = 'done'",
                    handler),
                 EVENTS - 1, "%s: the endpoint's claims done", lang);
    cr_assert_geq(effects_of(name[0]), KILL_AFTER, "%s: effects of the killed replica", lang);
    cr_assert_gt(effects_of(name[1]), 0, "%s: the surviving replica handled nothing", lang);
    cr_log_info("%s: replica 1 %lld effects, replica 2 %lld, replica 1 restarted %lld", lang,
                effects_of(name[0]), effects_of(name[1]), effects_of(name[2]));

    for (int i = 0; i < 2; i++) {
        consume_test_assert_running(&consumer[i], "a consumer");
        consume_test_stop(&consumer[i], 10000);
    }
    harness_proc_kill(&ep[0]);
    harness_proc_kill(&ep[1]);
    consume_group_fini(&g);
}

Test(endpoint_examples, python_endpoint_runs_each_effect_once_through_a_replica_kill)
{
    endpoints_run("python", "py-reviews");
}

Test(endpoint_examples, java_endpoint_runs_each_effect_once_through_a_replica_kill)
{
    endpoints_run("java", "java-reviews");
}
