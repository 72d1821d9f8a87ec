/* SPDX-License-Identifier: MIT */
/*
 * test_writer_faults.c - FAULTS.md T09, shortened for CI: a writer process
 * dies in the middle of its business transaction, (a) SIGKILLed before it
 * sends COMMIT, (b) SIGKILLed right after sending COMMIT, before the
 * answer, and (c) its connection is cut at that same point (the socat
 * proxy between it and PostgreSQL SIGKILLed, by the writer's own fault
 * hook so the timing is exact).
 *
 * The writer is a forked child of the test that journals, before each
 * COMMIT, the transaction's pg_current_xact_id() and event ids (what a real
 * writer keeps to resolve an ambiguous commit). In (c) the writer itself
 * resolves the commit with pg_xact_status() over a new connection, as the
 * docs/writing-events.md tells writers to. Afterwards, with relays publishing throughout:
 * no business row without its outbox row and no outbox row without its
 * business row; every journaled transaction is resolved (committed or
 * aborted, never left in doubt), and its rows exist exactly when it
 * committed; the stream holds exactly the committed events.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "conservation.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = chaos_begin(relay_test_prepare, 0);
}

static void
teardown(void)
{
    chaos_end(&conn);
}

TestSuite(writer_faults, .init = setup, .fini = teardown, .timeout = 180);

enum fault { KILL_BEFORE_COMMIT, KILL_AFTER_COMMIT_SENT, CUT_AFTER_COMMIT_SENT };

static const char *const fault_names[] = {"killed before COMMIT", "killed after sending COMMIT",
                                          "connection cut after sending COMMIT"};

/* ---- the writer process (never touches Criterion) ----------------------------------- */

static void
journal(int fd, const char *line)
{
    size_t len = strlen(line);

    if (write(fd, line, len) != (ssize_t)len) {
        _exit(3);
    }
}

static PGresult *
must(PGconn *c, const char *sql, ExecStatusType want)
{
    PGresult *res = PQexec(c, sql);

    if (PQresultStatus(res) != want) {
        _exit(4);
    }
    return res;
}

/*
 * Resolves the fate of transaction `xid` after its COMMIT's answer was
 * lost: pg_xact_status() says committed or aborted once the old backend
 * has noticed its client is gone ("in progress" until then).
 */
static const char *
resolve(const char *url, const char *xid)
{
    const char *params[] = {xid};

    for (int tries = 0; tries < 1000; tries++) {
        PGconn *c = PQconnectdb(url);
        PGresult *res =
            PQexecParams(c, "SELECT pg_xact_status($1::xid8)", 1, NULL, params, NULL, NULL, 0);
        const char *status = PQresultStatus(res) == PGRES_TUPLES_OK && !PQgetisnull(res, 0, 0)
                                 ? PQgetvalue(res, 0, 0)
                                 : "";
        const char *out = strcmp(status, "committed") == 0 ? "committed"
                          : strcmp(status, "aborted") == 0 ? "aborted"
                                                           : NULL;

        PQclear(res);
        PQfinish(c);
        if (out != NULL) {
            return out;
        }
        usleep(10000);
    }
    return "unresolved";
}

/* Commits `clean` transactions, then dies (or loses its connection) in the next one. */
static void
writer_child(const char *url, const char *direct_url, enum fault fault, int clean,
             const char *journal_path, pid_t proxy_pgid)
{
    PGconn *c = PQconnectdb(url);
    int fd = open(journal_path, O_WRONLY | O_APPEND);
    char line[256];

    if (PQstatus(c) != CONNECTION_OK || fd < 0) {
        _exit(2);
    }
    for (int i = 0;; i++) {
        PGresult *xid, *ids, *res;

        PQclear(must(c, "BEGIN", PGRES_COMMAND_OK));
        xid = must(c, "SELECT pg_current_xact_id()::text", PGRES_TUPLES_OK);
        ids = must(c,
                   "INSERT INTO committed SELECT outbox.enqueue('movie', gen_random_uuid(), "
                   "'review.logged', jsonb_build_object('n', g)) FROM generate_series(1, 2) AS g "
                   "RETURNING id::text",
                   PGRES_TUPLES_OK);
        snprintf(line, sizeof(line), "begin %s %s %s\n", PQgetvalue(xid, 0, 0),
                 PQgetvalue(ids, 0, 0), PQgetvalue(ids, 1, 0));
        journal(fd, line); /* before COMMIT: what a restarted writer resolves from */
        if (i == clean) {
            if (fault == KILL_BEFORE_COMMIT) {
                raise(SIGKILL);
            }
            if (!PQsendQuery(c, "COMMIT")) { /* blocking: the whole message is sent */
                _exit(5);
            }
            if (fault == KILL_AFTER_COMMIT_SENT) {
                raise(SIGKILL);
            }
            kill(-proxy_pgid, SIGKILL); /* CUT_AFTER_COMMIT_SENT */
            res = PQgetResult(c);
            if (PQresultStatus(res) == PGRES_COMMAND_OK) { /* the answer beat the cut */
                snprintf(line, sizeof(line), "ok %s\n", PQgetvalue(xid, 0, 0));
            } else {
                snprintf(line, sizeof(line), "resolved %s %s\n", PQgetvalue(xid, 0, 0),
                         resolve(direct_url, PQgetvalue(xid, 0, 0)));
            }
            journal(fd, line);
            _exit(0);
        }
        res = must(c, "COMMIT", PGRES_COMMAND_OK);
        snprintf(line, sizeof(line), "ok %s\n", PQgetvalue(xid, 0, 0));
        journal(fd, line);
        PQclear(res);
        PQclear(ids);
        PQclear(xid);
    }
}

