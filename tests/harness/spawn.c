/* SPDX-License-Identifier: MIT */
/*
 * spawn.c - processes a test starts (outboxd, outboxctl, socat, ...).
 *
 * Each gets its own process group, so a signal reaches its children too, and
 * PR_SET_PDEATHSIG, so it dies with the worker even when Criterion kills a
 * worker that timed out. The worker also kills whatever is still running at
 * exit, and records every group in <run>/procs/<pid> for the groups'
 * children PDEATHSIG cannot reach (socat forks one per connection): the
 * runner's teardown, or the reaper, kills what is recorded there.
 */
#define _GNU_SOURCE
#include "harness_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "devserver/devserver_exec.h"
#include "devserver/devserver_probe.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { MAX_LIVE = 64, MAX_BINS = 16 };

static pid_t live[MAX_LIVE]; /* spawned by this worker and not reaped yet */
static int log_seq;

static int
record_path(char *buf, size_t len, const char *run_dir, pid_t pid)
{
    int n = snprintf(buf, len, "%s/procs/%d", run_dir, (int)pid);

    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* Tracks pid in memory and on disk, with its start time to recognise it later. */
static void
track(const char *run_dir, pid_t pid)
{
    char path[600];
    FILE *f;

    for (int i = 0; i < MAX_LIVE; i++) {
        if (live[i] == 0) {
            live[i] = pid;
            break;
        }
    }
    if (record_path(path, sizeof(path), run_dir, pid) == 0 && (f = fopen(path, "we")) != NULL) {
        fprintf(f, "%lld\n", obx_dev_pid_starttime(pid));
        fclose(f);
    }
}

static void
untrack(pid_t pid)
{
    const char *run_dir = hx_run_dir_or_null();
    char path[600];

    for (int i = 0; i < MAX_LIVE; i++) {
        if (live[i] == pid) {
            live[i] = 0;
        }
    }
    if (run_dir != NULL && record_path(path, sizeof(path), run_dir, pid) == 0) {
        unlink(path);
    }
}

static int
open_log(struct harness_proc *p, const char *run_dir, const char *argv0)
{
    const char *base = strrchr(argv0, '/') != NULL ? strrchr(argv0, '/') + 1 : argv0;
    int n = snprintf(p->log_path, sizeof(p->log_path), "%s/logs/%s.%d.%d.log", run_dir, base,
                     (int)getpid(), log_seq++);

    if (n < 0 || (size_t)n >= sizeof(p->log_path)) {
        return -1;
    }
    return open(p->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
}

void
harness_spawn(struct harness_proc *p, char *const argv[], char *const extra_env[])
{
    const char *run_dir = hx_run_dir();
    char exe[512];
    char err[1024];
    struct obx_dev_exec x = {exe, argv, NULL, -1, NULL, NULL, 1, -1};
    char **envp;
    pid_t pid;

    cr_assert(argv != NULL && argv[0] != NULL, "harness_spawn: argv[0] is required");
    cr_assert(obx_dev_which(argv[0], exe, sizeof(exe)) == 0, "harness_spawn: %s not found in PATH",
              argv[0]);
    memset(p, 0, sizeof(*p));
    hx_worker_atexit();
    x.out_fd = open_log(p, run_dir, argv[0]);
    cr_assert(x.out_fd >= 0, "harness_spawn: cannot create %s: %s", p->log_path, strerror(errno));
    envp = obx_dev_env_with(extra_env);
    x.envp = envp;
    pid = envp != NULL ? obx_dev_exec_start(&x, err, sizeof(err)) : -1;
    close(x.out_fd);
    cr_assert(pid > 0, "harness_spawn: %s", envp != NULL ? err : "out of memory");
    free(envp);
    p->pid = pid;
    track(run_dir, pid);
}

void
harness_proc_signal(struct harness_proc *p, int sig)
{
    cr_assert(p->pid > 0, "harness_proc_signal(%d): the process was already reaped", sig);
    cr_assert(kill(-p->pid, sig) == 0, "harness_proc_signal(%d) to group %d: %s", sig, (int)p->pid,
              strerror(errno));
}

/* 1 once the child has exited, without reaping it. */
static int
has_exited(pid_t pid)
{
    siginfo_t info;

    memset(&info, 0, sizeof(info));
    while (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
        cr_assert(errno == EINTR, "harness: waitid(%d): %s", (int)pid, strerror(errno));
    }
    return info.si_pid == pid;
}

/*
 * Kills what is left of the group (the leader's orphans), then reaps. In
 * this order because the unreaped leader keeps its pid, which is the group's
 * id, from being reused by a stranger.
 */
static int
reap(struct harness_proc *p)
{
    int ws = 0;

    kill(-p->pid, SIGKILL);
    while (waitpid(p->pid, &ws, 0) < 0) {
        cr_assert(errno == EINTR, "harness: waitpid(%d): %s", (int)p->pid, strerror(errno));
    }
    untrack(p->pid);
    p->status = obx_dev_wait_status(ws);
    p->pid = 0;
    return p->status;
}

int
harness_proc_wait(struct harness_proc *p, int timeout_ms)
{
    long long deadline = harness_now_ms() + timeout_ms;

    if (p->pid == 0) {
        return p->status;
    }
    while (!has_exited(p->pid)) {
        if (harness_now_ms() >= deadline) {
            return -1;
        }
        harness_sleep_ms(10);
    }
    return reap(p);
}

int
harness_proc_kill(struct harness_proc *p)
{
    if (p->pid == 0) {
        return p->status;
    }
    return reap(p);
}

int
harness_proc_stop(struct harness_proc *p, int timeout_ms)
{
    if (p->pid == 0) {
        return p->status;
    }
    kill(-p->pid, SIGTERM);
    kill(-p->pid, SIGCONT); /* a stopped process would never see the SIGTERM */
    if (harness_proc_wait(p, timeout_ms) >= 0) {
        return p->status;
    }
    harness_proc_kill(p);
    return -1;
}

char *
harness_proc_log(const struct harness_proc *p)
{
    char *text = obx_dev_read_file(p->log_path, NULL);

    cr_assert(text != NULL, "harness_proc_log: cannot read %s: %s", p->log_path, strerror(errno));
    return text;
}

int
harness_proc_log_contains(const struct harness_proc *p, const char *needle)
{
    size_t len = 0;
    char *text = obx_dev_read_file(p->log_path, &len);
    int found = text != NULL && memmem(text, len, needle, strlen(needle)) != NULL;

    free(text);
    return found;
}

void
hx_procs_cleanup(void)
{
    for (int i = 0; i < MAX_LIVE; i++) {
        pid_t pid = live[i];

        if (pid > 0) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
            }
            untrack(pid);
        }
    }
}

