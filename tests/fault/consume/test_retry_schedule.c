/* SPDX-License-Identifier: MIT */
/*
 * test_retry_schedule.c - FAULTS.md T27, shortened for CI: a sql: handler
 * fails transiently for chosen events 3 and 8 times, and always for a
 * third, while nats-server is SIGKILLed for 6 s in the middle of the
 * retries. From the trigger log of every ledger write (database time):
 * each failure plans its retry base * 2^(k-1) capped (+-10 % jitter, as
 * documented), no retry runs before it is due, the always-failing event is
 * dead-lettered exactly at OUTBOX_MAX_ATTEMPTS, and the outage adds no
 * attempt: each event's attempts equal its handler failures exactly.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = chaos_begin(consume_test_prepare, 1); /* nats-server is killed */
}

static void
teardown(void)
{
    chaos_end(&conn);
}

TestSuite(retry_schedule, .init = setup, .fini = teardown, .timeout = 180);

enum { MAX_ATTEMPTS = 10, BASE_MS = 200, CAP_MS = 1600, OUTAGE_MS = 6000 };

static char *
enqueue_failing(int fail_times)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "WITH e AS (INSERT INTO public.committed SELECT outbox.enqueue('movie', "
             "gen_random_uuid(), 'review.logged', jsonb_build_object('fail', %d)) RETURNING id) "
             "SELECT id::text FROM e",
             fail_times);
    return harness_scalar_text(conn, sql);
}

static long long
about(const char *sql, const char *event_id)
{
    return consume_test_ll(conn, sql, event_id);
}

/*
 * Failure k of `event_id` (k = 1, 2, ...): planned delay (next_attempt_at -
 * now() of the failing transaction) must be min(base * 2^(k-1), cap) +-10 %;
 * the next claim never comes before it was due. Returns how late it came.
 */
static long long
expect_retry_on_schedule(const char *event_id, int k)
{
    char sql[1200];
    long long expected_ms = (long long)BASE_MS << (k - 1), planned_ms, late_ms;

    expected_ms = expected_ms > CAP_MS ? CAP_MS : expected_ms;
    if (k >= MAX_ATTEMPTS) { /* dead: no retry planned */
        cr_assert_eq(about("SELECT count(*) FROM public.ledger_log WHERE event_id = $1::uuid "
                           "AND attempts = 10 AND dead_at IS NOT NULL AND next_attempt_at IS NULL",
                           event_id),
                     1, "failure %d of %s did not dead-letter it", k, event_id);
        return 0;
    }
    snprintf(sql, sizeof(sql),
             "SELECT round(extract(epoch FROM next_attempt_at - tx_now) * 1000)::bigint "
             "FROM public.ledger_log WHERE handler = 'flaky' AND event_id = '%s' "
             "AND attempts = %d AND owner_token IS NULL ORDER BY seq LIMIT 1",
             event_id, k);
    planned_ms = harness_scalar_ll(conn, sql);
    cr_assert(planned_ms >= expected_ms * 9 / 10 && planned_ms <= expected_ms * 11 / 10 + 5,
              "failure %d of %s planned a retry in %lld ms, not %lld +-10 %%", k, event_id,
              planned_ms, expected_ms);
    snprintf(sql, sizeof(sql),
             "SELECT round(extract(epoch FROM c.at - f.next_attempt_at) * 1000)::bigint "
             "FROM public.ledger_log f, LATERAL (SELECT at FROM public.ledger_log c "
             "WHERE c.handler = f.handler AND c.event_id = f.event_id AND c.seq > f.seq "
             "AND (c.owner_token IS NOT NULL OR (c.status = 'done' AND c.old_owner_token IS NULL)) "
             "ORDER BY c.seq LIMIT 1) c "
             "WHERE f.handler = 'flaky' AND f.event_id = '%s' AND f.attempts = %d "
             "AND f.owner_token IS NULL ORDER BY f.seq LIMIT 1",
             event_id, k);
    late_ms = harness_scalar_ll(conn, sql);
    cr_assert_geq(late_ms, 0, "retry %d of %s ran %lld ms before it was due", k, event_id,
                  -late_ms);
    /* Late by the outage at most (and a reconnect), else within a second. */
    cr_assert_leq(late_ms, OUTAGE_MS + 10000, "retry %d of %s ran %lld ms after it was due", k,
                  event_id, late_ms);
    return late_ms;
}

