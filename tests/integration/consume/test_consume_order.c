/* SPDX-License-Identifier: MIT */
/*
 * test_consume_order.c - `outboxd consume` runs each aggregate's events in
 * sequence order per handler, whatever order the feed delivers them in
 * (issue 22 item 4), on both backends: events delivered before their
 * predecessor are parked and acked, and run right after it; two replicas
 * over many aggregates keep every aggregate's order; a replica killed
 * between n's done and n+1's run leaves n+1 to another replica's sweep; a
 * skipped gap is gone past; a handler started after an aggregate had
 * events does not wait for predecessors it will never be given; unordered
 * events are left alone.
 *
 * The feed's order is upset on purpose. Relays and the DB feed hand out an
 * aggregate's events from its head, in order, so the test lies to them: in
 * the writer's transaction an event is recorded as published (published_at
 * set) while it stays pending and not due, and the rest of its aggregate
 * goes out first; a statement sent on a connection of its own puts it back
 * (unpublished, due) after the hold, and it goes out last. That is the
 * delivery the consumer's check exists for: a broker that does not keep a
 * key's order across a shared consumer, naks and redeliveries.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "ctl_test.h"
#include "harness.h"
#include "http_get.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static char dir[64];

static void
setup(void)
{
    consume_test_suite_begin(&conn, dir);
    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    harness_exec(conn, "CREATE TABLE public.held (id uuid PRIMARY KEY, hold int NOT NULL)");
    /* Every park, kept: parked rows go once they ran. */
    harness_exec(conn, "CREATE TABLE public.parked_log (handler text, event_id uuid, "
                       "aggregate_seq bigint)");
    harness_exec(conn, "CREATE FUNCTION public.log_park() RETURNS trigger LANGUAGE plpgsql AS "
                       "$$BEGIN INSERT INTO public.parked_log VALUES (NEW.handler, NEW.event_id, "
                       "NEW.aggregate_seq); RETURN NEW; END$$");
    harness_exec(conn, "CREATE TRIGGER log_park AFTER INSERT ON outbox.parked_events "
                       "FOR EACH ROW EXECUTE FUNCTION public.log_park()");
}

/* Connections each running one hold's release (pg_sleep, then the update). */
enum { MAX_HOLDS = 4 };
static PGconn *releasers[MAX_HOLDS];
static int holds;

static void
teardown(void)
{
    for (int i = 0; i < holds; i++) {
        PGresult *res;

        while ((res = PQgetResult(releasers[i])) != NULL) {
            PQclear(res);
        }
        PQfinish(releasers[i]);
    }
    holds = 0;
    consume_test_suite_end(&conn, dir);
}

TestSuite(consume_order, .init = setup, .fini = teardown, .timeout = 180);

static const char *const one_effect[] = {CONSUME_EFFECT("audit"), NULL};

/* A hold that is never released. */
#define HOLD_FOR_EVER (-1)

/*
 * In the writer's open transaction: holds back every event it wrote
 * numbered `held_seq` for `hold_ms` (HOLD_FOR_EVER: never given), so the
 * rest of its aggregate goes out first. Only this transaction's rows (their
 * business rows' xmin): rows an earlier one committed may be under a relay's
 * update, and taking them too could deadlock with it.
 */
static void
hold_back(int held_seq, int hold_ms)
{
    char sql[768];
    int hold = holds;

    snprintf(sql, sizeof(sql),
             "WITH h AS (UPDATE outbox.events SET published_at = now(), "
             "next_attempt_at = 'infinity' WHERE aggregate_seq = %d AND published_at IS NULL "
             "AND id IN (SELECT c.id FROM public.committed c WHERE c.xmin::text = "
             "(pg_current_xact_id()::text::bigint %% 4294967296)::text) "
             "RETURNING id) INSERT INTO public.held SELECT id, %d FROM h",
             held_seq, hold);
    harness_exec(conn, sql);
    if (hold_ms == HOLD_FOR_EVER) {
        return;
    }
    cr_assert_lt(holds, MAX_HOLDS);
    releasers[holds] = PQconnectdb(harness_db_url());
    cr_assert_eq(PQstatus(releasers[holds]), CONNECTION_OK, "%s", PQerrorMessage(releasers[holds]));
    /* Sent now, it waits for the writer's commit (the held rows are locked till then). */
    snprintf(sql, sizeof(sql),
             "SELECT pg_sleep(%d / 1000.0); UPDATE outbox.events e SET published_at = NULL, "
             "next_attempt_at = now() FROM public.held h WHERE h.hold = %d AND e.id = h.id",
             hold_ms, hold);
    cr_assert_eq(PQsendQuery(releasers[holds], sql), 1, "%s", PQerrorMessage(releasers[holds]));
    holds++;
}

