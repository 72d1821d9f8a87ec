/* SPDX-License-Identifier: MIT */
/*
 * nats_server.c - the run's nats-server and the faults tests inject into it.
 *
 * The server itself (nats-server -js on a port it picks, readiness, halt)
 * is src/cli/devserver_nats.c, shared with the demo and the benchmark; it
 * lives in <run>/nats. What is left here is the harness's part: the URL for
 * the workers, whether the server is running, stopped or dead, and kill,
 * restart and restart-with-arguments under the servers lock. Restarts reuse
 * the port and the store, so clients reconnect to the same URL and streams
 * survive.
 */
#include "harness_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "devserver/devserver_nats.h"
#include "devserver/devserver_probe.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { NATS_STOP_TIMEOUT_MS = 10 * 1000, MAX_EXTRA = OBX_DEV_NATS_MAX_EXTRA };

/* Extra arguments this worker restarted the server with; reused by harness_nats_start(). */
static char *saved_extra[MAX_EXTRA + 1];

int
hx_nats_launch(const char *run_dir, struct hx_state *st, char *const extra[], char *err, size_t len)
{
    int rc = obx_dev_nats_launch(run_dir, &st->nats, extra, err, len);

    st->nats_status = rc == 0 ? HX_NATS_RUNNING : HX_NATS_DEAD;
    return rc;
}

void
hx_nats_halt(const char *run_dir, struct hx_state *st, int graceful)
{
    obx_dev_nats_halt(run_dir, &st->nats, graceful);
    st->nats_status = HX_NATS_DEAD;
}

int
hx_nats_boot(const char *run_dir, struct hx_state *st, char *err, size_t len)
{
    char url[64];

    if (obx_dev_nats_boot(run_dir, &st->nats, err, len) != 0) {
        st->nats_status = HX_NATS_DEAD;
        return -1;
    }
    st->nats_status = HX_NATS_RUNNING;
    st->nats_owned = 1;
    /* Workers are fresh processes: the runner's nats.c threads must not linger. */
    nats_CloseAndWait(5000);
    snprintf(url, sizeof(url), "nats://127.0.0.1:%d", st->nats.port);
    return setenv(HX_ENV_NATS, url, 1);
}

/* ---- faults ---------------------------------------------------------------------------- */

const char *
harness_nats_url(void)
{
    const char *url = getenv(HX_ENV_NATS);

    cr_assert(url != NULL && url[0] != '\0', "harness: %s is not set", HX_ENV_NATS);
    hx_servers_lock(0);
    return url;
}

int
harness_nats_port(void)
{
    struct hx_state st;

    hx_state_load(&st);
    hx_require_owned(st.nats_owned, "nats-server", HX_ENV_NATS);
    hx_servers_lock(0);
    return st.nats.port;
}

/* The state after taking the lock exclusively, skipping if the server is not ours. */
static void
load_owned_exclusive(struct hx_state *st)
{
    hx_state_load(st);
    hx_require_owned(st->nats_owned, "nats-server", HX_ENV_NATS);
    harness_servers_exclusive();
    hx_state_load(st);
}

static void
save_state(const struct hx_state *st)
{
    const char *dir = hx_run_dir();

    cr_assert(hx_state_write(dir, st) == 0, "harness: cannot write %s/state", dir);
}

void
harness_nats_kill(int sig)
{
    struct hx_state st;
    int ending = sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGQUIT;

    load_owned_exclusive(&st);
    cr_assert(!obx_dev_pid_gone(st.nats.pid), "harness_nats_kill(%d): nats-server is not running",
              sig);
    cr_assert(kill(st.nats.pid, sig) == 0, "harness_nats_kill(%d): %s", sig, strerror(errno));
    if (ending) {
        cr_assert(obx_dev_wait_pid_gone(st.nats.pid, NATS_STOP_TIMEOUT_MS),
                  "harness_nats_kill(%d): nats-server %d still runs after %d ms", sig,
                  (int)st.nats.pid, NATS_STOP_TIMEOUT_MS);
        hx_nats_halt(hx_run_dir(), &st, 0); /* removes the ports file */
    } else if (sig == SIGSTOP) {
        HARNESS_WAIT_UNTIL(obx_dev_pid_stopped(st.nats.pid), NATS_STOP_TIMEOUT_MS);
        st.nats_status = HX_NATS_STOPPED;
    } else if (sig == SIGCONT) {
        HARNESS_WAIT_UNTIL(!obx_dev_pid_stopped(st.nats.pid), NATS_STOP_TIMEOUT_MS);
        st.nats_status = HX_NATS_RUNNING;
    }
    save_state(&st);
}

void
harness_nats_start(void)
{
    struct hx_state st;
    char err[2048];
    int rc;

    load_owned_exclusive(&st);
    cr_assert(obx_dev_pid_gone(st.nats.pid),
              "harness_nats_start: nats-server %d is still running; kill it first",
              (int)st.nats.pid);
    rc = hx_nats_launch(hx_run_dir(), &st, saved_extra, err, sizeof(err));
    save_state(&st);
    cr_assert(rc == 0, "harness_nats_start on port %d: %s", st.nats.port, err);
}

void
harness_nats_restart_with_args(char *const extra[])
{
    struct hx_state st;
    char err[2048];
    size_t n = 0;
    int rc;

    load_owned_exclusive(&st);
    for (size_t i = 0; saved_extra[i] != NULL; i++) {
        free(saved_extra[i]);
        saved_extra[i] = NULL;
    }
    for (; extra != NULL && extra[n] != NULL; n++) {
        cr_assert(n < MAX_EXTRA, "harness_nats_restart_with_args: more than %d", MAX_EXTRA);
        saved_extra[n] = strdup(extra[n]);
    }
    hx_nats_halt(hx_run_dir(), &st, 1);
    st.nats_custom = n > 0; /* so the next test's lock restores the defaults */
    rc = hx_nats_launch(hx_run_dir(), &st, saved_extra, err, sizeof(err));
    save_state(&st);
    cr_assert(rc == 0, "harness_nats_restart_with_args on port %d: %s", st.nats.port, err);
}
