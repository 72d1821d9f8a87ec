/* SPDX-License-Identifier: MIT */
/*
 * cluster_test.h - one fault on a three-node JetStream cluster while relays
 * publish and consumers consume, and the checks after it (FACTS 18).
 *
 * The test's cluster runs an R3 file stream with limits retention and
 * max_age above the duplicate window, created by the relays
 * (OUTBOX_STREAM_REPLICAS=3). A fault is injected only once every replica
 * is current and the stream is seconds old, one at a time, never two nodes
 * down. Afterwards: every node's copy read back (all three hold each
 * committed id once), every event handled once, no attempt spent, no relay
 * or consumer restarted. How long publishing paused is read from the
 * stream itself: the longest gap between the stored times of consecutive
 * messages after the fault, while the writer kept committing.
 * Header-only (static inline): it calls the harness.
 */
#ifndef OBX_TEST_CLUSTER_TEST_H
#define OBX_TEST_CLUSTER_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "cluster_nats.h"
#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"
#include "writer_thread.h"

enum cluster_fault {
    CLUSTER_KILL_STREAM_LEADER,
    CLUSTER_KILL_FOLLOWER,
    CLUSTER_KILL_CONSUMER_LEADER,
    CLUSTER_STEPDOWN,
};

enum { CLUSTER_RELAYS = 2, CLUSTER_CONSUMERS = 2, CLUSTER_MAX_ROUNDS = 64 };

/* What a run measured, for the log (and the soak's summary). */
struct cluster_result {
    long long pause_ms;         /* longest gap in stored times after any fault */
    long long baseline_ms;      /* longest gap before the first fault */
    long long recovered_ms;     /* from the last fault to every row published */
    long long handler_pause_ms; /* longest gap between handler effects after the first fault */
    long long events;
};

static const char *const cluster_handlers[] = {CONSUME_EFFECT("effect"), NULL};

static inline const char *
cluster_fault_name(enum cluster_fault f)
{
    static const char *const names[] = {"stream leader killed", "follower killed",
                                        "consumer leader killed", "stream leader stepdown"};
    return names[f];
}

static inline long long
cluster_wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int
cluster_current(const struct harness_cluster *cl, const char *stream)
{
    return cluster_stream_current(cl->urls, stream, HARNESS_CLUSTER_NODES);
}

/* The node index named by `name`; fails the test if it names none. */
static inline int
cluster_node_named(const char *name)
{
    int k = harness_cluster_node(name);

    cr_assert(k >= 0, "\"%s\" is not a node of the test's cluster", name);
    return k;
}

/* The stream's last sequence number, or 0 while it cannot be read (no leader). */
static inline unsigned long long
cluster_last_seq(const struct harness_cluster *cl, const char *stream)
{
    struct cluster_view v;
    char err[256];

    return cluster_stream_view(cl->urls, stream, &v, err, sizeof(err)) == 0 ? v.last_seq : 0;
}

/*
 * The fault itself. A killed node comes back once publishing went on
 * without it (a new leader stored messages) or after 15 s at most, so a
 * node is never down for long and never with another.
 */
static inline void
cluster_inject(struct harness_cluster *cl, const char *stream, const char *consumer,
               enum cluster_fault f)
{
    struct cluster_view v;
    char err[512] = "", leader[CLUSTER_NAME_CAP] = "";
    unsigned long long before;
    int victim = -1;

    cr_assert_eq(cluster_stream_view(cl->urls, stream, &v, err, sizeof(err)), 0, "%s", err);
    switch (f) {
    case CLUSTER_STEPDOWN:
        cr_assert_eq(cluster_stream_stepdown(cl->urls, stream, err, sizeof(err)), 0, "%s", err);
        cr_log_info("stepdown: %s handed over", v.leader);
        return;
    case CLUSTER_KILL_STREAM_LEADER:
        victim = cluster_node_named(v.leader);
        break;
    case CLUSTER_KILL_FOLLOWER:
        cr_assert_gt(v.replicas, 0, "the stream has no followers");
        victim = cluster_node_named(v.replica[0].name);
        break;
    case CLUSTER_KILL_CONSUMER_LEADER:
        HARNESS_WAIT_UNTIL(cluster_consumer_leader(cl->urls, stream, consumer, leader,
                                                   sizeof(leader), err, sizeof(err)) == 0,
                           30000);
        victim = cluster_node_named(leader);
        break;
    }
    before = v.last_seq;
    cr_log_info("SIGKILL n%d (%s; stream leader %s)", victim + 1, cluster_fault_name(f), v.leader);
    harness_cluster_kill(cl, victim);
    {
        long long killed = harness_now_ms(), deadline = killed + 15000;

        /* Not a condition to assert: the node comes back either way, after 3 s at least. */
        while (harness_now_ms() < deadline &&
               (cluster_last_seq(cl, stream) <= before + 50 || harness_now_ms() - killed < 3000)) {
            harness_sleep_ms(100);
        }
    }
    harness_cluster_restart(cl, victim);
}