/*
 * Commits `per` events for each of `aggs` new aggregates in one transaction,
 * holding back every event numbered `held_seq` (0: none) for `hold_ms`.
 */
static void
enqueue_ordered(int aggs, int per, int held_seq, int hold_ms)
{
    char sql[768];

    harness_exec(conn, "BEGIN");
    snprintf(sql, sizeof(sql),
             "INSERT INTO public.committed SELECT outbox.enqueue('order', a.id, 'changed', "
             "'{}') FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, %d)) AS a, "
             "generate_series(1, %d)",
             aggs, per);
    harness_exec(conn, sql);
    if (held_seq > 0) {
        hold_back(held_seq, hold_ms);
    }
    harness_exec(conn, "COMMIT");
}

/* Effects of `handler` whose aggregate_seq is not the next of their aggregate's. */
static long long
out_of_order(const char *handler)
{
    return consume_test_ll(conn,
                           "SELECT count(*) FROM (SELECT e.aggregate_seq, row_number() OVER "
                           "(PARTITION BY e.aggregate_id ORDER BY f.seq) AS k "
                           "FROM public.effects f JOIN outbox.events e ON e.id = f.event_id "
                           "WHERE f.handler = $1 AND e.aggregate_seq IS NOT NULL) AS x "
                           "WHERE x.aggregate_seq <> x.k",
                           handler);
}

static long long
parks(void)
{
    return harness_scalar_ll(conn, "SELECT count(*) FROM public.parked_log");
}

/* The consumers have registered `handler`: its order starts from here. */
static void
wait_registered(const char *handler)
{
    HARNESS_WAIT_UNTIL(consume_test_ll(conn,
                                       "SELECT count(*) FROM outbox.handler_baselines "
                                       "WHERE handler = $1",
                                       handler) == 1,
                       30000);
}

/*
 * An exec: handler (external: claim, run, done) that appends each envelope
 * it runs as a line. Its children run side by side (in_flight 8), so each
 * line is written under a lock, or two would interleave.
 */
static const char *const sql_and_exec[] = {
    CONSUME_EFFECT("audit"),
    "ext=exec:flock \"$CONSUME_DIR/ext.lock\" sh -c 'cat >> \"$CONSUME_DIR/ext.log\"; "
    "echo >> \"$CONSUME_DIR/ext.log\"'",
    NULL};

/* Where the value of `key` starts in one line of JSON (past its quote, for a string); or NULL. */
static const char *
json_value(const char *line, const char *key)
{
    char quoted[64];
    const char *p;

    snprintf(quoted, sizeof(quoted), "\"%s\"", key);
    p = strstr(line, quoted);
    if (p == NULL) {
        return NULL;
    }
    p += strlen(quoted);
    p += strspn(p, " :");
    return *p == '"' ? p + 1 : p;
}

/*
 * The exec: handler's runs, read back: how many ordered envelopes it ran,
 * and how many came other than right after their aggregate's previous one.
 */
static void
ext_runs(long long *ordered, long long *out_of_seq)
{
    enum { MAX_AGGS = 64 };
    char path[128], line[4096], ids[MAX_AGGS][37];
    long long last[MAX_AGGS];
    size_t aggs = 0;
    FILE *f;

    *ordered = *out_of_seq = 0;
    snprintf(path, sizeof(path), "%s/ext.log", dir);
    f = fopen(path, "r");
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *id = json_value(line, "aggregate_id"), *seq = json_value(line, "aggregate_seq");
        size_t k = 0;

        if (id == NULL || seq == NULL) {
            continue;
        }
        while (k < aggs && strncmp(ids[k], id, 36) != 0) {
            k++;
        }
        if (k == aggs && aggs < MAX_AGGS) {
            snprintf(ids[aggs], sizeof(ids[aggs]), "%.36s", id);
            last[aggs++] = 0;
        }
        if (k < aggs) {
            long long n = strtoll(seq, NULL, 10);

            *out_of_seq += n != last[k] + 1;
            last[k] = n;
        }
        (*ordered)++;
    }
    fclose(f);
}

