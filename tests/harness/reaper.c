/* SPDX-License-Identifier: MIT */
/*
 * reaper.c - tears the run down, at POST_ALL or, when the runner dies
 * without POST_ALL (SIGKILL from a ctest timeout, a crash, Ctrl-C), from
 * the reaper.
 *
 * The reaper is src/cli/devserver_reaper.c, shared with the demo and the
 * benchmark: the test binary executed again, which the constructor below
 * turns into the reaper before main(). A Criterion worker holds the
 * runner's end of its pipe only between its fork and its exec.
 */
#include "harness_int.h"

#include <stdio.h>
#include <unistd.h>

#include "devserver/devserver_reaper.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define REAPER_ENV "OBX_HARNESS_REAPER"

static int reaper_write_fd = -1;

int
hx_reaper_start(const char *run_dir, pid_t *reaper_pid, char *err, size_t len)
{
    return obx_dev_reaper_start(REAPER_ENV, run_dir, reaper_pid, &reaper_write_fd, err, len);
}

void
hx_reaper_release(void)
{
    if (reaper_write_fd >= 0) {
        close(reaper_write_fd);
        reaper_write_fd = -1;
    }
}

void
hx_teardown(const char *run_dir)
{
    struct hx_state st;

    if (run_dir == NULL || access(run_dir, F_OK) != 0) {
        return;
    }
    if (hx_state_read(run_dir, &st) == 0 && !st.pg_owned && st.template_db[0] != '\0') {
        hx_dbs_drop_all(&st); /* an external server outlives us: leave it clean */
    }
    /* Spawned groups first: socat's connection children name no run dir for the sweep. */
    hx_procs_kill_recorded(run_dir);
    /* Our servers, and anything else whose command line names the run dir. */
    obx_dev_teardown(run_dir);
}

/* Runs before main() in every binary linking the harness; only the reaper stays here. */
__attribute__((constructor)) static void
reaper_main(void)
{
    obx_dev_reaper_serve(REAPER_ENV, hx_teardown);
}
