/* SPDX-License-Identifier: MIT */
/*
 * servers.c - real PostgreSQL and nats-server for integration tests.
 *
 * Started once per test binary, before Criterion starts its workers, unless
 * OUTBOX_TEST_DATABASE_URL / OUTBOX_TEST_NATS_URL already point at servers.
 * Linked as an object (not from a static library), or the hooks are dropped.
 *
 * How Criterion 2.4.1 runs tests (checked on Debian 12, libcriterion3
 * 2.4.1-2, which bundles BoxFort), and what follows for the harness:
 *
 *  - PRE_ALL and POST_ALL run in the runner, the process ctest started, in
 *    its main thread. A second thread already exists by PRE_ALL, so every
 *    fork here execs at once (src/cli/devserver_exec.c).
 *  - Each test runs in its own worker: BoxFort fork()s the runner, sets
 *    PR_SET_PDEATHSIG(SIGKILL), then execl()s /proc/self/exe as
 *    "boxfort-worker". The worker is a fresh image: no memory of the runner
 *    survives, but the environment does (execl passes environ), and
 *    getppid() is the runner. So setenv() in PRE_ALL reaches every test
 *    (test_harness.c checks that a worker sees the URLs exported here); all
 *    other state a worker needs travels in OBX_HARNESS_DIR and the state
 *    file in that dir (run.c).
 *  - .init, the test and .fini run in the worker, which then calls exit(),
 *    so atexit handlers run after passing, failing and skipped tests, but
 *    not after a crash or a timeout (the runner SIGKILLs the worker): spawned
 *    processes die through PR_SET_PDEATHSIG then, and their groups are
 *    recorded for the teardown (spawn.c).
 *  - The runner reaps workers from a thread that calls waitid(P_ALL, ...,
 *    WNOWAIT) and only reaps pids it knows. Any other child of the runner
 *    that dies while tests run is never reaped, and that thread spins on it
 *    forever: the run hangs (seen: a child forked in PRE_ALL that exits
 *    300 ms later hangs a 3-test binary until killed). So nothing the
 *    harness starts may stay a child of the runner: nats-server and the
 *    reaper are double-forked daemons, pg_ctl detaches the postmaster
 *    itself, and short-lived helpers are reaped before PRE_ALL returns.
 */
#include "harness_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/internal/ordered-set.h>

#include "devserver/devserver_pg.h"
#include "devserver/devserver_probe.h"
#include "devserver/devserver_reaper.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static char run_dir[512];

/* <TMPDIR or /tmp>/obx-harness-XXXXXX with logs/ and procs/, exported to workers. */
static int
make_run_dir(char *err, size_t len)
{
    char sub[600];

    if (obx_dev_make_dir(NULL, "obx-harness", run_dir, sizeof(run_dir), err, len) != 0) {
        return -1;
    }
    if (obx_dev_path(sub, sizeof(sub), run_dir, "logs") != 0 || mkdir(sub, 0700) != 0 ||
        obx_dev_path(sub, sizeof(sub), run_dir, "procs") != 0 || mkdir(sub, 0700) != 0) {
        snprintf(err, len, "mkdir %s: %s", sub, strerror(errno));
        return -1;
    }
    return setenv(HX_ENV_DIR, run_dir, 1);
}

/* The timeout Criterion applies to `t`: its own, else its suite's; 0 for none. */
static double
effective_timeout(const struct criterion_suite_set *suite, const struct criterion_test *t)
{
    if (t->data != NULL && t->data->timeout > 0) {
        return t->data->timeout;
    }
    return suite->suite.data != NULL ? suite->suite.data->timeout : 0;
}

/*
 * Gives every test that has a timeout the binary's longest one.
 *
 * BoxFort (bundled in Criterion 2.4.1) keeps pending timeouts in a list
 * sorted by deadline, and its sorted insert never links the new entry to
 * the rest: a test that starts with an earlier deadline than a running one
 * cuts the running tests' timeouts off the list. Seen: with --jobs=2, a test
 * sleeping 10 s in a suite with .timeout = 3 passed because a .timeout = 1
 * test started next to it; LeakSanitizer also reports the lost entries. With
 * one value, each new deadline is the latest and is appended, which works.
 */
