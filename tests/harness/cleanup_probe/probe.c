/* SPDX-License-Identifier: MIT */
/*
 * probe.c - a harness run for tests/scripts/check_harness_cleanup.sh to
 * inspect: it starts the servers, spawns a process it never stops, writes
 * what it started to $OBX_PROBE_INFO and fails one test on purpose. With
 * OBX_PROBE_HANG set it then waits to be SIGKILLed. The script checks that
 * nothing of the run outlives it. Not a test_*.c: ctest runs it only
 * through the script.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "harness.h"

TestSuite(cleanup_probe, .timeout = 120);

static int
file_exists(void *path)
{
    return access(path, F_OK) == 0;
}

static void
write_info(const char *path, PGconn *conn, const struct harness_proc *forgotten)
{
    char tmp[1024];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    cr_assert_not_null(f, "cannot write %s", tmp);
    harness_describe(f);
    fprintf(f, "worker_pid=%d\nspawned_pid=%d\nfresh_db=%s\n", (int)getpid(), (int)forgotten->pid,
            PQdb(conn));
    fclose(f);
    /* The script polls for the file: it sees all of it or nothing. */
    cr_assert_eq(rename(tmp, path), 0);
}

Test(cleanup_probe, records_what_the_harness_started)
{
    const char *info = getenv("OBX_PROBE_INFO");
    char *argv[] = {"sleep", "300", NULL};
    struct harness_proc forgotten; /* never stopped here: the harness must */
    PGconn *conn;

    cr_assert_not_null(info, "set OBX_PROBE_INFO to the file the probe reports to");
    conn = harness_pg_connect_fresh();
    cr_assert_not_null(harness_nats_url());
    harness_spawn(&forgotten, argv, NULL);
    write_info(info, conn, &forgotten);
    PQfinish(conn);
    if (getenv("OBX_PROBE_HANG") != NULL) {
        /* The script SIGKILLs the runner while this waits for a file that never comes. */
        harness_wait_until(file_exists, "/nonexistent/obx-probe", 100 * 1000);
    }
}

Test(cleanup_probe, fails_on_purpose)
{
    cr_assert_fail("deliberate failure: the harness must clean up after a failing run too");
}
