/* SPDX-License-Identifier: MIT */
/*
 * test_failover.c - FAULTS.md T17, shortened for CI: a primary and a
 * standby made with pg_basebackup -R, both on loopback; the writer and the
 * relay connect with host=a,b target_session_attrs=read-write. Under load
 * the primary's postmaster is SIGKILLed and the standby promoted; the
 * writer carries on against the new primary and the relay (never
 * restarted) finds it by itself.
 *
 * The standby's WAL receiver is stopped for a second just before the kill
 * and killed after it (a standby behind, as under load or over a slow
 * link; on loopback it is otherwise never behind). Measured on the new primary: acknowledged
 * commits missing (the writer saw COMMIT succeed, the row is not there), and ghost events (in the
 * stream, business row missing). Synchronous replication
 * (synchronous_standby_names = '*'): missing 0, ghosts 0, asserted.
 * Asynchronous: the figures are logged and go in docs/guarantees.md as the
 * evidence for the deployment rule; committed events are never lost from
 * the stream in either mode.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "devserver/devserver_pg.h"
#include "devserver/devserver_probe.h"
#include "harness.h"
#include "id_set.h"
#include "relay_check.h"
#include "relay_test.h"
#include "stream_reader_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn; /* the harness's database: only for chaos_begin */
static char dir_a[64], dir_b[64];

static int
run(char *const argv[], char *const env[])
{
    return harness_run(argv, env, 120000);
}

static void
setup(void)
{
    conn = chaos_begin(NULL, 0);
    snprintf(dir_a, sizeof(dir_a), "/tmp/obx-primary-XXXXXX");
    snprintf(dir_b, sizeof(dir_b), "/tmp/obx-standby-XXXXXX");
    cr_assert(mkdtemp(dir_a) != NULL && mkdtemp(dir_b) != NULL);
}

static void
teardown(void)
{
    obx_dev_pg_halt(dir_a);
    obx_dev_pg_halt(dir_b);
    run((char *const[]){"rm", "-rf", dir_a, dir_b, NULL}, NULL);
    chaos_end(&conn);
}

TestSuite(failover, .init = setup, .fini = teardown, .timeout = 300);