/* The stream's leader's name into `leader` ("" if none). */
static inline void
cluster_leader(const struct harness_cluster *cl, const char *stream, char *leader)
{
    struct cluster_view v;
    char err[256];

    leader[0] = '\0';
    if (cluster_stream_view(cl->urls, stream, &v, err, sizeof(err)) == 0) {
        snprintf(leader, CLUSTER_NAME_CAP, "%s", v.leader);
    }
}

/* 1 once handlers ran for events beyond `from` (or have run for every committed event). */
static inline int
cluster_handlers_moving(PGconn *conn, long long from)
{
    long long now = consume_test_handled(conn, "effect");

    return now >= from + 20 || now == harness_scalar_ll(conn, "SELECT count(*) FROM committed");
}

/*
 * Ready for the next fault: every replica of the stream and of the
 * consumer current, the stream seconds old (FACTS 18), the same stream
 * leader over a second, so a fault never lands on a hand-over still going
 * on, and the handlers running again, so each pause is the fault's own.
 */
static inline void
cluster_settle(PGconn *conn, const struct harness_cluster *cl, const char *stream,
               const char *consumer, long long created_ms)
{
    long long deadline = harness_now_ms() + 60000;
    long long handled = consume_test_handled(conn, "effect");

    HARNESS_WAIT_UNTIL(cluster_handlers_moving(conn, handled), 60000);
    for (;;) {
        char before[CLUSTER_NAME_CAP], after[CLUSTER_NAME_CAP];

        HARNESS_WAIT_UNTIL(
            cluster_current(cl, stream) &&
                cluster_consumer_current(cl->urls, stream, consumer, HARNESS_CLUSTER_NODES) &&
                harness_now_ms() - created_ms >= 3000 && cluster_last_seq(cl, stream) >= 100,
            60000);
        cluster_leader(cl, stream, before);
        harness_sleep_ms(1000);
        cluster_leader(cl, stream, after);
        if (before[0] != '\0' && strcmp(before, after) == 0 && cluster_current(cl, stream)) {
            return;
        }
        cr_assert_lt(harness_now_ms(), deadline, "the stream's leader never settled");
    }
}

/* Relays and consumers against the cluster: every URL, R3. */
static inline void
cluster_env(struct relay_env *env, const struct harness_cluster *cl)
{
    relay_env_set(env, "OUTBOX_NATS_URL", cl->urls);
    relay_env_set(env, "OUTBOX_STREAM_REPLICAS", "3");
    relay_env_set(env, "OUTBOX_STREAM_MAX_AGE_SECONDS", "86400");
    relay_env_set(env, "OUTBOX_DUPLICATE_WINDOW_SECONDS", "3600");
}

/* Longest gap (ms) between consecutive stored times; only gaps ending in [from, to). */
static inline long long
cluster_longest_gap(const int64_t *t, size_t n, long long from_ns, long long to_ns)
{
    long long gap = 0;

    for (size_t i = 1; i < n; i++) {
        if (t[i] >= from_ns && t[i] < to_ns && t[i] - t[i - 1] > gap) {
            gap = t[i] - t[i - 1];
        }
    }
    return gap / 1000000;
}

/* Longest gap (ms) between handler effects, only gaps ending in [from, to) (wall ns). */
static inline long long
cluster_handler_gap(PGconn *conn, long long from_ns, long long to_ns)
{
    char sql[512];

    snprintf(sql, sizeof(sql),
             "SELECT coalesce((extract(epoch FROM max(gap)) * 1000)::bigint, 0) FROM "
             "(SELECT at, at - lag(at) OVER (ORDER BY at) AS gap FROM public.effects) g "
             "WHERE at >= to_timestamp(%lld / 1e9) AND at < to_timestamp(%lld / 1e9)",
             from_ns, to_ns == INT64_MAX ? from_ns + 3600000000000LL : to_ns);
    return harness_scalar_ll(conn, sql);
}

