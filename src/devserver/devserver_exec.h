/* SPDX-License-Identifier: MIT */
/*
 * devserver_exec.h - fork and exec that are safe in a multi-threaded parent,
 * for the throwaway servers and the test harness.
 *
 * Between fork and exec the child calls only async-signal-safe functions:
 * argv, environment, user and output descriptor are prepared by the caller.
 * An exec failure is reported at once ("no such file"), not through a log.
 */
#ifndef OBX_DEVSERVER_EXEC_H
#define OBX_DEVSERVER_EXEC_H

#include <stddef.h>
#include <sys/types.h>

/* A user to run as, resolved before fork (initgroups is not async-signal-safe). */
struct obx_dev_user {
    int active; /* 0: keep the caller's user */
    uid_t uid;
    gid_t gid;
    int ngroups;
    gid_t groups[64];
};

/* What to run and how. */
struct obx_dev_exec {
    const char *path; /* what to execute */
    char *const *argv;
    char *const *envp;               /* NULL: the current environment */
    int out_fd;                      /* stdout and stderr; -1: /dev/null */
    const char *cwd;                 /* NULL: unchanged */
    const struct obx_dev_user *user; /* NULL: unchanged */
    int die_with_parent;             /* PR_SET_PDEATHSIG(SIGKILL), own process group */
    int keep_fd;                     /* left open across exec; -1: none */
};

/*
 * Fills `u` for the postgres user when running as root (initdb refuses to
 * run as root), and leaves it inactive otherwise. 0, or -1 with err.
 */
int obx_dev_user_postgres(struct obx_dev_user *u, char *err, size_t err_len);

/* Forks and execs; returns the pid (a child to reap), or -1 with the reason in err. */
pid_t obx_dev_exec_start(const struct obx_dev_exec *x, char *err, size_t err_len);

/*
 * Runs to completion; returns the exit status (0-255, or 128 + signal), or
 * -1 with err when it could not run or took longer than timeout_ms (then it
 * is killed).
 */
int obx_dev_exec_run(const struct obx_dev_exec *x, int timeout_ms, char *err, size_t err_len);

/*
 * Starts a daemon in its own session, reparented away from the caller (a
 * Criterion runner hangs when a child it does not know dies). Returns its
 * pid, which is not the caller's child, or -1 with err.
 */
pid_t obx_dev_exec_daemon(const struct obx_dev_exec *x, char *err, size_t err_len);

/*
 * environ plus `extra` ("KEY=VALUE", overriding, NULL-terminated, may be
 * NULL), for obx_dev_exec.envp. free() the array only; NULL when out of
 * memory.
 */
char **obx_dev_env_with(char *const extra[]);

/* Status of a reaped child as 0-255, or 128 + signal. */
int obx_dev_wait_status(int wstatus);

/* `name` if it contains '/', else its path in PATH: 0, or -1 if not found. */
int obx_dev_which(const char *name, char *buf, size_t len);

#endif