static void
early_events_park_then_run_in_order(const char *bus, const char *tag)
{
    enum { AGGS = 5, PER = 8, UNORDERED = 20 };
    struct consume_group g;
    struct harness_proc p;
    long long ext_ordered = 0, ext_out_of_seq = 0;

    consume_group_init(&g, bus, tag, dir);
    consume_test_start(&p, &g.env, "order-1", sql_and_exec);
    wait_registered("audit");
    enqueue_ordered(AGGS, PER, 1, 4000);
    /* Unordered events beside them: no aggregate, no number, no park. */
    harness_exec(conn, "INSERT INTO public.committed SELECT outbox.enqueue('order', "
                       "'00000000-0000-0000-0000-000000000000', 'noted', '{}') "
                       "FROM generate_series(1, 20)");
    /* Everything but each aggregate's first is delivered first, and parked. */
    HARNESS_WAIT_UNTIL(parks() >= 2 * AGGS * (PER - 1), 30000);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects e JOIN "
                                         "outbox.events v ON v.id = e.event_id "
                                         "WHERE v.aggregate_seq IS NOT NULL"),
                 0, "no event ran before its aggregate's first");
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == AGGS * PER + UNORDERED &&
                           (ext_runs(&ext_ordered, &ext_out_of_seq), ext_ordered == AGGS * PER),
                       60000);
    if (g.jetstream) {
        HARNESS_WAIT_UNTIL(consume_test_nats_drained(g.stream, g.consumer), 30000);
    } else {
        HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    }
    consume_test_assert_running(&p, "the consumer");
    consume_test_stop(&p, 10000);
    cr_assert_eq(out_of_order("audit"), 0, "effects out of sequence order");
    ext_runs(&ext_ordered, &ext_out_of_seq);
    cr_assert_eq(ext_out_of_seq, 0, "the exec: handler ran %lld events out of sequence order",
                 ext_out_of_seq);
    cr_assert_eq(ext_ordered, AGGS * PER, "the exec: handler ran each ordered event once");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.parked_events"), 0,
                 "every parked event ran and went");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.parked_log l JOIN "
                                         "outbox.events e ON e.id = l.event_id "
                                         "WHERE e.aggregate_seq IS NULL OR e.aggregate_seq = 1"),
                 0, "only early events park");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.handler_progress "
                                         "WHERE aggregate_id = '00000000-0000-0000-0000-"
                                         "000000000000'"),
                 0, "unordered events keep no progress");
    consume_test_expect_exactly_once(conn, "audit");
    consume_test_expect_nothing_spent(conn);
    consume_group_fini(&g);
}

Test(consume_order, jetstream_early_events_are_parked_acked_and_run_right_after_their_predecessor)
{
    early_events_park_then_run_in_order("jetstream", "EARLY");
}

Test(consume_order, db_early_events_are_parked_acked_and_run_right_after_their_predecessor)
{
    early_events_park_then_run_in_order("db", "EARLY");
}

static void
two_replicas_keep_every_aggregate_in_order(const char *bus, const char *tag)
{
    enum { AGGS = 30, PER = 12 };
    struct consume_group g;
    struct harness_proc p[2];

    consume_group_init(&g, bus, tag, NULL);
    consume_test_start(&p[0], &g.env, "race-1", one_effect);
    consume_test_start(&p[1], &g.env, "race-2", one_effect);
    wait_registered("audit");
    enqueue_ordered(AGGS / 2, PER, 1, 2000); /* half of them with their first held back */
    enqueue_ordered(AGGS / 2, PER, 0, 0);
    enqueue_ordered(AGGS / 2, PER, 5, 1500); /* and some with one in the middle */
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == 3 * (AGGS / 2) * PER, 90000);
    for (int i = 0; i < 2; i++) {
        consume_test_assert_running(&p[i], "a consumer replica");
        consume_test_stop(&p[i], 10000);
    }
    cr_log_info("%s: %lld parks", bus, parks());
    cr_assert_gt(parks(), 0, "the feed's order was upset: some events must have parked");
    cr_assert_eq(out_of_order("audit"), 0, "effects out of sequence order");
    consume_test_expect_exactly_once(conn, "audit");
    consume_test_expect_nothing_spent(conn);
    consume_group_fini(&g);
}