static PGconn *
connect_or_null(const char *url)
{
    PGconn *c = PQconnectdb(url);

    if (PQstatus(c) != CONNECTION_OK) {
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* One business transaction of 10 events; their ids go into `acked` when COMMIT succeeds. */
static int
write_once(PGconn *c, struct id_set *acked)
{
    PGresult *res = PQexec(c, "BEGIN");
    PGresult *ids;
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;

    PQclear(res);
    if (!ok) {
        return 0;
    }
    ids = PQexec(c, "INSERT INTO public.committed SELECT outbox.enqueue('movie', "
                    "gen_random_uuid(), 'review.logged', jsonb_build_object('n', g)) FROM "
                    "generate_series(1, 10) AS g RETURNING id::text");
    if (PQresultStatus(ids) != PGRES_TUPLES_OK) {
        PQclear(ids);
        PQclear(PQexec(c, "ROLLBACK"));
        return 0;
    }
    res = PQexec(c, "COMMIT");
    ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    for (int i = 0; ok && i < PQntuples(ids); i++) {
        id_set_add(acked, PQgetvalue(ids, i, 0));
    }
    PQclear(res);
    PQclear(ids);
    return ok;
}

/* Writes for `ms`, reconnecting through the failover; counts failed transactions. */
static void
write_for(PGconn **c, const char *url, struct id_set *acked, long long ms, long long *failed)
{
    long long until = harness_now_ms() + ms;

    while (harness_now_ms() < until) {
        if (*c == NULL || PQstatus(*c) != CONNECTION_OK) {
            PQfinish(*c);
            *c = connect_or_null(url);
            if (*c == NULL) {
                harness_sleep_ms(50);
                continue;
            }
        }
        if (!write_once(*c, acked)) {
            (*failed)++;
        }
    }
}

/*
 * The failure, on its own thread because a synchronous commit blocks the
 * writer: the standby's WAL receiver is stopped for a second (a standby
 * falling behind, as one does under load or on a slow link), the primary's
 * postmaster is SIGKILLed, the receiver resumed, the standby promoted.
 */
struct killer {
    pid_t postmaster, walreceiver;
    const char *standby_url;
    long long killed_at_ms;
    int promoted; /* 1 once pg_promote() answered true */
    char why[256];
    pthread_t thread;
};

static void *
killer_main(void *arg)
{
    struct killer *k = arg;
    PGconn *c;
    PGresult *res;

    kill(k->walreceiver, SIGSTOP);
    usleep(1000 * 1000);
    kill(k->postmaster, SIGKILL);
    k->killed_at_ms = harness_now_ms();
    while (kill(k->postmaster, 0) == 0) {
        usleep(10 * 1000);
    }
    /*
     * What it had not written yet dies with it (resumed, it would first
     * write the WAL still buffered in its socket, and the standby would not
     * be behind at all). The standby's postmaster restarts, still a standby.
     */
    kill(k->walreceiver, SIGKILL);
    /*
     * Promote, again until it takes: the standby restarts after its WAL
     * receiver's death, and pg_promote() is not waited for inside (replay
     * may cancel a waiting query, a recovery conflict).
     */
    c = PQconnectdb(k->standby_url);
    for (int tries = 0; tries < 600 && !k->promoted; tries++) {
        if (PQstatus(c) != CONNECTION_OK) {
            PQfinish(c);
            c = PQconnectdb(k->standby_url);
        }
        res = PQexec(c, "SELECT pg_is_in_recovery()");
        k->promoted =
            PQresultStatus(res) == PGRES_TUPLES_OK && strcmp(PQgetvalue(res, 0, 0), "f") == 0;
        PQclear(res);
        if (!k->promoted) {
            PQclear(PQexec(c, "SELECT pg_promote(false)"));
            snprintf(k->why, sizeof(k->why), "%s", PQerrorMessage(c));
            usleep(100 * 1000);
        }
    }
    PQfinish(c);
    return NULL;
}

static void
failover(int synchronous)
{
    struct obx_dev_pg a = {.durable = 1}, b = {.durable = 1};
    char url_a[128], url_both[256], env_url[300], data_b[128], port_b[16], err[1024] = "";
    char *migrate_env[] = {env_url, NULL};
    const char *stream = synchronous ? "T17_SYNC" : "T17_ASYNC";
    struct harness_proc relay;
    struct relay_env env;
    struct relay_check chk;
    struct id_set acked, s;
    PGconn *primary, *writer = NULL, *promoted;
    long long failed = 0, missing = 0, killed_at, found_ms;

    cr_assert_eq(obx_dev_pg_boot(dir_a, &a, err, sizeof(err)), 0, "%s", err);
    snprintf(url_a, sizeof(url_a), "postgresql://postgres@127.0.0.1:%d/postgres", a.port);
    snprintf(env_url, sizeof(env_url), "OUTBOX_DATABASE_URL=%s", url_a);
    cr_assert_eq(
        run((char *const[]){(char *)harness_bin("outboxctl"), "migrate", NULL}, migrate_env), 0,
        "outboxctl migrate failed");
    primary = connect_or_null(url_a);
    cr_assert_not_null(primary);
    harness_exec(primary, "CREATE TABLE public.committed (id uuid PRIMARY KEY)");

    /* The standby: a base backup with -R (standby.signal, primary_conninfo), its own port. */
    b = a;
    b.port = obx_dev_free_port();
    snprintf(data_b, sizeof(data_b), "%s/pg/data", dir_b);
    snprintf(port_b, sizeof(port_b), "%d", a.port);
    cr_assert_eq(run((char *const[]){"mkdir", "-p", data_b, NULL}, NULL), 0);
    cr_assert_eq(run((char *const[]){"pg_basebackup", "-h", "127.0.0.1", "-p", port_b, "-U",
                                     "postgres", "-D", data_b, "-R", "-X", "stream", NULL},
                     NULL),
                 0, "pg_basebackup failed");
    cr_assert_eq(run((char *const[]){"chown", "-R", "postgres:postgres", dir_b, NULL}, NULL), 0);
    cr_assert_eq(run((char *const[]){"chmod", "700", data_b, NULL}, NULL), 0);
    cr_assert_eq(obx_dev_pg_start(dir_b, &b, err, sizeof(err)), 0, "%s", err);
    HARNESS_WAIT_UNTIL(harness_scalar_ll(primary, "SELECT count(*) FROM pg_stat_replication "
                                                  "WHERE state = 'streaming'") == 1,
                       30000);
    if (synchronous) {
        harness_exec(primary, "ALTER SYSTEM SET synchronous_standby_names = '*'");
        harness_exec(primary, "SELECT pg_reload_conf()");
        HARNESS_WAIT_UNTIL(harness_scalar_ll(primary, "SELECT count(*) FROM pg_stat_replication "
                                                      "WHERE sync_state = 'sync'") == 1,
                           30000);
    }
    PQfinish(primary);

    snprintf(url_both, sizeof(url_both),
             "postgresql://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?"
             "target_session_attrs=read-write",
             a.port, b.port);
    relay_test_env(&env, stream, synchronous ? "t17sync" : "t17async");
    relay_env_set(&env, "OUTBOX_DATABASE_URL", url_both);
    relay_test_start(&relay, &env, "relay");
    id_set_init(&acked);
    write_for(&writer, url_both, &acked, 3000, &failed);

    /* The primary dies under load, its standby a second behind; the standby is promoted. */
    {
        char url_b[128];
        struct killer k = {0};

        snprintf(url_b, sizeof(url_b), "postgresql://postgres@127.0.0.1:%d/postgres", b.port);
        promoted = connect_or_null(url_b);
        cr_assert_not_null(promoted);
        k.postmaster = obx_dev_pg_postmaster_pid(dir_a);
        k.walreceiver = (pid_t)harness_scalar_ll(promoted, "SELECT pid FROM pg_stat_wal_receiver");
        k.standby_url = url_b;
        cr_assert(k.postmaster > 0 && k.walreceiver > 0);
        cr_assert_eq(pthread_create(&k.thread, NULL, killer_main, &k), 0);
        write_for(&writer, url_both, &acked, 3000, &failed);
        pthread_join(k.thread, NULL);
        killed_at = k.killed_at_ms;
        cr_assert(k.promoted, "the standby was not promoted: %s", k.why);
        PQfinish(promoted); /* from before the standby's restart */
        promoted = connect_or_null(url_b);
        cr_assert_not_null(promoted);
        obx_dev_pg_halt(dir_a); /* its orphaned backends, which exit on postmaster death anyway */
    }
    write_for(&writer, url_both, &acked, 2000, &failed);
    PQfinish(writer);
    HARNESS_WAIT_UNTIL(harness_scalar_ll(promoted, "SELECT count(*) FROM outbox.events WHERE "
                                                   "status IN ('pending', 'leased')") == 0,
                       60000);
    found_ms = harness_now_ms() - killed_at;
    relay_test_assert_running(&relay, "the relay (a failover must not need it restarted)");
    relay_test_stop(&relay, 10000);

    /* Acknowledged commits the new primary does not have. */
    id_set_sort(&acked);
    {
        PGresult *res = PQexec(promoted, "SELECT id::text FROM public.committed");
        struct id_set have;

        cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK);
        id_set_init(&have);
        for (int i = 0; i < PQntuples(res); i++) {
            id_set_add(&have, PQgetvalue(res, i, 0));
        }
        id_set_sort(&have);
        for (size_t i = 0; i < acked.count; i++) {
            missing += !id_set_has(&have, acked.ids[i]);
        }
        id_set_fini(&have);
        PQclear(res);
    }
    id_set_init(&s);
    cr_assert_eq(stream_read_ids(harness_nats_url(), stream, &s, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(relay_check_run(promoted, "SELECT id::text FROM public.committed", &s, &chk, err,
                                 sizeof(err)),
                 0, "%s", err);
    cr_log_info("T17 %s: %zu commits acknowledged (%lld transactions failed around the "
                "failover); on the new primary: %lld acknowledged missing, %zu ghost events "
                "(in the stream, business row gone), %zu committed events not in the stream; "
                "the relay drained %lld ms after the kill",
                synchronous ? "synchronous" : "asynchronous", acked.count, failed, missing,
                chk.phantom, chk.lost, found_ms);
    cr_assert_eq(chk.lost, 0, "committed events never reached the stream");
    cr_assert_eq(chk.stream_dups, 0);
    if (synchronous) {
        cr_assert_eq(missing, 0, "synchronous replication lost acknowledged commits");
        cr_assert_eq(chk.phantom, 0, "synchronous replication left ghost events");
    }
    id_set_fini(&s);
    id_set_fini(&acked);
    PQfinish(promoted);
    relay_env_fini(&env);
}

Test(failover, t17_synchronous_standby_loses_no_acknowledged_commit_and_leaves_no_ghost)
{
    failover(1);
}

Test(failover, t17_asynchronous_standby_figures_for_the_deployment_rule)
{
    failover(0);
}