/* ---- the test's side --------------------------------------------------------------- */

/* Runs one writer to its fault; returns its wait status. */
static int
run_writer(const char *url, enum fault fault, int clean, const char *journal_path, pid_t proxy_pgid)
{
    pid_t pid;
    int status = 0;

    fflush(NULL);
    pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        writer_child(url, harness_db_url(), fault, clean, journal_path, proxy_pgid);
    }
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    return status;
}

static long long
count_rows_of(const char *table, const char *id)
{
    const char *params[] = {id};
    char sql[128];
    PGresult *res;
    long long n;

    snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE id = $1::uuid", table);
    res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
    n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return n;
}

struct tally {
    int transactions, acknowledged, in_doubt, resolved_committed, resolved_aborted;
    int writer_resolved;
};

/*
 * Reads the journal: each transaction that was begun is acknowledged,
 * resolved by the writer, or in doubt (the writer died): the last kind is
 * resolved here with pg_xact_status(), as a restarted writer would. Each
 * resolution must match the rows: both present if committed, neither if not.
 */
static struct tally
check_journal(const char *journal_path)
{
    struct tally t = {0};
    FILE *f = fopen(journal_path, "r");
    char line[256], xid[32], a[40], b[40], status[32];
    char pending_xid[32] = "", pending_a[40] = "", pending_b[40] = "";

    cr_assert_not_null(f);
    for (int done = 0; !done;) {
        int have_line = fgets(line, sizeof(line), f) != NULL;
        const char *fate = NULL;

        if (!have_line || strncmp(line, "begin ", 6) == 0) {
            if (pending_xid[0] != '\0') { /* the writer died in doubt */
                const char *params[] = {pending_xid};
                char *st;

                t.in_doubt++;
                for (;;) {
                    PGresult *res = PQexecParams(conn, "SELECT pg_xact_status($1::xid8)", 1, NULL,
                                                 params, NULL, NULL, 0);

                    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQerrorMessage(conn));
                    st = strdup(PQgetvalue(res, 0, 0));
                    PQclear(res);
                    if (strcmp(st, "in progress") != 0) {
                        break;
                    }
                    free(st);
                    harness_sleep_ms(10);
                }
                cr_assert(strcmp(st, "committed") == 0 || strcmp(st, "aborted") == 0,
                          "transaction %s: pg_xact_status says %s", pending_xid, st);
                fate = strcmp(st, "committed") == 0 ? "committed" : "aborted";
                free(st);
            }
        } else if (sscanf(line, "ok %31s", xid) == 1) {
            cr_assert_str_eq(xid, pending_xid);
            t.acknowledged++;
            fate = "committed";
        } else if (sscanf(line, "resolved %31s %31s", xid, status) == 2) {
            cr_assert_str_eq(xid, pending_xid);
            cr_assert(strcmp(status, "unresolved") != 0, "the writer left %s in doubt", xid);
            t.writer_resolved++;
            fate = status;
        }
        if (fate != NULL) {
            long long want = strcmp(fate, "committed") == 0;

            t.resolved_committed += (int)want;
            t.resolved_aborted += (int)!want;
            for (int k = 0; k < 2; k++) {
                const char *id = k == 0 ? pending_a : pending_b;

                cr_assert_eq(count_rows_of("public.committed", id), want,
                             "transaction %s is %s but business row %s %s", pending_xid, fate, id,
                             want ? "is missing" : "exists");
                cr_assert_eq(count_rows_of("outbox.events", id), want,
                             "transaction %s is %s but outbox row %s %s", pending_xid, fate, id,
                             want ? "is missing" : "exists");
            }
            pending_xid[0] = '\0';
        }
        if (!have_line) {
            done = 1;
        } else if (sscanf(line, "begin %31s %39s %39s", xid, a, b) == 3) {
            t.transactions++;
            snprintf(pending_xid, sizeof(pending_xid), "%s", xid);
            snprintf(pending_a, sizeof(pending_a), "%s", a);
            snprintf(pending_b, sizeof(pending_b), "%s", b);
        }
    }
    fclose(f);
    return t;
}

