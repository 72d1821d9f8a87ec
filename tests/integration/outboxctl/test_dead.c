/* SPDX-License-Identifier: MIT */
/*
 * test_dead.c - `outboxctl dead list|requeue|purge` on both backends.
 *
 * A handler fails until it is fixed and its events go to dead_letters
 * (on JetStream the messages only it matched are terminated, the others
 * acked by the handler that succeeded); once fixed, `dead requeue` makes
 * each run exactly once more: one effect per event, no second effect for
 * the handler that was done, attempts back to zero, the requeue recorded.
 * --dry-run shows the same rows and changes nothing. The relay's own dead
 * letters (--relay) are published again, or made due again for the DB
 * feed. purge deletes dead letters, never events. requeue and purge with
 * no filter are refused (exit 2, nothing changed) unless given --all. The
 * effects table has no unique constraint: a handler that ran twice leaves
 * two rows to count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "consume_nats.h"
#include "consume_test.h"
#include "ctl_test.h"
#include "harness.h"
#include "stream_admin_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
    /* Fails while public.switch says broken; records an effect once fixed. */
    harness_exec(conn, "CREATE TABLE public.switch (broken boolean NOT NULL)");
    harness_exec(conn, "INSERT INTO public.switch VALUES (true)");
    harness_exec(conn, "CREATE FUNCTION public.fragile(env jsonb) RETURNS void LANGUAGE plpgsql "
                       "AS $$BEGIN IF (SELECT broken FROM public.switch) THEN RAISE EXCEPTION "
                       "'fragile is broken'; END IF; INSERT INTO public.effects (event_id, "
                       "handler) VALUES ((env->>'id')::uuid, 'fragile'); END$$");
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ctl_dead, .init = setup, .fini = teardown, .timeout = 200);

static long long
count_of(const char *sql)
{
    return harness_scalar_ll(conn, sql);
}

/* The group drained: every message settled (JetStream), every row finished (DB). */
static int
settled(const struct consume_group *g)
{
    return g->jetstream ? consume_test_nats_drained(g->stream, g->consumer)
                        : relay_test_unfinished(conn) == 0;
}