/*
 * Reads every node's copy: each holds every committed id once (none lost,
 * none phantom, none twice) and all three hold the same number. Returns
 * the stored times of the first node's copy (malloc'd) and their count.
 */
static inline int64_t *
cluster_check_every_node(PGconn *conn, const struct harness_cluster *cl, const char *stream,
                         size_t *count)
{
    int64_t *first_times = NULL;
    size_t counts[HARNESS_CLUSTER_NODES];

    for (int k = 0; k < HARNESS_CLUSTER_NODES; k++) {
        struct relay_check chk;
        struct id_set s;
        char node[8], err[512] = "";
        int64_t *times = NULL;

        snprintf(node, sizeof(node), "n%d", k + 1);
        id_set_init(&s);
        cr_assert_eq(cluster_read_on(cl->urls, stream, node, &s, &times, err, sizeof(err)), 0,
                     "reading %s's copy of %s: %s", node, stream, err);
        counts[k] = s.count;
        if (k == 0) {
            first_times = times;
            *count = s.count;
        } else {
            free(times);
        }
        cr_assert_eq(relay_check_run(conn, RELAY_COMMITTED_SQL, &s, &chk, err, sizeof(err)), 0,
                     "checker: %s", err);
        id_set_fini(&s);
        cr_log_info("%s's copy: committed=%zu stream=%zu lost=%zu phantom=%zu dups=%zu", node,
                    chk.committed, chk.stream, chk.lost, chk.phantom, chk.stream_dups);
        cr_assert_eq(chk.lost, 0, "%s lacks %zu committed ids, e.g. %s", node, chk.lost,
                     chk.lost_example);
        cr_assert_eq(chk.phantom, 0, "%s holds %zu ids never committed", node, chk.phantom);
        cr_assert_eq(chk.stream_dups, 0, "%s holds %zu ids twice, e.g. %s", node, chk.stream_dups,
                     chk.dup_example);
        cr_assert_eq(counts[k], counts[0], "n%d holds %zu messages, n1 %zu", k + 1, counts[k],
                     counts[0]);
    }
    return first_times;
}

/*
 * The whole run: a cluster, relays and consumers, a writer committing
 * `events`, and `rounds` faults (each kind in turn from `first`, or only
 * `first` when `cycle` is 0), each once every replica is current again.
 */