Test(consume_order, jetstream_two_replicas_keep_every_aggregate_in_order)
{
    two_replicas_keep_every_aggregate_in_order("jetstream", "RACE");
}

Test(consume_order, db_two_replicas_keep_every_aggregate_in_order)
{
    two_replicas_keep_every_aggregate_in_order("db", "RACE");
}

/*
 * The replica that runs event 1 aborts right after its ledger commit
 * (OUTBOX_TEST_CRASH_AFTER_LEDGER_COMMIT), before its acks and its sweep:
 * events 2..5, parked and acked earlier, are run by the other replica.
 */
Test(consume_order, jetstream_a_replica_killed_between_done_and_the_next_run_leaves_it_to_a_sweep)
{
    enum { PER = 5 };
    struct consume_group g;
    struct relay_env crash_env;
    struct harness_proc doomed, other;
    char *log;
    int status;

    consume_group_init(&g, "jetstream", "KILL", NULL);
    consume_test_env(&crash_env, "jetstream", g.stream, g.prefix, g.consumer);
    relay_env_set(&crash_env, "OUTBOX_TEST_CRASH_AFTER_LEDGER_COMMIT", "1");
    consume_test_start(&doomed, &crash_env, "doomed", one_effect);
    wait_registered("audit");
    enqueue_ordered(1, PER, 1, 3000);
    HARNESS_WAIT_UNTIL(parks() == PER - 1, 30000);
    /* Event 1 comes; the replica handles it, commits, and aborts. */
    status = harness_proc_wait(&doomed, 30000);
    log = consume_test_log_tail(&doomed, 4000);
    cr_assert(status == 128 + SIGABRT &&
                  strstr(log, "crashing on purpose after the ledger commit") != NULL,
              "status %d: %s", status, log);
    free(log);
    cr_assert_eq(consume_test_handled(conn, "audit"), 1, "only event 1 ran before the crash");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.parked_events"), PER - 1);
    consume_test_start(&other, &g.env, "other", one_effect);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == PER, 30000);
    consume_test_assert_running(&other, "the other replica");
    consume_test_stop(&other, 10000);
    cr_assert_eq(out_of_order("audit"), 0, "effects out of sequence order");
    consume_test_expect_exactly_once(conn, "audit");
    relay_env_fini(&crash_env);
    consume_group_fini(&g);
}

/*
 * The replica whose sweep leased events 2..5 dies before running them: their
 * lease is short (at most 10 s, whatever OUTBOX_LEDGER_LEASE_SECONDS says),
 * so another replica's sweep runs them soon, not half an hour later.
 */
Test(consume_order, jetstream_a_replica_killed_holding_a_sweeps_lease_leaves_it_to_another_soon)
{
    enum { PER = 5 };
    struct consume_group g;
    struct relay_env crash_env;
    struct harness_proc doomed, other;
    long long started;
    int status;

    consume_group_init(&g, "jetstream", "SWEEP", NULL);
    consume_test_env(&crash_env, "jetstream", g.stream, g.prefix, g.consumer);
    relay_env_set(&crash_env, "OUTBOX_TEST_CRASH_AFTER_PARKED_TAKE", "1");
    consume_test_start(&doomed, &crash_env, "doomed", one_effect);
    wait_registered("audit");
    enqueue_ordered(1, PER, 1, 2000);
    status = harness_proc_wait(&doomed, 30000);
    cr_assert_eq(status, 128 + SIGABRT, "the doomed replica must abort after its take (%d)",
                 status);
    cr_assert_eq(consume_test_handled(conn, "audit"), 1, "only event 1 ran before the crash");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.parked_events "
                                         "WHERE leased_until > now()"),
                 PER - 1, "the dead sweep's lease holds events 2..5");
    started = harness_now_ms();
    consume_test_start(&other, &g.env, "other", one_effect);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == PER, 30000);
    cr_log_info("events 2..5 ran %lld ms after the other replica started",
                harness_now_ms() - started);
    consume_test_assert_running(&other, "the other replica");
    consume_test_stop(&other, 10000);
    cr_assert_eq(out_of_order("audit"), 0, "effects out of sequence order");
    consume_test_expect_exactly_once(conn, "audit");
    relay_env_fini(&crash_env);
    consume_group_fini(&g);
}