static void
requeue_runs_each_dead_letter_exactly_once_more(const char *bus)
{
    struct consume_group g;
    struct consume_nats_terms terms = {0};
    struct harness_proc consumer;
    struct ctl_run r;
    char good[240], fragile[160], err[512] = "";
    uint64_t seqs[16];

    consume_group_init(&g, bus, "DEAD", NULL);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "2");
    relay_env_set(&g.env, "OUTBOX_BACKOFF_BASE_MS", "100");
    snprintf(good, sizeof(good),
             "good@%s.movie.review.logged=sql:INSERT INTO public.effects (event_id, handler) "
             "VALUES (($1->>'id')::uuid, 'good')",
             g.prefix);
    snprintf(fragile, sizeof(fragile), "fragile@%s.movie.>=sql:SELECT public.fragile($1)",
             g.prefix);
    if (g.jetstream) {
        cr_assert_eq(consume_nats_terms_watch(&terms, harness_nats_url(), g.stream, g.consumer, err,
                                              sizeof(err)),
                     0, "%s", err);
    }
    relay_test_enqueue_sized(conn, 3, "review.logged", 0); /* good and fragile */
    relay_test_enqueue_sized(conn, 3, "solo", 0);          /* fragile alone: terminated */
    consume_test_start(&consumer, &g.env, "dead-1", (const char *const[]){good, fragile, NULL});
    HARNESS_WAIT_UNTIL(count_of("SELECT count(*) FROM outbox.dead_letters") == 6 && settled(&g),
                       30000);
    cr_assert_eq(consume_test_handled(conn, "good"), 3);
    if (g.jetstream) {
        cr_assert_eq(consume_nats_terms_take(&terms, 2000, seqs, 16), 3,
                     "the messages fragile alone matched are terminated");
        consume_nats_terms_close(&terms);
    }

    ctl_expect(&r, &g.env, 0, (const char *const[]){"dead", "list", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "dead_letter"), 6);
    cr_assert_str_eq(ctl_str(ctl_line(&r, "dead_letter", 0), "handler"), "fragile");
    cr_assert_eq(ctl_int(ctl_line(&r, "dead_letter", 0), "attempts"), 2);
    ctl_run_fini(&r);
    ctl_expect(&r, &g.env, 0,
               (const char *const[]){"dead", "list", "--event-type", "solo", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "dead_letter"), 3, "--event-type filters");
    ctl_run_fini(&r);

    /* A dry run names all six and changes nothing. */
    ctl_expect(&r, &g.env, 0,
               (const char *const[]){"dead", "requeue", "--all", "--dry-run", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "would_requeue"), 6);
    ctl_run_fini(&r);
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.dead_letters WHERE requeued_at IS NULL"), 6);
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.processed_events WHERE dead_at IS NOT NULL"),
                 6);

    harness_exec(conn, "UPDATE public.switch SET broken = false");
    ctl_expect(&r, &g.env, 0,
               (const char *const[]){"dead", "requeue", "--handler", "fragile", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "requeued"), 6, "%s", r.out);
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "count"), 6);
    cr_assert_str_eq(ctl_str(ctl_line(&r, "requeued", 0), "via"),
                     g.jetstream ? "stream" : "outbox");
    ctl_run_fini(&r);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "fragile") == 6 &&
                           count_of("SELECT count(*) FROM outbox.processed_events WHERE handler = "
                                    "'fragile' AND status = 'done'") == 6 &&
                           settled(&g),
                       30000);
    consume_test_stop(&consumer, 10000);

    /* Exactly once: fragile ran once per event, good never again, attempts back to 0. */
    cr_assert_eq(consume_test_effect_dups(conn, "fragile"), 0);
    cr_assert_eq(consume_test_effect_dups(conn, "good"), 0);
    cr_assert_eq(consume_test_handled(conn, "good"), 3);
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.processed_events WHERE handler = 'fragile' "
                          "AND attempts = 0"),
                 6, "a requeue gives the attempts back");
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.dead_letters WHERE requeued_at IS NOT NULL "
                          "AND requeue_count = 1"),
                 6);

    /* Nothing waits any more; purge removes dead letters and leaves events alone. */
    ctl_expect(&r, &g.env, 0, (const char *const[]){"dead", "requeue", "--all", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "requeued"), 0);
    ctl_run_fini(&r);
    ctl_expect(&r, &g.env, 0,
               (const char *const[]){"dead", "purge", "--event-type", "solo", "--dry-run", NULL});
    cr_assert(strstr(r.out, "would purge 3 dead letters") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.dead_letters"), 6);
    ctl_expect(&r, &g.env, 0, (const char *const[]){"dead", "purge", "--all", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "purged"), 6);
    ctl_run_fini(&r);
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.dead_letters"), 0);
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.events"), g.jetstream ? 6 : 6);
    consume_group_fini(&g);
}

Test(ctl_dead, requeue_runs_each_dead_letter_exactly_once_more_on_jetstream)
{
    requeue_runs_each_dead_letter_exactly_once_more("jetstream");
}

Test(ctl_dead, requeue_runs_each_dead_letter_exactly_once_more_on_the_db_backend)
{
    requeue_runs_each_dead_letter_exactly_once_more("db");
}

/* A stream that refuses messages larger than `max_msg_size` (0: no limit), made or updated. */
static void
stream_with_max_msg_size(const char *name, const char *prefix, int32_t max_msg_size, int update)
{
    char subject[64], err[256];
    struct stream_admin_spec spec = {.name = name,
                                     .subjects = subject,
                                     .duplicates_s = 3600,
                                     .max_age_s = 7LL * 86400,
                                     .max_msg_size = max_msg_size,
                                     .update = update};

    snprintf(subject, sizeof(subject), "%s.>", prefix);
    cr_assert_eq(stream_admin_put(harness_nats_url(), &spec, err, sizeof(err)), 0, "%s", err);
}

