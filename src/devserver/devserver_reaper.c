/* SPDX-License-Identifier: MIT */
/*
 * devserver_reaper.c - makes the throwaway servers' directory, tears it
 * down with everything running from it, and runs the reaper that does so
 * when the owner dies (see devserver_reaper.h).
 */
#define _GNU_SOURCE
#include "devserver_reaper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devserver_exec.h"
#include "devserver_pg.h"
#include "devserver_probe.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { SWEEP_TIMEOUT_MS = 10 * 1000, RM_TIMEOUT_MS = 10 * 1000 };

int
obx_dev_make_dir(const char *base_dir, const char *prefix, char *out, size_t out_len, char *err,
                 size_t err_len)
{
    const char *base = base_dir != NULL ? base_dir : getenv("TMPDIR");
    int n;

    if (base == NULL || base[0] == '\0') {
        base = "/tmp";
    }
    n = snprintf(out, out_len, "%s/%s-XXXXXX", base, prefix);
    if (n < 0 || (size_t)n >= out_len) {
        snprintf(err, err_len, "directory name too long under %s", base);
        out[0] = '\0';
        return -1;
    }
    if (mkdtemp(out) == NULL) {
        snprintf(err, err_len, "mkdtemp %s: %s", out, strerror(errno));
        out[0] = '\0';
        return -1;
    }
    return 0;
}

int
obx_dev_reaper_start(const char *env_name, const char *dir, pid_t *reaper_pid, int *owner_fd,
                     char *err, size_t len)
{
    int pfd[2];
    char exe[1024];
    char entry[1024];
    char *extra[] = {entry, NULL};
    char *argv[] = {"obx-reaper", NULL};
    struct obx_dev_exec x = {exe, argv, NULL, -1, "/", NULL, 0, -1};
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char **envp;
    pid_t pid;

    if (n <= 0 || pipe2(pfd, O_CLOEXEC) != 0) {
        snprintf(err, len, "reaper: %s", strerror(errno));
        return -1;
    }
    exe[n] = '\0';
    n = snprintf(entry, sizeof(entry), "%s=%d %s", env_name, pfd[0], dir);
    envp = n > 0 && (size_t)n < sizeof(entry) ? obx_dev_env_with(extra) : NULL;
    x.envp = envp;
    x.keep_fd = pfd[0];
    pid = envp != NULL ? obx_dev_exec_daemon(&x, err, len) : -1;
    if (envp == NULL) {
        snprintf(err, len, "reaper: out of memory, or directory name too long");
    }
    free(envp);
    close(pfd[0]);
    if (pid < 0) {
        close(pfd[1]);
        return -1;
    }
    *reaper_pid = pid;
    *owner_fd = pfd[1];
    return 0;
}

void
obx_dev_reaper_serve(const char *env_name, void (*teardown)(const char *dir))
{
    const char *value = getenv(env_name);
    char dir[1024];
    char buf[64];
    char *rest;
    int fd;

    if (value == NULL) {
        return;
    }
    fd = (int)strtol(value, &rest, 10);
    snprintf(dir, sizeof(dir), "%s", *rest == ' ' ? rest + 1 : "");
    unsetenv(env_name);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));

        if (n == 0 || (n < 0 && errno != EINTR)) {
            break;
        }
    }
    if (dir[0] != '\0') {
        teardown(dir);
    }
    _exit(0); /* not exit(): nothing of the program must run in the reaper */
}

/* SIGKILLs every process but us whose command line names dir; returns how many still live. */
static int
kill_named(const char *dir)
{
    DIR *proc = opendir("/proc");
    struct dirent *e;
    int alive = 0;

    if (proc == NULL) {
        return 0;
    }
    while ((e = readdir(proc)) != NULL) {
        long pid = strtol(e->d_name, NULL, 10);

        if (pid > 0 && pid != getpid() && !obx_dev_pid_gone((pid_t)pid) &&
            obx_dev_cmdline_contains((pid_t)pid, dir)) {
            kill((pid_t)pid, SIGCONT);
            kill((pid_t)pid, SIGKILL);
            alive++;
        }
    }
    closedir(proc);
    return alive;
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

void
obx_dev_teardown(const char *dir)
{
    long long deadline;

    if (dir == NULL || dir[0] == '\0' || access(dir, F_OK) != 0) {
        return;
    }
    obx_dev_pg_halt(dir);
    /* The net under everything else; repeated until a scan finds nobody. */
    deadline = obx_monotonic_ms() + SWEEP_TIMEOUT_MS;
    while (kill_named(dir) > 0 && obx_monotonic_ms() < deadline) {
        obx_sleep_ms(10);
    }
    /* A dying server may still create a file; retry until the dir is gone. */
    deadline = obx_monotonic_ms() + RM_TIMEOUT_MS;
    while (access(dir, F_OK) == 0 && obx_monotonic_ms() < deadline) {
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        if (access(dir, F_OK) == 0) {
            obx_sleep_ms(10);
        }
    }
}