/* Events 2..5 wait for a 1 that never comes: /metrics shows them parked, and for how long. */
Test(consume_order, db_parked_events_and_the_oldest_ones_wait_are_gauges)
{
    enum { PER = 5 };
    struct consume_group g;
    struct harness_proc p;
    char addr[64], *body;
    int port = http_free_port();
    struct ctl_run r;
    json_t *row;

    consume_group_init(&g, "db", "GAUGE", NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    relay_env_set(&g.env, "OUTBOX_HTTP_ADDR", addr);
    consume_test_start(&p, &g.env, "gauge-1", one_effect);
    wait_registered("audit");
    body = http_wait_metric(port, "outbox_consumer_parked_events{handler=\"audit\"}", 0);
    cr_assert_eq(http_metric(body, "outbox_consumer_parked_events{handler=\"audit\"}"), 0,
                 "nothing parked yet:\n%s", body);
    cr_assert_eq(http_metric(body, "outbox_consumer_oldest_parked_seconds{handler=\"audit\"}"), 0);
    free(body);
    enqueue_ordered(1, PER, 1, HOLD_FOR_EVER);
    body = http_wait_metric(port, "outbox_consumer_parked_events{handler=\"audit\"}", PER - 1);
    cr_assert_eq(http_metric(body, "outbox_consumer_parked_events{handler=\"audit\"}"), PER - 1,
                 "%s", body);
    free(body);
    body = http_wait_metric(port, "outbox_consumer_oldest_parked_seconds{handler=\"audit\"}", 3);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.parked_events"), PER - 1);
    free(body);
    /* status names the aggregate, the handler held, its head and why. */
    ctl_expect(&r, &g.env, 0, (const char *const[]){"status", "--json", NULL});
    row = json_array_get(json_object_get(json_array_get(r.lines, 0), "blocked_aggregates"), 0);
    cr_assert_not_null(row, "%s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(row, "handler")), "audit", "%s", r.out);
    cr_expect_eq(json_integer_value(json_object_get(row, "head_seq")), 1, "%s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(row, "head_status")), "not delivered", "%s",
                     r.out);
    cr_expect_eq(json_integer_value(json_object_get(row, "waiting")), PER - 1, "%s", r.out);
    ctl_run_fini(&r);
    consume_test_assert_running(&p, "the consumer");
    consume_test_stop(&p, 10000);
    consume_group_fini(&g);
}

/*
 * A sweep takes parked events only for a handler that has some: on a
 * schema with ordering off, seconds of sweeps and a drained batch of
 * events make no take (outbox_consumer_parked_takes_total stays 0, and the
 * statement never reached the server: pg_stat_user_tables would not tell
 * the probe from the take, the counter does). Once an event parks, the
 * sweeps take again within a second or two, so the counter counts.
 */
Test(consume_order, db_a_sweep_takes_nothing_where_nothing_is_parked)
{
    enum { PER = 3 };
    struct consume_group g;
    struct harness_proc p;
    char addr[64], *body;
    int port = http_free_port();
    long long parked_at;

    harness_exec(conn, "SELECT outbox.set_ordering(false)");
    consume_group_init(&g, "db", "NOTAKE", NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    relay_env_set(&g.env, "OUTBOX_HTTP_ADDR", addr);
    consume_test_start(&p, &g.env, "notake-1", one_effect);
    harness_exec(conn, "INSERT INTO public.committed SELECT outbox.enqueue('order', "
                       "gen_random_uuid(), 'changed', '{}') FROM generate_series(1, 20)");
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == 20, 30000);
    harness_sleep_ms(3500); /* three sweeps at least */
    body = http_wait_metric(port, "outbox_consumer_fetched_total", 20);
    cr_assert_eq(http_metric(body, "outbox_consumer_parked_takes_total"), 0,
                 "no take on a schema without ordering:\n%s", body);
    free(body);
    /* Ordering on, and an event early: its handler has something parked now. */
    harness_exec(conn, "SELECT outbox.set_ordering(true)");
    wait_registered("audit");
    enqueue_ordered(1, PER, 1, HOLD_FOR_EVER);
    HARNESS_WAIT_UNTIL(parks() == PER - 1, 30000);
    parked_at = harness_now_ms();
    body = http_wait_metric(port, "outbox_consumer_parked_takes_total", 1);
    cr_log_info("the first take came %lld ms after the park", harness_now_ms() - parked_at);
    cr_assert_lt(harness_now_ms() - parked_at, 5000, "the sweeps take soon after a park");
    free(body);
    cr_assert_eq(consume_test_handled(conn, "audit"), 20, "2 and 3 wait for 1");
    consume_test_assert_running(&p, "the consumer");
    consume_test_stop(&p, 10000);
    consume_group_fini(&g);
}

/* Event 2 never comes (held back an hour); once skipped, 3 runs after 1. */
Test(consume_order, db_a_skipped_gap_is_gone_past)
{
    struct consume_group g;
    struct harness_proc p;

    consume_group_init(&g, "db", "SKIP", NULL);
    consume_test_start(&p, &g.env, "skip-1", one_effect);
    wait_registered("audit");
    enqueue_ordered(1, 3, 2, HOLD_FOR_EVER);
    HARNESS_WAIT_UNTIL(parks() == 1 && consume_test_handled(conn, "audit") == 1, 30000);
    harness_sleep_ms(1500); /* a sweep or two: 3 must stay parked */
    cr_assert_eq(consume_test_handled(conn, "audit"), 1, "3 must wait for 2");
    harness_exec(conn, "INSERT INTO outbox.aggregate_skips (aggregate_type, aggregate_id, "
                       "aggregate_seq, event_id) SELECT aggregate_type, aggregate_id, "
                       "aggregate_seq, id FROM outbox.events WHERE aggregate_seq = 2");
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == 2, 30000);
    consume_test_assert_running(&p, "the consumer");
    consume_test_stop(&p, 10000);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.effects f JOIN "
                                         "outbox.events e ON e.id = f.event_id "
                                         "WHERE e.aggregate_seq = 3"),
                 1, "3 ran once 2 was skipped");
    consume_group_fini(&g);
}

