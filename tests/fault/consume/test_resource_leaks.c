/* SPDX-License-Identifier: MIT */
/*
 * test_resource_leaks.c - FAULTS.md T30, shortened for CI (30 s; the soak
 * form, label soak, runs an hour): a relay and a consumer replica carry a
 * writer's events while nats-server is SIGKILLed and restarted every ~6 s
 * and a random backend of theirs is terminated every ~2 s. After a warm-up
 * (the first flaps, so every reconnect path has run once), each daemon's
 * open file descriptors stay within +-5 and its RSS grows by at most
 * 5 MiB; LeakSanitizer checks each at exit (relay_test_stop and
 * consume_test_stop require exit 0); nothing is lost or handled twice.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "conservation.h"
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

TestSuite(resource_leaks, .init = setup, .fini = teardown, .timeout = 4000);

static const char *const handler_names[] = {"audit", NULL};
static const char *const handlers[] = {CONSUME_EFFECT("audit"), NULL};

struct usage {
    long rss_kib;
    int fds;
};

static struct usage
usage_of(pid_t pid)
{
    struct usage u = {-1, 0};
    char path[64], line[256];
    FILE *f;
    DIR *d;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    while (fgets(line, sizeof(line), f) != NULL && sscanf(line, "VmRSS: %ld", &u.rss_kib) != 1) {
    }
    fclose(f);
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    d = opendir(path);
    cr_assert_not_null(d, "%s", path);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        u.fds += e->d_name[0] != '.';
    }
    closedir(d);
    return u;
}

static void
no_quarantine(struct relay_env *env)
{
    const char *asan = getenv("ASAN_OPTIONS");
    char options[512];

    snprintf(options, sizeof(options), "%s%squarantine_size_mb=0", asan != NULL ? asan : "",
             asan != NULL && asan[0] != '\0' ? ":" : "");
    relay_env_set(env, "ASAN_OPTIONS", options);
}

Test(resource_leaks, t30_fds_and_rss_stay_flat_under_flapping_dependencies)
{
    int run_s = chaos_soak() ? 3600 : 30, warmup_s = chaos_soak() ? 300 : 10;
    struct consume_group g;
    struct harness_proc replica;
    struct writer_thread w;
    struct usage relay_warm = {0}, consumer_warm = {0}, relay_end, consumer_end;
    struct usage relay_max = {0}, consumer_max = {0};
    long long started, next_nats, next_term, terminated = 0;
    int nats_restarts = 0, warm = 0;

    consume_group_init(&g, "jetstream", "T30", NULL);
    /*
     * ASan keeps freed memory in a quarantine of up to 256 MiB, which RSS
     * would show as growth: without it RSS is the daemon's live memory. The
     * group's relay started already, so it is replaced by one that has it.
     */
    no_quarantine(&g.env);
    no_quarantine(&g.relay_env);
    relay_test_stop(&g.relay, 10000);
    relay_test_start(&g.relay, &g.relay_env, "relay");
    consume_test_start(&replica, &g.env, "replica-1", handlers);
    /* ~500 events/s in FAULTS; 200/s here so that ASan daemons keep up on 2 cores. */
    chaos_start_writer(&w, 200 * (run_s + 5), 10, 50);
    started = harness_now_ms();
    next_nats = started + 4000;
    next_term = started + 2000;
    while (harness_now_ms() - started < (long long)run_s * 1000) {
        long long now = harness_now_ms();

        if (now >= next_nats) {
            harness_nats_kill(SIGKILL);
            harness_sleep_ms(chaos_random_ms(200, 800));
            harness_nats_start();
            nats_restarts++;
            next_nats = harness_now_ms() + chaos_random_ms(5000, 7000);
        }
        if (now >= next_term) {
            terminated += chaos_terminate_a_backend(conn);
            next_term = harness_now_ms() + chaos_random_ms(1500, 2500);
        }
        if (!warm && now - started >= (long long)warmup_s * 1000) {
            relay_warm = usage_of(g.relay.pid);
            consumer_warm = usage_of(replica.pid);
            warm = 1;
        }
        if (warm) {
            struct usage r = usage_of(g.relay.pid), c = usage_of(replica.pid);

            relay_max.rss_kib = r.rss_kib > relay_max.rss_kib ? r.rss_kib : relay_max.rss_kib;
            relay_max.fds = r.fds > relay_max.fds ? r.fds : relay_max.fds;
            consumer_max.rss_kib =
                c.rss_kib > consumer_max.rss_kib ? c.rss_kib : consumer_max.rss_kib;
            consumer_max.fds = c.fds > consumer_max.fds ? c.fds : consumer_max.fds;
        }
        /* Not waiting for a condition: the flapping schedule's tick. */
        harness_sleep_ms(200);
    }
    /* The flapping is over: the writer's events past it are not what the test measures. */
    writer_thread_stop(&w);
    HARNESS_WAIT_UNTIL(atomic_load(&w.done), 120000);
    writer_thread_join(&w);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0 &&
                           consume_test_handled(conn, "audit") ==
                               harness_scalar_ll(conn, "SELECT count(*) FROM public.committed") &&
                           consume_test_nats_drained(g.stream, g.consumer),
                       60000);
    relay_end = usage_of(g.relay.pid);
    consumer_end = usage_of(replica.pid);
    cr_log_info("T30: %d s, %d nats restarts, %lld backends terminated, %d events", run_s,
                nats_restarts, terminated, atomic_load(&w.committed));
    cr_log_info("T30: relay fds %d after warm-up, %d at most, %d at the end; RSS %ld KiB after "
                "warm-up, %ld at most, %ld at the end",
                relay_warm.fds, relay_max.fds, relay_end.fds, relay_warm.rss_kib, relay_max.rss_kib,
                relay_end.rss_kib);
    cr_log_info("T30: consumer fds %d after warm-up, %d at most, %d at the end; RSS %ld KiB after "
                "warm-up, %ld at most, %ld at the end",
                consumer_warm.fds, consumer_max.fds, consumer_end.fds, consumer_warm.rss_kib,
                consumer_max.rss_kib, consumer_end.rss_kib);
    cr_assert_geq(nats_restarts, 4, "too few restarts to mean anything");
    cr_assert_leq(abs(relay_end.fds - relay_warm.fds), 5, "the relay's fds drifted");
    cr_assert_leq(abs(consumer_end.fds - consumer_warm.fds), 5, "the consumer's fds drifted");
    cr_assert_leq(relay_end.rss_kib - relay_warm.rss_kib, 5 * 1024, "the relay's RSS grew");
    cr_assert_leq(consumer_end.rss_kib - consumer_warm.rss_kib, 5 * 1024,
                  "the consumer's RSS grew");
    consume_test_assert_running(&replica, "the consumer (flapping must not need it)");
    relay_test_assert_running(&g.relay, "the relay (flapping must not need it)");
    consume_test_stop(&replica, 10000);
    conservation_expect_zero(conn, g.stream, handler_names);
    consume_group_fini(&g); /* the relay exits 0: LeakSanitizer found nothing */
}
