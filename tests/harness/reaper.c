/* SPDX-License-Identifier: MIT */
/*
 * reaper.c - tears the run down even when the runner dies without POST_ALL
 * (SIGKILL from a ctest timeout, a crash, Ctrl-C).
 *
 * At PRE_ALL the runner starts a reaper: the test binary itself, executed
 * again with OBX_HARNESS_REAPER=<fd> so a constructor below takes over before
 * main(). It blocks reading a pipe whose write end only the runner holds
 * (close-on-exec, so servers and spawned daemons never inherit it; a
 * Criterion worker holds it only between its fork and its exec). When the
 * runner exits for any reason the kernel closes that end, the read returns
 * EOF, and the reaper stops the servers and removes the run dir.
 *
 * The reaper runs in its own session, reparented away from the runner:
 * Ctrl-C's SIGINT to the terminal's process group and ctest's kill of the
 * test's process tree both miss it, which is the point.
 */
#define _GNU_SOURCE
#include "harness_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#include "banned.h" /* last: poisons unsafe functions */

#define REAPER_ENV "OBX_HARNESS_REAPER"

enum { PG_STOP_GRACE_MS = 10 * 1000, RM_TIMEOUT_MS = 10 * 1000 };

static int reaper_write_fd = -1;

int
hx_reaper_start(pid_t *reaper_pid, char *err, size_t len)
{
    int pfd[2];
    char exe[1024];
    char fd_entry[64];
    char *extra[] = {fd_entry, NULL};
    char *argv[] = {"obx-harness-reaper", NULL};
    struct hx_exec x = {exe, argv, NULL, -1, "/", NULL, 0, -1};
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char **envp;

    if (n <= 0 || pipe2(pfd, O_CLOEXEC) != 0) {
        snprintf(err, len, "reaper: %s", strerror(errno));
        return -1;
    }
    exe[n] = '\0';
    snprintf(fd_entry, sizeof(fd_entry), "%s=%d", REAPER_ENV, pfd[0]);
    envp = hx_env_with(extra);
    x.envp = envp;
    x.keep_fd = pfd[0];
    *reaper_pid = envp != NULL ? hx_exec_daemon(&x, err, len) : -1;
    free(envp);
    close(pfd[0]);
    if (*reaper_pid < 0) {
        close(pfd[1]);
        return -1;
    }
    reaper_write_fd = pfd[1];
    return 0;
}

void
hx_reaper_release(void)
{
    if (reaper_write_fd >= 0) {
        close(reaper_write_fd);
        reaper_write_fd = -1;
    }
}

static void
stop_postgres(const char *run_dir, const struct hx_state *st)
{
    pid_t postmaster = hx_pg_postmaster_pid(run_dir);
    char err[2048];

    if (postmaster == 0 || hx_pid_gone(postmaster)) {
        return;
    }
    if (hx_pg_ctl_stop(run_dir, st, "immediate", err, sizeof(err)) != 0 ||
        !hx_wait_pid_gone(postmaster, PG_STOP_GRACE_MS)) {
        if (hx_cmdline_contains(postmaster, run_dir)) {
            kill(postmaster, SIGKILL); /* its backends notice and exit */
        }
    }
}

/* Kills any process whose command line names the run dir: the net under everything else. */
static void
sweep(const char *run_dir)
{
    DIR *proc = opendir("/proc");
    struct dirent *e;

    if (proc == NULL) {
        return;
    }
    while ((e = readdir(proc)) != NULL) {
        long pid = strtol(e->d_name, NULL, 10);

        if (pid > 0 && pid != getpid() && hx_cmdline_contains((pid_t)pid, run_dir)) {
            kill((pid_t)pid, SIGCONT);
            kill((pid_t)pid, SIGKILL);
        }
    }
    closedir(proc);
}

static int
remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    remove(path);
    return 0; /* keep going: whatever is left is retried */
}

static void
rm_rf(const char *dir)
{
    long long deadline = harness_now_ms() + RM_TIMEOUT_MS;

    /* A dying server may still create a file; retry until the dir is gone. */
    while (access(dir, F_OK) == 0 && harness_now_ms() < deadline) {
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (access(dir, F_OK) == 0) {
            harness_sleep_ms(10);
        }
    }
}

void
hx_teardown(const char *run_dir)
{
    struct hx_state st;

    if (run_dir == NULL || access(run_dir, F_OK) != 0) {
        return;
    }
    if (hx_state_read(run_dir, &st) == 0) {
        if (!st.pg_owned && st.template_db[0] != '\0') {
            hx_dbs_drop_all(&st); /* an external server outlives us: leave it clean */
        }
        if (st.nats_owned) {
            hx_nats_halt(run_dir, &st, 0);
        }
        if (st.pg_owned) {
            stop_postgres(run_dir, &st);
        }
    }
    hx_procs_kill_recorded(run_dir);
    sweep(run_dir);
    rm_rf(run_dir);
}

/* Runs before main() in every binary linking the harness; only the reaper stays here. */
__attribute__((constructor)) static void
reaper_main(void)
{
    const char *fd_text = getenv(REAPER_ENV);
    char buf[64];
    int fd;

    if (fd_text == NULL) {
        return;
    }
    fd = (int)strtol(fd_text, NULL, 10);
    unsetenv(REAPER_ENV);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));

        if (n == 0 || (n < 0 && errno != EINTR)) {
            break;
        }
    }
    hx_teardown(getenv(HX_ENV_DIR));
    _exit(0); /* not exit(): nothing of the test binary must run in the reaper */
}