/*
 * The aggregate had events 1 to 3 before the handler first started; 1 is
 * never delivered (held back). 2 and 3 must run, not wait for 1 for ever.
 */
Test(consume_order, jetstream_a_new_handler_does_not_wait_for_predecessors_it_is_never_given)
{
    struct consume_group g;
    struct harness_proc p;

    consume_group_init(&g, "jetstream", "LATE", NULL);
    enqueue_ordered(1, 3, 1, HOLD_FOR_EVER);
    harness_sleep_ms(500);
    consume_test_start(&p, &g.env, "late-1", one_effect);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == 2, 30000);
    consume_test_assert_running(&p, "the consumer");
    consume_test_stop(&p, 10000);
    cr_assert_eq(parks(), 0, "nothing waits for event 1");
    consume_group_fini(&g);
}

/*
 * A handler of some event types only (`paid` takes order.paid) is never
 * given the numbers between its events, so they run unordered for it, not
 * parked for ever; `audit`, which takes every event, keeps the order.
 */
Test(consume_order, db_a_handler_of_some_event_types_only_is_not_held_by_the_others)
{
    struct consume_group g;
    struct harness_proc p;
    char paid[512];
    const char *handlers[] = {CONSUME_EFFECT("audit"), paid, NULL};

    consume_group_init(&g, "db", "SOME", NULL);
    snprintf(paid, sizeof(paid),
             "paid@%s.order.paid=sql:INSERT INTO public.effects (event_id, handler) "
             "VALUES (($1->>'id')::uuid, 'paid')",
             g.prefix);
    consume_test_start(&p, &g.env, "some-1", handlers);
    wait_registered("paid");
    harness_exec(conn, "BEGIN");
    harness_exec(conn, "INSERT INTO public.committed SELECT outbox.enqueue('order', a.id, t.t, "
                       "'{}') FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, 3)) "
                       "AS a, unnest(ARRAY['created', 'paid', 'shipped', 'paid']) "
                       "WITH ORDINALITY AS t(t, n) ORDER BY a.id, t.n");
    /* The first paid of each aggregate comes late: audit parks what follows it. */
    hold_back(2, 2000);
    harness_exec(conn, "COMMIT");
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == 12 &&
                           consume_test_handled(conn, "paid") == 6,
                       30000);
    consume_test_assert_running(&p, "the consumer");
    consume_test_stop(&p, 10000);
    cr_assert_eq(out_of_order("audit"), 0, "effects out of sequence order");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM public.parked_log "
                                         "WHERE handler = 'paid'"),
                 0, "paid never waits for events it is not given");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.parked_events"), 0);
    consume_group_fini(&g);
}
