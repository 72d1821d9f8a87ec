/* SPDX-License-Identifier: MIT */
/*
 * test_clock_skew.c - relays and consumers whose clocks are an hour ahead
 * of the database's, or an hour behind (libfaketime, Debian's faketime
 * package, preloaded into each daemon), shortened for CI.
 *
 * A relay crashes holding claimed rows (the test hook aborts it right after
 * a publish), and skewed relays and consumers then carry a writer's events
 * through two handlers and a handler that fails twice per chosen event.
 * From trigger logs of every lease change on the outbox and of every
 * window claim (database time): every lease and claim lasts
 * OUTBOX_LEASE_SECONDS of database time, no lease is taken over before it
 * ended, the crashed relay's claims are given back after their end and
 * within seconds of it (no early takeover, no stuck rows), and
 * the consumer's retries are planned and run on the backoff schedule in
 * database time. The checker finds nothing lost or repeated, and
 * `outboxctl doctor` run with the skewed clock reports the skew.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "conservation.h"
#include "consume_test.h"
#include "ctl_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

enum { RELAYS = 2, REPLICAS = 2, LEASE_S = 2, BASE_MS = 500 };

static PGconn *conn;

static void
prepare(PGconn *c)
{
    consume_test_prepare(c);
    /* Every change of a row's lease, stamped with the database's clock. */
    harness_exec(c, "CREATE TABLE public.lease_log (seq bigserial PRIMARY KEY, "
                    "at timestamptz NOT NULL, id uuid, old_token uuid, new_token uuid, "
                    "old_until timestamptz, new_until timestamptz)");
    harness_exec(c, "CREATE FUNCTION public.log_lease() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$BEGIN INSERT INTO public.lease_log (at, id, old_token, new_token, "
                    "old_until, new_until) VALUES (clock_timestamp(), NEW.id, OLD.lease_token, "
                    "NEW.lease_token, OLD.leased_until, NEW.leased_until); RETURN NEW; END$$");
    harness_exec(c, "CREATE TRIGGER log_lease AFTER UPDATE ON outbox.events FOR EACH ROW WHEN "
                    "(OLD.lease_token IS DISTINCT FROM NEW.lease_token) "
                    "EXECUTE FUNCTION public.log_lease()");
    /* And of every window claim: made (with its end) and ended (finished or given back). */
    harness_exec(c, "CREATE TABLE public.claim_log (seq bigserial PRIMARY KEY, "
                    "at timestamptz NOT NULL, op text NOT NULL, token uuid, until timestamptz)");
    harness_exec(c, "CREATE FUNCTION public.log_claim() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$BEGIN IF TG_OP = 'INSERT' THEN INSERT INTO public.claim_log (at, op, "
                    "token, until) VALUES (clock_timestamp(), 'made', NEW.token, NEW.expires_at); "
                    "ELSE INSERT INTO public.claim_log (at, op, token, until) VALUES "
                    "(clock_timestamp(), 'ended', OLD.token, OLD.expires_at); END IF; "
                    "RETURN NULL; END$$");
    harness_exec(c, "CREATE TRIGGER log_claim AFTER INSERT OR DELETE ON outbox.relay_claims "
                    "FOR EACH ROW EXECUTE FUNCTION public.log_claim()");
    harness_exec(c, "CREATE FUNCTION public.flaky(env jsonb) RETURNS void LANGUAGE plpgsql AS "
                    "$$DECLARE tries integer; BEGIN SELECT attempts INTO tries FROM "
                    "outbox.processed_events WHERE event_id = (env->>'id')::uuid AND "
                    "handler = 'flaky'; IF coalesce(tries, 0) < coalesce((env->'payload'->>"
                    "'fail')::integer, 0) THEN RAISE EXCEPTION 'flaky still broken'; END IF; "
                    "INSERT INTO public.effects (event_id, handler) VALUES "
                    "((env->>'id')::uuid, 'flaky'); END$$");
}

static void
setup(void)
{
    conn = chaos_begin(prepare, 0);
}

static void
teardown(void)
{
    chaos_end(&conn);
}

TestSuite(clock_skew, .init = setup, .fini = teardown, .timeout = 180);

/* The daemon's clock `offset` ("+1h", "-1h") off, through libfaketime. */
static void
skew(struct relay_env *env, const char *offset)
{
    const char *asan = getenv("ASAN_OPTIONS");
    char asan_options[512];

    relay_env_set(env, "LD_PRELOAD", FAKETIME_LIB);
    relay_env_set(env, "FAKETIME", offset);
    /* ASan wants to be first in the library list; libfaketime comes first here. */
    snprintf(asan_options, sizeof(asan_options), "%s%sverify_asan_link_order=0",
             asan != NULL ? asan : "", asan != NULL && asan[0] != '\0' ? ":" : "");
    relay_env_set(env, "ASAN_OPTIONS", asan_options);
}

static long long
ll(const char *sql)
{
    return harness_scalar_ll(conn, sql);
}

