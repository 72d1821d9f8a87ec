/* SPDX-License-Identifier: MIT */
/*
 * test_data_subject.c - `outboxctl export` and `erase --data-subject`: export
 * prints the subject's queued and retained rows and dead letters, and only
 * those; erase leaves nothing of the subject in any table (rows, dead
 * letters, handler errors that quoted its payload; the erasures log keeps
 * a SHA-256) and every row of the other subjects exactly as it was, and
 * reports the messages the stream still holds of the subject (by recorded
 * sequence, and with --scan-stream also those of rows pruned before).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "consume_test.h"
#include "ctl_test.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
    /* Fails quoting the payload, as handlers do: personal data in last_error. */
    harness_exec(conn, "CREATE FUNCTION public.leaky(env jsonb) RETURNS void LANGUAGE plpgsql AS "
                       "$$BEGIN RAISE EXCEPTION 'cannot use %', env->'payload'->>'secret'; END$$");
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ctl_subject, .init = setup, .fini = teardown, .timeout = 180);

static void
enqueue_for(const char *subject, int n)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "INSERT INTO public.committed SELECT outbox.enqueue('movie', gen_random_uuid(), "
             "'review.logged', jsonb_build_object('secret', '%s-secret'), data_subject => '%s') "
             "FROM generate_series(1, %d)",
             subject, subject, n);
    harness_exec(conn, sql);
}

/* Everything of `subject` in the tables, as one digest (its rows, dead letters, ledger rows). */
static char *
digest_of(const char *subject)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "SELECT md5(coalesce((SELECT string_agg(e::text, ',' ORDER BY e.id) FROM "
             "outbox.events e WHERE e.data_subject = '%s'), '') || coalesce((SELECT "
             "string_agg(d::text, ',' ORDER BY d.event_id, d.handler) FROM outbox.dead_letters d "
             "WHERE d.envelope->>'data_subject' = '%s'), '') || coalesce((SELECT "
             "string_agg(p::text, ',' ORDER BY p.event_id, p.handler) FROM "
             "outbox.processed_events p JOIN outbox.events e ON e.id = p.event_id WHERE "
             "e.data_subject = '%s'), ''))",
             subject, subject, subject);
    return harness_scalar_text(conn, sql);
}

/* Rows of any outbox table that still mention `needle`. */
static long long
mentions(const char *needle)
{
    char sql[1024];

    snprintf(sql, sizeof(sql),
             "SELECT (SELECT count(*) FROM outbox.events e WHERE e::text LIKE '%%%s%%') + "
             "(SELECT count(*) FROM outbox.dead_letters d WHERE d::text LIKE '%%%s%%') + "
             "(SELECT count(*) FROM outbox.processed_events p WHERE p::text LIKE '%%%s%%') + "
             "(SELECT count(*) FROM outbox.erasures x WHERE x::text LIKE '%%%s%%')",
             needle, needle, needle, needle);
    return harness_scalar_ll(conn, sql);
}

Test(ctl_subject, erase_leaves_nothing_of_the_subject_and_everything_of_the_others)
{
    struct consume_group g;
    struct harness_proc consumer;
    struct ctl_run r;
    char leaky[160], *b_before, *b_after;
    json_t *s;
    size_t i;
    json_t *line;

    consume_group_init(&g, "jetstream", "ERASE", NULL);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "1");
    snprintf(leaky, sizeof(leaky), "leaky@%s.movie.>=sql:SELECT public.leaky($1)", g.prefix);
    enqueue_for("acct-A", 5);
    enqueue_for("acct-B", 5);
    enqueue_for("acct-C", 3);
    consume_test_start(&consumer, &g.env, "erase-1",
                       (const char *const[]){CONSUME_EFFECT("good"), leaky, NULL});
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "good") == 13 &&
                           harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters") ==
                               13,
                       30000);
    consume_test_stop(&consumer, 10000);
    relay_test_stop(&g.relay, 10000); /* what follows stays queued */
    enqueue_for("acct-A", 2);
    enqueue_for("acct-B", 2);
    /* acct-C's rows were pruned (prune mode, or retention) before the request came. */
    harness_exec(conn, "DELETE FROM outbox.events WHERE data_subject = 'acct-C'");
    cr_assert_gt(mentions("A-secret"), 0, "the handler errors must quote the payload");
    b_before = digest_of("acct-B");

    ctl_expect(&r, &g.env, 0, (const char *const[]){"export", "--data-subject", "acct-A", NULL});
    cr_assert_eq(ctl_count(&r, "event"), 7);
    cr_assert_eq(ctl_count(&r, "dead_letter"), 5);
    json_array_foreach(r.lines, i, line)
    {
        json_t *env = json_object_get(line, "envelope");

        cr_assert_str_eq(ctl_str(env, "data_subject"), "acct-A");
    }
    cr_assert(strstr(r.out, "acct-B") == NULL, "export leaked another subject:\n%s", r.out);
    ctl_run_fini(&r);

    ctl_expect(&r, &g.env, 0,
               (const char *const[]){"erase", "--data-subject", "acct-A", "--dry-run", NULL});
    cr_assert(strstr(r.out, "would erase 7 events, 5 dead letters") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    cr_assert_eq(relay_test_count(conn, "data_subject = 'acct-A'"), 7, "a dry run changed rows");

    ctl_expect(&r, &g.env, 0,
               (const char *const[]){"erase", "--data-subject", "acct-A", "--json", NULL});
    s = ctl_line(&r, "summary", 0);
    cr_assert_eq(ctl_int(s, "events"), 7);
    cr_assert_eq(ctl_int(s, "dead_letters"), 5);
    cr_assert_eq(ctl_int(s, "ledger_rows"), 5);
    cr_assert_eq(ctl_int(s, "stream_messages"), 5, "the stream holds the 5 published: %s", r.out);
    cr_assert_eq(ctl_int(s, "stream_max_age_seconds"), 604800);
    cr_assert_not_null(ctl_str(ctl_line(&r, "stream_message", 0), "expires_by"));
    cr_assert(strstr(r.out, "erasure done") != NULL, "the erasure is logged: %s", r.out);
    ctl_run_fini(&r);

    cr_assert_eq(mentions("acct-A"), 0, "a table still mentions the subject");
    cr_assert_eq(mentions("A-secret"), 0, "a table still holds the subject's payload");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.erasures WHERE "
                                         "subject_sha256 = encode(sha256('acct-A'), 'hex') AND "
                                         "events = 7 AND dead_letters = 5 AND stream_messages = 5"),
                 1);
    b_after = digest_of("acct-B");
    cr_assert_str_eq(b_after, b_before, "another subject's rows changed");
    cr_assert_eq(relay_test_count(conn, "data_subject = 'acct-B'"), 7);

    /* Rows pruned before the request: only a scan of the stream finds their messages. */
    ctl_expect(&r, &g.env, 0,
               (const char *const[]){"erase", "--data-subject", "acct-C", "--json", NULL});
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "stream_messages"), 0);
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "dead_letters"), 3);
    ctl_run_fini(&r);
    ctl_expect(&r, &g.env, 0,
               (const char *const[]){"erase", "--data-subject", "acct-C", "--scan-stream", "--json",
                                     NULL});
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "stream_messages"), 3, "%s", r.out);
    ctl_run_fini(&r);
    free(b_after);
    b_after = digest_of("acct-B");
    cr_assert_str_eq(b_after, b_before);
    free(b_after);
    free(b_before);
    relay_env_fini(&g.relay_env);
    relay_env_fini(&g.env);
}