Test(retry_schedule, t27_retries_follow_the_schedule_in_database_time_and_an_outage_adds_none)
{
    const int fails[] = {3, 8, 99};
    enum { EVENTS = sizeof(fails) / sizeof(fails[0]) };
    char *ids[EVENTS];
    char flaky[200];
    struct consume_group g;
    struct harness_proc consumer;
    long long latest = 0, runs;

    consume_group_init(&g, "jetstream", "T27", NULL);
    harness_exec(conn, "CREATE FUNCTION public.flaky(env jsonb) RETURNS void LANGUAGE plpgsql AS "
                       "$$DECLARE tries integer; BEGIN SELECT attempts INTO tries FROM "
                       "outbox.processed_events WHERE event_id = (env->>'id')::uuid AND "
                       "handler = 'flaky'; IF coalesce(tries, 0) < (env->'payload'->>'fail')"
                       "::integer THEN RAISE EXCEPTION 'flaky still broken after % tries', "
                       "tries; END IF; INSERT INTO public.effects (event_id, handler) VALUES "
                       "((env->>'id')::uuid, 'flaky'); END$$");
    snprintf(flaky, sizeof(flaky), "flaky@%s.movie.review.logged=sql:SELECT public.flaky($1)",
             g.prefix);
    relay_env_set_int(&g.env, "OUTBOX_MAX_ATTEMPTS", MAX_ATTEMPTS);
    relay_env_set_int(&g.env, "OUTBOX_BACKOFF_BASE_MS", BASE_MS);
    relay_env_set_int(&g.env, "OUTBOX_BACKOFF_CAP_MS", CAP_MS);
    for (int i = 0; i < EVENTS; i++) {
        ids[i] = enqueue_failing(fails[i]);
    }
    consume_test_start(&consumer, &g.env, "t27", (const char *const[]){flaky, NULL});
    /* In the middle of the retries: the first event is done by ~1.4 s, the others are not. */
    HARNESS_WAIT_UNTIL(about("SELECT count(*) FROM outbox.processed_events WHERE event_id = "
                             "$1::uuid AND attempts >= 4",
                             ids[1]) == 1,
                       30000);
    harness_nats_kill(SIGKILL);
    /* Not waiting for a condition: the outage lasts this long whatever the consumer does. */
    harness_sleep_ms(OUTAGE_MS);
    harness_nats_start();
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn,
                                         "SELECT count(*) FROM outbox.processed_events "
                                         "WHERE status = 'done' OR dead_at IS NOT NULL") == EVENTS,
                       60000);
    HARNESS_WAIT_UNTIL(consume_test_nats_drained(g.stream, g.consumer), 30000);
    consume_test_assert_running(&consumer, "the consumer (an outage must not need it)");
    consume_test_stop(&consumer, 10000);

    for (int i = 0; i < EVENTS; i++) {
        int failures = fails[i] < MAX_ATTEMPTS ? fails[i] : MAX_ATTEMPTS;

        for (int k = 1; k <= failures; k++) {
            long long late = expect_retry_on_schedule(ids[i], k);

            latest = late > latest ? late : latest;
        }
        /* The outage adds nothing: attempts are the handler's failures, exactly. */
        cr_assert_eq(about("SELECT attempts FROM outbox.processed_events WHERE event_id = "
                           "$1::uuid",
                           ids[i]),
                     failures, "event failing %d times has other attempts", fails[i]);
        /* Runs: claims to run (a token), and the last success's claim straight to done. */
        runs = about("SELECT count(*) FROM public.ledger_log WHERE event_id = $1::uuid "
                     "AND (owner_token IS NOT NULL OR (status = 'done' AND old_owner_token IS "
                     "NULL))",
                     ids[i]);
        if (runs != failures + (fails[i] < MAX_ATTEMPTS)) {
            char sql[512];

            snprintf(sql, sizeof(sql),
                     "SELECT string_agg(format('%%s %%s a=%%s tok=%%s old=%%s', seq, status, "
                     "attempts, owner_token IS NOT NULL, old_owner_token IS NOT NULL), E'\n' "
                     "ORDER BY seq) FROM public.ledger_log WHERE event_id = '%s'",
                     ids[i]);
            cr_assert_fail("event failing %d times was claimed %lld times:\n%s", fails[i], runs,
                           harness_scalar_text(conn, sql));
        }
    }
    cr_log_info("T27: retries of events failing 3, 8 and always (max %d) on schedule; the "
                "latest retry ran %lld ms after it was due (outage %d ms)",
                MAX_ATTEMPTS, latest, OUTAGE_MS);
    cr_assert_geq(latest, OUTAGE_MS / 2, "no retry was held up by the outage: it proved nothing");
    cr_assert_eq(about("SELECT count(*) FROM outbox.dead_letters WHERE event_id = $1::uuid AND "
                       "attempts = 10",
                       ids[2]),
                 1, "the always-failing event is not dead-lettered at exactly max attempts");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"), 1);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects"), 2);
    for (int i = 0; i < EVENTS; i++) {
        free(ids[i]);
    }
    consume_group_fini(&g);
}