static void
clocks_off_by(const char *offset)
{
    struct harness_proc crasher, relays[RELAYS], replicas[REPLICAS];
    struct relay_env renv, cenv, crash_env, ctl_env;
    struct writer_thread w;
    struct ctl_run doctor;
    char stream[32], prefix[32], consumer[48], flaky[160];
    const char *const handler_names[] = {"audit", "mailer", "flaky", NULL};
    const char *handlers[] = {CONSUME_EFFECT("audit"), CONSUME_EFFECT("mailer"), flaky, NULL};
    json_t *clock = NULL;
    size_t i;
    json_t *line;
    int status;

    if (access(FAKETIME_LIB, R_OK) != 0) {
        cr_skip_test("libfaketime is not installed (" FAKETIME_LIB "): scripts/install-deps test "
                     "installs Debian's faketime");
    }
    snprintf(stream, sizeof(stream), "SKEW_%s", offset[0] == '+' ? "AHEAD" : "BEHIND");
    snprintf(prefix, sizeof(prefix), "skew%s", offset[0] == '+' ? "ahead" : "behind");
    snprintf(consumer, sizeof(consumer), "G_%s", stream);
    snprintf(flaky, sizeof(flaky), "flaky@%s.movie.review.logged=sql:SELECT public.flaky($1)",
             prefix);

    /* A skewed relay that crashes right after its first publish, holding its rows' leases. */
    relay_test_env(&crash_env, stream, prefix);
    skew(&crash_env, offset);
    relay_env_set(&crash_env, "OUTBOX_TEST_CRASH_AFTER_PUBLISH", "1");
    relay_env_set_int(&crash_env, "OUTBOX_LEASE_SECONDS", LEASE_S);
    relay_test_enqueue(conn, 300);
    relay_test_start(&crasher, &crash_env, "crasher");
    status = harness_proc_wait(&crasher, 60000);
    cr_assert_eq(status, 128 + SIGABRT, "the crashing relay ended with %d", status);
    cr_assert_gt(ll("SELECT count(*) FROM outbox.relay_claims"), 0, "the crash left no claim");
    harness_exec(conn, "CREATE TABLE public.crashed AS SELECT token, expires_at "
                       "FROM outbox.relay_claims");

    relay_test_env(&renv, stream, prefix);
    skew(&renv, offset);
    relay_env_set_int(&renv, "OUTBOX_LEASE_SECONDS", LEASE_S);
    for (int r = 0; r < RELAYS; r++) {
        char name[32];

        snprintf(name, sizeof(name), "relay-%d", r + 1);
        relay_test_start(&relays[r], &renv, name);
    }
    consume_test_env(&cenv, "jetstream", stream, prefix, consumer);
    skew(&cenv, offset);
    relay_env_set_int(&cenv, "OUTBOX_BACKOFF_BASE_MS", BASE_MS);
    relay_env_set(&cenv, "OUTBOX_BACKOFF_CAP_MS", "60000");
    for (int r = 0; r < REPLICAS; r++) {
        char name[32];

        snprintf(name, sizeof(name), "replica-%d", r + 1);
        consume_test_start(&replicas[r], &cenv, name, handlers);
    }
    /* Events the flaky handler fails twice before it succeeds. */
    harness_exec(conn, "INSERT INTO public.committed SELECT outbox.enqueue('movie', "
                       "gen_random_uuid(), 'review.logged', jsonb_build_object('fail', 2)) "
                       "FROM generate_series(1, 5)");
    chaos_start_writer(&w, 2000, 20, 20);
    HARNESS_WAIT_UNTIL(atomic_load(&w.done), 60000);
    writer_thread_join(&w);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0 &&
                           ll("SELECT count(*) FROM public.committed c WHERE (SELECT count("
                              "DISTINCT handler) FROM public.effects e WHERE e.event_id = c.id) "
                              "< 3") == 0 &&
                           consume_test_nats_drained(stream, consumer),
                       60000);
    for (int r = 0; r < REPLICAS; r++) {
        consume_test_assert_running(&replicas[r], "a skewed consumer");
        consume_test_stop(&replicas[r], 10000);
    }
    for (int r = 0; r < RELAYS; r++) {
        relay_test_assert_running(&relays[r], "a skewed relay");
        relay_test_stop(&relays[r], 10000);
    }

    /* Leases: LEASE_S of database time each, never taken before they ended. */
    cr_log_info("clock %s: %lld leases, %lld taken over after a crash; lease length %lld .. %lld "
                "ms; takeovers %lld .. %lld ms after the lease ended",
                offset, ll("SELECT count(*) FROM public.lease_log WHERE new_token IS NOT NULL"),
                ll("SELECT count(*) FROM public.lease_log WHERE old_token IS NOT NULL AND "
                   "new_token IS NOT NULL"),
                ll("SELECT min(round(extract(epoch FROM new_until - at) * 1000))::bigint FROM "
                   "public.lease_log WHERE new_token IS NOT NULL"),
                ll("SELECT max(round(extract(epoch FROM new_until - at) * 1000))::bigint FROM "
                   "public.lease_log WHERE new_token IS NOT NULL"),
                ll("SELECT coalesce(min(round(extract(epoch FROM at - old_until) * 1000)), 0)"
                   "::bigint FROM public.lease_log WHERE old_token IS NOT NULL AND new_token IS "
                   "NOT NULL"),
                ll("SELECT coalesce(max(round(extract(epoch FROM at - old_until) * 1000)), 0)"
                   "::bigint FROM public.lease_log WHERE old_token IS NOT NULL AND new_token IS "
                   "NOT NULL"));
    cr_assert_eq(ll("SELECT count(*) FROM public.lease_log WHERE new_token IS NOT NULL AND "
                    "(new_until - at < interval '1500 ms' OR new_until - at > interval '2500 ms')"),
                 0, "a lease did not last %d s of database time", LEASE_S);
    cr_assert_eq(ll("SELECT count(*) FROM public.claim_log WHERE op = 'made' AND "
                    "(until - at < interval '1500 ms' OR until - at > interval '2500 ms')"),
                 0, "a claim did not last %d s of database time", LEASE_S);
    cr_assert_eq(ll("SELECT count(*) FROM public.lease_log WHERE old_token IS NOT NULL AND "
                    "new_token IS NOT NULL AND at < old_until"),
                 0, "a lease was taken over before it ended");
    /* The crashed relay's claims are given back after their end, within seconds of it. */
    cr_assert_eq(ll("SELECT count(*) FROM public.crashed c JOIN public.claim_log l "
                    "ON l.token = c.token AND l.op = 'ended' WHERE l.at >= c.expires_at "
                    "AND l.at <= c.expires_at + interval '10 s'"),
                 ll("SELECT count(*) FROM public.crashed"),
                 "a crashed relay's claim was given back early, or stuck past its end");
    cr_assert_eq(ll("SELECT count(*) FROM outbox.relay_claims"), 0,
                 "every claim was finished or given back");

    /* Backoff: each failure planned BASE_MS * 2^(k-1) +-10 % of database time; never ran early. */
    cr_assert_eq(ll("SELECT count(*) FROM public.ledger_log WHERE handler = 'flaky' AND "
                    "owner_token IS NULL AND attempts > 0 AND status <> 'done'"),
                 10, "the flaky handler did not fail twice for each of 5 events");
    cr_assert_eq(ll("SELECT count(*) FROM public.ledger_log WHERE handler = 'flaky' AND "
                    "owner_token IS NULL AND attempts > 0 AND status <> 'done' AND "
                    "abs(extract(epoch FROM next_attempt_at - tx_now) * 1000 - "
                    "500 * 2 ^ (attempts - 1)) > 0.1 * 500 * 2 ^ (attempts - 1) + 5"),
                 0, "a retry was not planned on the backoff schedule in database time");
    cr_assert_eq(ll("SELECT count(*) FROM public.ledger_log f WHERE f.handler = 'flaky' AND "
                    "f.owner_token IS NULL AND f.attempts > 0 AND f.status <> 'done' AND "
                    "EXISTS (SELECT 1 FROM public.ledger_log c WHERE c.event_id = f.event_id "
                    "AND c.handler = f.handler AND c.seq > f.seq AND c.at < f.next_attempt_at)"),
                 0, "a retry ran before it was due");

    conservation_expect_zero(conn, stream, handler_names);
    cr_assert_eq(ll("SELECT coalesce(sum(attempts), 0) FROM outbox.processed_events"), 10,
                 "attempts other than the flaky handler's 10 failures");
    cr_assert_eq(ll("SELECT coalesce(sum(attempts), 0) FROM outbox.events"), 0);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.dead_letters"), 0);

    /* The operator's view: doctor, run with the same skewed clock, reports it. */
    relay_test_env(&ctl_env, stream, prefix);
    skew(&ctl_env, offset);
    ctl_run(&doctor, &ctl_env, (const char *const[]){"doctor", "--json", NULL});
    json_array_foreach(doctor.lines, i, line)
    {
        const char *check = ctl_str(line, "check");

        if (check != NULL && strcmp(check, "clock") == 0) {
            clock = line;
        }
    }
    cr_assert_not_null(clock, "doctor has no clock finding:\n%s", doctor.out);
    cr_assert_str_eq(ctl_str(clock, "level"), "error", "an hour of skew: %s", doctor.out);
    cr_log_info("clock %s: doctor says \"%s\"", offset, ctl_str(clock, "saw"));
    ctl_run_fini(&doctor);
    relay_env_fini(&ctl_env);
    relay_env_fini(&cenv);
    relay_env_fini(&renv);
    relay_env_fini(&crash_env);
}

Test(clock_skew, relays_and_consumers_an_hour_ahead_follow_database_time)
{
    clocks_off_by("+1h");
}

Test(clock_skew, relays_and_consumers_an_hour_behind_follow_database_time)
{
    clocks_off_by("-1h");
}