Test(ctl_dead, requeue_of_the_relays_dead_letters_publishes_them_again)
{
    struct relay_env env;
    struct harness_proc relay, consumer;
    struct relay_env cenv;
    struct ctl_run r;

    /* The stream refuses the events, so the relay spends its attempts and gives up. */
    stream_with_max_msg_size("DEAD_RELAY", "deadrelay", 64, 0);
    relay_test_env(&env, "DEAD_RELAY", "deadrelay");
    relay_env_set(&env, "OUTBOX_MAX_ATTEMPTS", "2");
    relay_env_set(&env, "OUTBOX_BACKOFF_BASE_MS", "100");
    relay_test_enqueue(conn, 4);
    relay_test_start(&relay, &env, "dead-relay");
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'dead'") == 4, 30000);
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.dead_letters WHERE handler = ''"), 4);

    stream_with_max_msg_size("DEAD_RELAY", "deadrelay", 0, 1); /* fixed */
    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "requeue", "--relay", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "requeued"), 4, "%s", r.out);
    cr_assert_str_eq(ctl_str(ctl_line(&r, "requeued", 0), "via"), "outbox");
    cr_assert(json_is_true(json_object_get(ctl_line(&r, "requeued", 0), "row_reset")));
    ctl_run_fini(&r);
    HARNESS_WAIT_UNTIL(relay_test_count(conn, "status = 'done' AND attempts = 0") == 4, 30000);
    relay_test_stop(&relay, 10000);
    relay_test_check(conn, "DEAD_RELAY"); /* each once in the stream */

    /* The DB backend: a row quarantined by its lease expiries comes back to the DB feed. */
    harness_exec(conn, "TRUNCATE public.committed");
    relay_test_enqueue(conn, 1);
    harness_exec(conn, "WITH d AS (UPDATE outbox.events SET status = 'dead', lease_expiries = 5, "
                       "next_attempt_at = 'infinity', last_error = 'lease_expired_without_outcome' "
                       "WHERE status = 'pending' RETURNING id, envelope) INSERT INTO "
                       "outbox.dead_letters (event_id, handler, envelope, reason) SELECT id, '', "
                       "envelope, 'lease_expired_without_outcome' FROM d");
    consume_test_env(&cenv, "db", "UNUSED", "unused", "G_DEADDB");
    consume_test_start(&consumer, &cenv, "dead-db",
                       (const char *const[]){CONSUME_EFFECT("h"), NULL});
    ctl_expect(&r, &cenv, 0, (const char *const[]){"dead", "requeue", "--relay", NULL});
    ctl_run_fini(&r);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "h") == 1, 30000);
    consume_test_stop(&consumer, 10000);
    consume_test_expect_exactly_once(conn, "h");
    relay_env_fini(&cenv);
    relay_env_fini(&env);
}

Test(ctl_dead, bad_filters_are_refused_by_name_before_any_server_is_reached)
{
    struct relay_env env;
    struct ctl_run r;

    relay_env_init(&env, "postgresql://127.0.0.1:1/none", "nats://127.0.0.1:1", "X", "x");
    ctl_expect(&r, &env, 2, (const char *const[]){"dead", "list", "--since", "yesterday", NULL});
    cr_assert(strstr(r.out, "--since \"yesterday\"") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 2, (const char *const[]){"dead", "requeue", "--id", "42", NULL});
    cr_assert(strstr(r.out, "--id \"42\" is not a UUID") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 2, (const char *const[]){"dead", "purge", "--limit", "0", NULL});
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 2, (const char *const[]){"dead", "bury", NULL});
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 2,
               (const char *const[]){"dead", "list", "--relay", "--handler", "h", NULL});
    ctl_run_fini(&r);
    relay_env_fini(&env);
}