static void
align_timeouts(struct criterion_test_set *tests)
{
    double longest = 0;
    int differ = 0;

    for (int pass = 0; pass < 2; pass++) {
        for (struct criterion_ordered_set_node *sn = tests->suites->first; sn; sn = sn->next) {
            struct criterion_suite_set *suite = (void *)(sn + 1);

            for (struct criterion_ordered_set_node *tn = suite->tests ? suite->tests->first : NULL;
                 tn != NULL; tn = tn->next) {
                struct criterion_test *t = (void *)(tn + 1);
                double timeout = effective_timeout(suite, t);

                if (pass == 0 && timeout > 0) {
                    differ |= longest > 0 && timeout != longest;
                    longest = timeout > longest ? timeout : longest;
                } else if (pass == 1 && timeout > 0 && t->data != NULL) {
                    t->data->timeout = longest;
                }
            }
        }
        if (!differ) {
            return;
        }
    }
    fprintf(stderr,
            "harness: .timeout values differ in this binary; every test gets %.0f s "
            "(Criterion 2.4.1 loses running tests' timeouts otherwise, see servers.c)\n",
            longest);
}

static int
boot(char *err, size_t len)
{
    struct hx_state st;

    memset(&st, 0, sizeof(st));
    st.runner_pid = getpid();
    if (make_run_dir(err, len) != 0 || hx_state_write(run_dir, &st) != 0 ||
        hx_reaper_start(run_dir, &st.reaper_pid, err, len) != 0 ||
        hx_state_write(run_dir, &st) != 0) {
        return -1;
    }
    if (getenv(HX_ENV_PG) == NULL && hx_pg_boot(run_dir, &st, err, len) != 0) {
        hx_state_write(run_dir, &st); /* so the teardown finds what did start */
        return -1;
    }
    if (hx_state_write(run_dir, &st) != 0 || hx_template_create(&st, err, len) != 0) {
        hx_state_write(run_dir, &st);
        return -1;
    }
    if (getenv(HX_ENV_NATS) == NULL && hx_nats_boot(run_dir, &st, err, len) != 0) {
        hx_state_write(run_dir, &st);
        return -1;
    }
    if (hx_state_write(run_dir, &st) != 0) {
        snprintf(err, len, "cannot write %s/state", run_dir);
        return -1;
    }
    return 0;
}

ReportHook(PRE_ALL)(struct criterion_test_set *tests)
{
    char err[4096] = "";

    align_timeouts(tests);
    if (boot(err, sizeof(err)) != 0) {
        /* No test can pass without its servers: say why once, not once per test. */
        fprintf(stderr, "harness: could not start the test servers: %s\n", err);
        hx_teardown(run_dir[0] != '\0' ? run_dir : NULL);
        hx_reaper_release();
        exit(2);
    }
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    hx_teardown(run_dir[0] != '\0' ? run_dir : NULL); /* stops only what PRE_ALL started */
    hx_reaper_release();
}

void
harness_describe(FILE *out)
{
    const char *dir = hx_run_dir();
    struct hx_state st;

    hx_state_load(&st);
    fprintf(out, "run_dir=%s\nrunner_pid=%d\nreaper_pid=%d\n", dir, (int)st.runner_pid,
            (int)st.reaper_pid);
    fprintf(out, "pg_owned=%d\npg_port=%d\npg_pid=%d\ntemplate_db=%s\n", st.pg_owned, st.pg.port,
            st.pg_owned ? (int)obx_dev_pg_postmaster_pid(dir) : 0, st.template_db);
    fprintf(out, "nats_owned=%d\nnats_port=%d\nnats_pid=%d\n", st.nats_owned, st.nats.port,
            (int)st.nats.pid);
    fprintf(out, "database_url=%s\nnats_url=%s\n", getenv(HX_ENV_PG) ? getenv(HX_ENV_PG) : "",
            getenv(HX_ENV_NATS) ? getenv(HX_ENV_NATS) : "");
}