static int
nothing_unfinished(void *arg)
{
    (void)arg;
    return relay_test_unfinished(conn) == 0;
}

static void
writer_dies(enum fault fault)
{
    enum { ROUNDS = 30 };
    char journal_path[] = "/tmp/obx-writer-journal-XXXXXX";
    int fd = mkstemp(journal_path);
    struct harness_proxy px = {0};
    struct harness_proc relays[2];
    struct relay_env env;
    struct conservation c;
    struct tally t;
    char stream[32], prefix[32];

    cr_assert_geq(fd, 0);
    close(fd);
    snprintf(stream, sizeof(stream), "T09_%d", (int)fault);
    snprintf(prefix, sizeof(prefix), "t09f%d", (int)fault);
    relay_test_env(&env, stream, prefix);
    for (int i = 0; i < 2; i++) {
        char name[32];

        snprintf(name, sizeof(name), "relay-%d", i + 1);
        relay_test_start(&relays[i], &env, name);
    }
    for (int round = 0; round < ROUNDS; round++) {
        char *url = NULL;
        int status;

        if (fault == CUT_AFTER_COMMIT_SENT) {
            harness_proxy_start(&px, harness_pg_port());
            url = harness_db_url_via(px.port);
        }
        status = run_writer(url != NULL ? url : harness_db_url(), fault, chaos_random_ms(0, 5),
                            journal_path, px.proc.pid);
        if (fault == CUT_AFTER_COMMIT_SENT) {
            cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer status %d", status);
            harness_proxy_stop(&px); /* reaps the proxy the writer killed */
            free(url);
        } else {
            cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "writer status %d",
                      status);
        }
    }
    t = check_journal(journal_path);
    cr_log_info("T09 %s: %d writers, %d transactions: %d acknowledged, %d resolved by the "
                "writer, %d in doubt resolved afterwards; %d committed, %d aborted",
                fault_names[fault], ROUNDS, t.transactions, t.acknowledged, t.writer_resolved,
                t.in_doubt, t.resolved_committed, t.resolved_aborted);
    cr_assert_eq(t.acknowledged + t.writer_resolved + t.in_doubt, t.transactions,
                 "a transaction was never resolved");
    if (fault == KILL_BEFORE_COMMIT) {
        cr_assert_eq(t.in_doubt, ROUNDS);
        cr_assert_eq(t.resolved_aborted, ROUNDS, "a transaction killed before COMMIT committed");
    } else if (fault == KILL_AFTER_COMMIT_SENT) {
        cr_assert_eq(t.in_doubt, ROUNDS, "every killed writer leaves one commit in doubt");
    } else {
        cr_assert_eq(t.writer_resolved + (t.acknowledged - (t.transactions - ROUNDS)), ROUNDS);
    }
    if (!harness_wait_until(nothing_unfinished, NULL, 30000)) {
        char *states = harness_scalar_text(conn, "SELECT string_agg(status || ' ' || n, ', ') "
                                                 "FROM (SELECT status, count(*) AS n FROM "
                                                 "outbox.events GROUP BY status) s");

        cr_assert_fail("rows unfinished after 30 s (%s); relay log ends:\n%s", states,
                       harness_proc_log(&relays[0]));
    }
    for (int i = 0; i < 2; i++) {
        relay_test_stop(&relays[i], 10000);
    }
    c = conservation_expect_zero(conn, stream, NULL);
    cr_assert_eq(c.base.committed, (size_t)(2 * t.resolved_committed));
    cr_assert_eq(c.base.stream, c.base.committed);
    unlink(journal_path);
    relay_env_fini(&env);
}

Test(writer_faults, t09a_writer_killed_before_commit_leaves_no_orphan_and_no_message)
{
    writer_dies(KILL_BEFORE_COMMIT);
}

Test(writer_faults, t09b_writer_killed_after_sending_commit_is_resolved_by_pg_xact_status)
{
    writer_dies(KILL_AFTER_COMMIT_SENT);
}

Test(writer_faults, t09c_connection_cut_after_commit_is_resolved_by_the_writer_itself)
{
    writer_dies(CUT_AFTER_COMMIT_SENT);
}