/* Dead letters of two handlers and the relay, written directly (their events need not exist). */
static void
insert_dead_letters(void)
{
    harness_exec(conn, "INSERT INTO outbox.dead_letters (event_id, handler, reason, attempts) "
                       "SELECT gen_random_uuid(), h, 'broken', 3 FROM unnest(ARRAY['billing', "
                       "'mailer', '']) AS h, generate_series(1, 2)");
}

Test(ctl_dead, purge_and_requeue_without_a_filter_are_refused_unless_given_all)
{
    struct relay_env env;
    struct ctl_run r;
    const char *const verbs[] = {"purge", "requeue"};

    insert_dead_letters();
    relay_test_env(&env, "DEAD_ALL", "deadall");
    for (int i = 0; i < 2; i++) {
        ctl_expect(&r, &env, 2, (const char *const[]){"dead", verbs[i], "--json", NULL});
        cr_assert(strstr(r.out, "give a filter") != NULL && strstr(r.out, "--all") != NULL, "%s",
                  r.out);
        ctl_run_fini(&r);
        /* --limit caps a run, it chooses nothing: still refused. */
        ctl_expect(&r, &env, 2, (const char *const[]){"dead", verbs[i], "--limit", "1", NULL});
        ctl_run_fini(&r);
        ctl_expect(&r, &env, 2,
                   (const char *const[]){"dead", verbs[i], "--all", "--handler", "billing", NULL});
        cr_assert(strstr(r.out, "--all and a filter exclude each other") != NULL, "%s", r.out);
        ctl_run_fini(&r);
    }
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.dead_letters WHERE requeued_at IS NULL"), 6,
                 "a refused run changes nothing");
    ctl_expect(&r, &env, 2, (const char *const[]){"dead", "list", "--all", NULL});
    ctl_run_fini(&r);

    /* A filter, then --all. */
    ctl_expect(&r, &env, 0,
               (const char *const[]){"dead", "purge", "--handler", "billing", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "purged"), 2, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "purge", "--all", "--dry-run", NULL});
    cr_assert(strstr(r.out, "would purge 4 dead letters") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.dead_letters"), 4);
    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "purge", "--all", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "purged"), 4, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(count_of("SELECT count(*) FROM outbox.dead_letters"), 0);
    relay_env_fini(&env);
}

/*
 * A reason is whatever a handler wrote: a line break or a quote in it must
 * not start a line or a field of outboxctl's text output (logfmt: one
 * record a line).
 */
Test(ctl_dead, a_reason_with_line_breaks_and_quotes_stays_one_escaped_field)
{
    struct relay_env env;
    struct ctl_run r;
    int lines = 0;

    harness_exec(conn, "INSERT INTO outbox.dead_letters (event_id, handler, reason, attempts) "
                       "VALUES (gen_random_uuid(), 'mailer', E'boom\\nforged', 3), "
                       "(gen_random_uuid(), 'mailer', E'tab\\there \"quoted\"', 3)");
    relay_test_env(&env, "DEAD_NL", "deadnl");
    ctl_expect(&r, &env, 0, (const char *const[]){"dead", "list", "--handler", "mailer", NULL});
    for (const char *p = r.out; (p = strchr(p, '\n')) != NULL; p++) {
        lines++;
    }
    cr_assert(strstr(r.out, "reason=\"boom\\nforged\"") != NULL,
              "a line break is not escaped in its field:\n%s", r.out);
    cr_assert(strstr(r.out, "reason=\"tab\\there \\\"quoted\\\"\"") != NULL,
              "a tab or a quote is not escaped in its field:\n%s", r.out);
    cr_assert_eq(lines, 3, "two dead letters and the summary, not %d lines:\n%s", lines, r.out);
    ctl_run_fini(&r);
    relay_env_fini(&env);
}