static inline struct cluster_result
cluster_run(PGconn *conn, const char *tag, enum cluster_fault first, int cycle, int rounds,
            int events)
{
    struct harness_cluster cl;
    struct harness_proc relays[CLUSTER_RELAYS], consumers[CLUSTER_CONSUMERS];
    struct consume_group g;
    struct relay_env renv;
    /* Static: a failed assertion leaves the writer thread running on it. */
    static struct writer_thread w;
    struct cluster_result r = {0};
    long long created_ms, first_fault_ns = 0, last_fault_ms = 0;
    long long fault_ns[CLUSTER_MAX_ROUNDS + 1];
    enum cluster_fault kind[CLUSTER_MAX_ROUNDS];
    int64_t *times;
    size_t n = 0;
    char name[32];

    cr_assert(rounds >= 1 && rounds <= CLUSTER_MAX_ROUNDS);
    harness_cluster_start(&cl, tag);
    memset(&g, 0, sizeof(g));
    snprintf(g.stream, sizeof(g.stream), "CL_%s", tag);
    snprintf(g.prefix, sizeof(g.prefix), "cl%s", tag);
    snprintf(g.consumer, sizeof(g.consumer), "G_%s", tag);
    consume_test_env(&g.env, "jetstream", g.stream, g.prefix, g.consumer);
    cluster_env(&g.env, &cl);
    relay_test_env(&renv, g.stream, g.prefix);
    cluster_env(&renv, &cl);
    for (int i = 0; i < CLUSTER_RELAYS; i++) {
        snprintf(name, sizeof(name), "relay-%d", i + 1);
        relay_test_start(&relays[i], &renv, name);
    }
    HARNESS_WAIT_UNTIL(cluster_current(&cl, g.stream), 30000);
    created_ms = harness_now_ms();
    for (int i = 0; i < CLUSTER_CONSUMERS; i++) {
        snprintf(name, sizeof(name), "consumer-%d", i + 1);
        consume_test_start(&consumers[i], &g.env, name, cluster_handlers);
    }
    chaos_start_writer(&w, events, 5, 20);
    for (int round = 0; round < rounds; round++) {
        enum cluster_fault f = cycle ? (enum cluster_fault)((first + round) % 4) : first;

        cluster_settle(conn, &cl, g.stream, g.consumer, created_ms);
        fault_ns[round] = cluster_wall_ns();
        kind[round] = f;
        if (round == 0) {
            first_fault_ns = fault_ns[0];
        }
        cr_assert(!atomic_load(&w.done),
                  "the writer finished before fault %d: nothing was in flight", round + 1);
        cluster_inject(&cl, g.stream, g.consumer, f);
        last_fault_ms = harness_now_ms();
    }
    /* The writer commits about 200 events/s; half that on a busy machine. */
    HARNESS_WAIT_UNTIL(atomic_load(&w.done), events * 10 > 120000 ? events * 10 : 120000);
    writer_thread_join(&w);
    r.events = atomic_load(&w.committed);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 60000);
    r.recovered_ms = harness_now_ms() - last_fault_ms;
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "effect") == r.events, 60000);
    HARNESS_WAIT_UNTIL(cluster_current(&cl, g.stream), 30000);
    for (int i = 0; i < CLUSTER_RELAYS; i++) {
        relay_test_assert_running(&relays[i], "a relay (a node loss must not need a restart)");
    }
    for (int i = 0; i < CLUSTER_CONSUMERS; i++) {
        consume_test_assert_running(&consumers[i], "a consumer (a node loss must not need one)");
    }
    times = cluster_check_every_node(conn, &cl, g.stream, &n);
    r.baseline_ms = cluster_longest_gap(times, n, 0, first_fault_ns);
    fault_ns[rounds] = INT64_MAX;
    for (int round = 0; round < rounds; round++) {
        long long gap = cluster_longest_gap(times, n, fault_ns[round], fault_ns[round + 1]);
        long long handlers = cluster_handler_gap(conn, fault_ns[round], fault_ns[round + 1]);

        fprintf(stderr,
                "CLUSTER_FAULT tag=%s round=%d fault=\"%s\" publishing_paused_ms=%lld "
                "handlers_paused_ms=%lld\n",
                tag, round + 1, cluster_fault_name(kind[round]), gap, handlers);
        r.pause_ms = gap > r.pause_ms ? gap : r.pause_ms;
    }
    free(times);
    r.handler_pause_ms = cluster_handler_gap(conn, first_fault_ns, INT64_MAX);
    cr_assert_eq(harness_scalar_ll(conn, "SELECT coalesce(sum(attempts), 0) FROM outbox.events"), 0,
                 "the relays spent attempts on the faults");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"), 0,
                 "the faults dead-lettered events");
    consume_test_expect_exactly_once(conn, "effect");
    consume_test_expect_nothing_spent(conn);
    for (int i = 0; i < CLUSTER_CONSUMERS; i++) {
        consume_test_stop(&consumers[i], 10000);
    }
    for (int i = 0; i < CLUSTER_RELAYS; i++) {
        relay_test_stop(&relays[i], 10000);
    }
    cr_log_info("cluster %s: %s x%d, %lld events: publishing paused %lld ms (longest gap before "
                "the fault %lld ms), handlers %lld ms; all published %lld ms after the last fault",
                tag, cycle ? "every fault" : cluster_fault_name(first), rounds, r.events,
                r.pause_ms, r.baseline_ms, r.handler_pause_ms, r.recovered_ms);
    fprintf(stderr,
            "CLUSTER_PAUSE tag=%s fault=\"%s\" rounds=%d events=%lld pause_ms=%lld "
            "baseline_gap_ms=%lld handler_pause_ms=%lld recovered_ms=%lld\n",
            tag, cycle ? "all" : cluster_fault_name(first), rounds, r.events, r.pause_ms,
            r.baseline_ms, r.handler_pause_ms, r.recovered_ms);
    relay_env_fini(&renv);
    relay_env_fini(&g.env);
    harness_cluster_stop(&cl);
    return r;
}

#endif