/* Kills one recorded group unless its leader's pid now belongs to someone else. */
static void
kill_recorded(const char *path, pid_t pid)
{
    char *text = obx_dev_read_file(path, NULL);
    long long recorded = text != NULL ? strtoll(text, NULL, 10) : -1;
    long long now = obx_dev_pid_starttime(pid);

    free(text);
    /*
     * A dead leader's pid cannot be reused while its group has members, so a
     * group without a leader is still ours.
     */
    if (now < 0 || now == recorded) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
    }
    unlink(path);
}

void
hx_procs_kill_recorded(const char *run_dir)
{
    char dir_path[512];
    char path[600];
    DIR *dir;
    struct dirent *e;

    if (obx_dev_path(dir_path, sizeof(dir_path), run_dir, "procs") != 0 ||
        (dir = opendir(dir_path)) == NULL) {
        return;
    }
    while ((e = readdir(dir)) != NULL) {
        long pid = strtol(e->d_name, NULL, 10);

        if (pid > 0 && obx_dev_path(path, sizeof(path), dir_path, e->d_name) == 0) {
            kill_recorded(path, (pid_t)pid);
        }
    }
    closedir(dir);
}

const char *
harness_bin_in(const char *bin_dir, const char *name)
{
    static char paths[MAX_BINS][512];
    char want[512];
    int i;

    cr_assert(obx_dev_path(want, sizeof(want), bin_dir, name) == 0, "harness_bin: path too long");
    for (i = 0; i < MAX_BINS && paths[i][0] != '\0'; i++) {
        if (strcmp(paths[i], want) == 0) {
            return paths[i];
        }
    }
    cr_assert(i < MAX_BINS, "harness_bin: more than %d programs", MAX_BINS);
    memcpy(paths[i], want, sizeof(want));
    return paths[i];
}

int
harness_run(char *const argv[], char *const extra_env[], int timeout_ms)
{
    struct harness_proc p;

    harness_spawn(&p, argv, extra_env);
    return harness_proc_wait(&p, timeout_ms);
}
