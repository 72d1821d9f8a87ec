/* SPDX-License-Identifier: MIT */
/*
 * test_pg_disk_full.c - FAULTS.md T16, shortened for CI: a PostgreSQL
 * cluster of its own whose data directory (WAL included) is on a 160 MiB
 * tmpfs, a relay publishing from it, and a writer committing large
 * incompressible events until the disk is full (53100 disk_full, or a WAL
 * write PANIC that takes the server down).
 *
 * Pass: every commit the writer saw acknowledged is there; no business
 * row without its outbox row or the reverse; no attempt burned; after the
 * tmpfs is grown and the server restarted, the relay (never restarted)
 * publishes every committed event: lost 0, phantom 0. Skips, saying why,
 * where tmpfs cannot be mounted (not root).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "conservation.h"
#include "devserver/devserver_pg.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn; /* the harness's database: only for chaos_begin's seed */
static char dir[64];
static int mounted, booted;

static int
run(char *const argv[], char *const env[])
{
    return harness_run(argv, env, 60000);
}

static void
setup(void)
{
    conn = chaos_begin(NULL, 0);
    snprintf(dir, sizeof(dir), "/tmp/obx-pg-tmpfs-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    mounted = booted = 0;
}

static void
teardown(void)
{
    if (booted) {
        obx_dev_pg_halt(dir);
    }
    if (mounted) {
        run((char *const[]){"umount", dir, NULL}, NULL);
    }
    rmdir(dir);
    chaos_end(&conn);
}

TestSuite(pg_disk_full, .init = setup, .fini = teardown, .timeout = 300);

static long long
ll(PGconn *c, const char *sql)
{
    return harness_scalar_ll(c, sql);
}

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

Test(pg_disk_full, t16_a_full_disk_leaves_no_orphan_and_everything_committed_is_published)
{
    struct obx_dev_pg pg = {.durable = 1};
    char url[128], env_url[160], err[512] = "";
    char *migrate_env[] = {env_url, NULL};
    struct harness_proc relay;
    struct relay_env env;
    struct conservation c;
    PGconn *db, *writer;
    long long acknowledged = 0, failures = 0, disk_full = 0, lost_connection = 0;
    long long started;
    int server_died;

    if (run((char *const[]){"mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", dir, NULL}, NULL) !=
        0) {
        cr_skip_test("cannot mount a tmpfs here (mount needs root): no way to fill PostgreSQL's "
                     "disk without filling the machine's");
    }
    mounted = 1;
    booted = 1;
    cr_assert_eq(obx_dev_pg_boot(dir, &pg, err, sizeof(err)), 0, "%s", err);
    snprintf(url, sizeof(url), "postgresql://postgres@127.0.0.1:%d/postgres", pg.port);
    snprintf(env_url, sizeof(env_url), "OUTBOX_DATABASE_URL=%s", url);
    cr_assert_eq(
        run((char *const[]){(char *)harness_bin("outboxctl"), "migrate", NULL}, migrate_env), 0,
        "outboxctl migrate failed");
    db = connect_or_null(url);
    cr_assert_not_null(db);
    harness_exec(db, "CREATE TABLE public.committed (id uuid PRIMARY KEY)");

    relay_test_env(&env, "T16", "t16");
    relay_env_set(&env, "OUTBOX_DATABASE_URL", url);
    relay_test_start(&relay, &env, "relay");

    /* Large events whose payload compresses badly (hex of random md5s), until the disk is full. */
    writer = connect_or_null(url);
    cr_assert_not_null(writer);
    started = harness_now_ms();
    while (harness_now_ms() - started < 90000 && (disk_full + lost_connection) < 3 &&
           failures < 200) {
        PGresult *res =
            PQexec(writer, "INSERT INTO public.committed SELECT outbox.enqueue('movie', "
                           "gen_random_uuid(), 'review.logged', jsonb_build_object('fill', (SELECT "
                           "string_agg(md5(random()::text || x), '') FROM generate_series(1, 1000) "
                           "AS s(x)))) FROM generate_series(1, 5) AS g");

        if (PQresultStatus(res) == PGRES_COMMAND_OK) {
            acknowledged += 5;
        } else {
            const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

            if (failures++ == 0 || (failures % 50) == 0) {
                cr_log_info("T16: failure %lld: %s", failures, PQerrorMessage(writer));
            }
            disk_full += state != NULL && strcmp(state, "53100") == 0;
            if (PQstatus(writer) != CONNECTION_OK) {
                lost_connection++;
                PQfinish(writer);
                writer = connect_or_null(url);
                if (writer == NULL) {
                    PQclear(res);
                    break; /* the server is down: a WAL write PANIC */
                }
            }
        }
        PQclear(res);
    }
    if (writer != NULL) {
        PQfinish(writer);
    }
    PQfinish(db);
    db = connect_or_null(url);
    server_died = obx_dev_pg_postmaster_pid(dir) == 0 || db == NULL;
    cr_log_info("T16: %lld events acknowledged, %lld failed statements (%lld disk_full, %lld lost "
                "connections) in %lld ms; the server %s",
                acknowledged, failures, disk_full, lost_connection, harness_now_ms() - started,
                server_died ? "went down" : "stayed up");
    cr_assert_gt(acknowledged, 0, "nothing committed before the disk filled");
    cr_assert_gt(disk_full + lost_connection, 0, "the disk never filled: the test proved nothing");

    /* Space freed, the server restarted: the relay must find it again by itself. */
    cr_assert_eq(run((char *const[]){"mount", "-o", "remount,size=512m", dir, NULL}, NULL), 0);
    PQfinish(db);
    if (!server_died) {
        obx_dev_pg_stop(dir, &pg, "fast", err, sizeof(err));
    }
    cr_assert_eq(obx_dev_pg_start(dir, &pg, err, sizeof(err)), 0, "%s", err);
    db = connect_or_null(url);
    cr_assert_not_null(db, "the server did not come back");
    cr_assert_geq(ll(db, "SELECT count(*) FROM public.committed"), acknowledged,
                  "acknowledged commits are missing");
    HARNESS_WAIT_UNTIL(ll(db, "SELECT count(*) FROM outbox.events WHERE status IN "
                              "('pending', 'leased')") == 0,
                       90000);
    relay_test_assert_running(&relay, "the relay (a full disk must not need it restarted)");
    relay_test_stop(&relay, 10000);
    cr_assert_eq(ll(db, "SELECT coalesce(sum(attempts), 0) FROM outbox.events"), 0,
                 "a full disk burned attempts");
    cr_assert_eq(ll(db, "SELECT count(*) FROM outbox.events WHERE status IN ('dead', 'invalid')"),
                 0);
    c = conservation_expect_zero(db, "T16", NULL);
    cr_log_info("T16: after the restart %zu committed events, all %zu in the stream",
                c.base.committed, c.base.stream);
    PQfinish(db);
    relay_env_fini(&env);
}
