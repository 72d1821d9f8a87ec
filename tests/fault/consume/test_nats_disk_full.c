/* SPDX-License-Identifier: MIT */
/*
 * test_nats_disk_full.c - FAULTS.md T23, shortened for CI: nats-server's
 * store_dir on a 24 MiB tmpfs with max_file_store far larger (1 GiB), so
 * the disk fills before JetStream's own limit; a relay publishes 20 KiB
 * events into it, a consumer replica handles them. JetStream may disable
 * itself on ENOSPC (nats-io/nats-server#7654).
 *
 * Pass: no row finished without a PubAck (every done row carries the
 * stream sequence its PubAck gave), no attempt burned; after the tmpfs is
 * grown and nats-server restarted, every event is published with no
 * manual step; if the server lost messages it had acked (or the stream),
 * `outboxctl audit --repair` republishes them from the retained rows and
 * the consumer ends with every event handled once: lost 0, effect_dups 0.
 * Skips, saying why, where tmpfs cannot be mounted (not root).
 */
#include <fcntl.h>
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
#include "stream_reader_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static char store[64];
static int mounted;

/* Runs a command to its end; its exit status (-1 if it hung). */
static int
run(char *const argv[])
{
    struct harness_proc p;

    harness_spawn(&p, argv, NULL);
    return harness_proc_wait(&p, 30000);
}

static void
setup(void)
{
    conn = chaos_begin(consume_test_prepare, 1); /* nats-server is restarted */
    snprintf(store, sizeof(store), "/tmp/obx-js-tmpfs-XXXXXX");
    cr_assert_not_null(mkdtemp(store));
    mounted = 0;
}

static void
teardown(void)
{
    if (mounted) {
        harness_nats_restart_with_args(NULL); /* off the tmpfs before it goes */
        run((char *const[]){"umount", store, NULL});
    }
    rmdir(store);
    chaos_end(&conn);
}

TestSuite(nats_disk_full, .init = setup, .fini = teardown, .timeout = 300);

static const char *const handler_names[] = {"audit", NULL};
static const char *const handlers[] = {CONSUME_EFFECT("audit"), NULL};

static long long
ll(const char *sql)
{
    return harness_scalar_ll(conn, sql);
}

Test(nats_disk_full, t23_a_full_store_finishes_nothing_unacked_and_everything_arrives_after)
{
    enum { EVENTS = 2000, PAYLOAD = 20000 };
    char conf_path[] = "/tmp/obx-js-conf-XXXXXX";
    char conf[256];
    char *nats_args[] = {"-c", conf_path, "-sd", store, NULL};
    struct consume_group g;
    struct harness_proc replica;
    struct ctl_run audit;
    long long done_before = -1, stuck, unacked_done, stream_after, repaired = 0;
    int fd, stalled = 0;
    int64_t in_stream;
    char err[256] = "";

    if (run((char *const[]){"mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", store, NULL}) != 0) {
        cr_skip_test("cannot mount a tmpfs here (mount needs root): no way to fill the NATS "
                     "store without filling the machine's disk");
    }
    mounted = 1;
    fd = mkstemp(conf_path);
    snprintf(conf, sizeof(conf), "jetstream { max_file_store: 1G }\n");
    cr_assert(fd >= 0 && write(fd, conf, strlen(conf)) == (ssize_t)strlen(conf));
    close(fd);
    harness_nats_restart_with_args(nats_args);

    consume_group_init(&g, "jetstream", "T23", NULL);
    consume_test_start(&replica, &g.env, "replica-1", handlers);
    relay_test_enqueue_sized(conn, EVENTS, "review.logged", PAYLOAD);
    /* Until the store is full: no row finished for 5 s while rows are left. */
    for (long long deadline = harness_now_ms() + 120000; stalled < 50;) {
        long long done = ll("SELECT count(*) FROM outbox.events WHERE status = 'done'");

        cr_assert_lt(harness_now_ms(), deadline, "the store never filled");
        stalled = done == done_before && done < EVENTS ? stalled + 1 : 0;
        done_before = done;
        if (done == EVENTS) {
            cr_assert_fail("all %d events fit in the 24 MiB store: the test proved nothing",
                           EVENTS);
        }
        harness_sleep_ms(100);
    }
    stuck = relay_test_unfinished(conn);
    unacked_done = ll("SELECT count(*) FROM outbox.events WHERE status = 'done' AND "
                      "stream_seq IS NULL");
    {
        char *log = harness_proc_log(&g.relay);
        char *why = strstr(log, "unavailable");
        char *eol = why != NULL ? strchr(why, '\n') : NULL;

        if (eol != NULL) {
            *eol = '\0';
        }
        cr_log_info("T23: the store filled after %lld of %d events; %lld rows waiting; the relay "
                    "says: %s",
                    done_before, EVENTS, stuck, why != NULL ? why : "(nothing)");
        free(log);
    }
    cr_assert_eq(unacked_done, 0, "rows were finished without a PubAck");
    cr_assert_eq(ll("SELECT coalesce(sum(attempts), 0) FROM outbox.events"), 0,
                 "a full disk burned attempts");
    cr_assert_eq(ll("SELECT count(*) FROM outbox.events WHERE status IN ('dead', 'invalid')"), 0);

    /* Space freed, the server restarted: no other manual step. */
    cr_assert_eq(run((char *const[]){"mount", "-o", "remount,size=256m", store, NULL}), 0);
    harness_nats_restart_with_args(nats_args);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 90000);
    in_stream = stream_message_count(harness_nats_url(), g.stream, err, sizeof(err));
    stream_after = in_stream;
    cr_log_info("T23: after the restart the stream holds %lld messages for %d finished rows (%s)",
                stream_after, EVENTS, err);
    /* What the server acked and then lost comes back from the retained rows. */
    relay_test_stop(&g.relay, 10000);
    ctl_run(&audit, &g.relay_env, (const char *const[]){"audit", "--repair", "--json", NULL});
    repaired = (long long)ctl_count(&audit, "repaired");
    cr_log_info("T23: audit --repair republished %lld rows", repaired);
    cr_assert(audit.status == 0, "audit --repair left rows missing:\n%s", audit.out);
    ctl_run_fini(&audit);
    relay_test_start(&g.relay, &g.relay_env, "relay");
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "audit") == EVENTS &&
                           consume_test_nats_drained(g.stream, g.consumer),
                       90000);
    consume_test_assert_running(&replica, "the consumer (a full broker disk must not need it)");
    consume_test_stop(&replica, 10000);
    cr_assert_eq(ll("SELECT coalesce(sum(attempts), 0) FROM outbox.events"), 0);
    cr_assert_eq(ll("SELECT count(*) FROM outbox.dead_letters"), 0);
    {
        struct conservation c = conservation_measure(conn, g.stream, handler_names);

        cr_assert_eq(c.base.lost, 0, "%zu events lost, e.g. %s", c.base.lost, c.base.lost_example);
        cr_assert_eq(c.base.phantom, 0);
        cr_assert_eq(c.effect_dups, 0, "%lld effects ran twice", c.effect_dups);
        cr_assert_eq(c.unhandled, 0, "%lld events never handled", c.unhandled);
        cr_assert_eq(c.unterminated, 0);
        cr_log_info("T23: %zu stream duplicates after the repair (a republish of an event the "
                    "server kept but its dedupe window lost); effects ran once each",
                    c.base.stream_dups);
    }
    unlink(conf_path);
    consume_group_fini(&g);
}
