/* SPDX-License-Identifier: MIT */
/*
 * devserver_exec.c - fork and exec for the throwaway servers and the test
 * harness, safe in a multi-threaded parent.
 *
 * A Criterion runner already has a second thread when its PRE_ALL hook
 * starts the servers, and programs may have nats.c threads, so between fork
 * and exec the child calls only async-signal-safe functions: argv,
 * environment, user and log descriptor are all prepared before fork. An
 * exec failure travels back over a close-on-exec pipe, so the caller learns
 * "no such file" at once instead of from a log.
 */
#define _GNU_SOURCE
#include "devserver_exec.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devserver_probe.h"

#include "common/banned.h" /* last: poisons unsafe functions */

extern char **environ;

/* One message from a child: 'e' = errno of a failed step, 'p' = pid of a daemon. */
struct exec_msg {
    char tag;
    int value;
};

int
obx_dev_user_postgres(struct obx_dev_user *u, char *err, size_t len)
{
    struct passwd pw;
    struct passwd *found = NULL;
    char buf[4096];

    memset(u, 0, sizeof(*u));
    if (geteuid() != 0) {
        return 0;
    }
    if (getpwnam_r("postgres", &pw, buf, sizeof(buf), &found) != 0 || found == NULL) {
        snprintf(err, len, "running as root but there is no postgres user (initdb refuses root)");
        return -1;
    }
    u->uid = pw.pw_uid;
    u->gid = pw.pw_gid;
    u->ngroups = (int)(sizeof(u->groups) / sizeof(u->groups[0]));
    /* What initgroups() would set, computed here: the child cannot read /etc/group. */
    if (getgrouplist("postgres", pw.pw_gid, u->groups, &u->ngroups) < 0) {
        u->groups[0] = pw.pw_gid;
        u->ngroups = 1;
    }
    u->active = 1;
    return 0;
}

int
obx_dev_which(const char *name, char *buf, size_t len)
{
    const char *path = getenv("PATH");
    const char *p;

    if (strchr(name, '/') != NULL) {
        return snprintf(buf, len, "%s", name) < (int)len ? 0 : -1;
    }
    for (p = path != NULL ? path : "/usr/bin:/bin"; *p != '\0';) {
        size_t dir_len = strcspn(p, ":");
        int n = snprintf(buf, len, "%.*s/%s", (int)dir_len, dir_len > 0 ? p : ".", name);

        if (n > 0 && (size_t)n < len && access(buf, X_OK) == 0) {
            return 0;
        }
        p += dir_len + (p[dir_len] == ':' ? 1 : 0);
    }
    return -1;
}

char **
obx_dev_env_with(char *const extra[])
{
    size_t n_env = 0;
    size_t n_extra = 0;
    size_t out = 0;
    char **envp;

    while (environ[n_env] != NULL) {
        n_env++;
    }
    while (extra != NULL && extra[n_extra] != NULL) {
        n_extra++;
    }
    envp = calloc(n_env + n_extra + 1, sizeof(*envp));
    if (envp == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < n_env; i++) {
        size_t key_len = strcspn(environ[i], "=");
        int overridden = 0;

        for (size_t j = 0; j < n_extra && !overridden; j++) {
            overridden = strncmp(extra[j], environ[i], key_len + 1) == 0;
        }
        if (!overridden) {
            envp[out++] = environ[i];
        }
    }
    for (size_t j = 0; j < n_extra; j++) {
        envp[out++] = extra[j];
    }
    return envp;
}

int
obx_dev_wait_status(int wstatus)
{
    if (WIFEXITED(wstatus)) {
        return WEXITSTATUS(wstatus);
    }
    if (WIFSIGNALED(wstatus)) {
        return 128 + WTERMSIG(wstatus);
    }
    return -1;
}

/* Reports errno to the parent and exits; async-signal-safe. */
static void
child_fail(int msg_fd)
{
    struct exec_msg m = {'e', errno};
    ssize_t n = write(msg_fd, &m, sizeof(m));

    (void)n;
    _exit(127);
}

/* Closes every descriptor above 2 except `a` and `b` (either may be -1). */
static void
close_all_but(int a, int b)
{
    int lo = a < b ? a : b;
    int hi = a < b ? b : a;
    unsigned int from = 3;

    if (lo >= 3) {
        if ((unsigned int)lo > from) {
            close_range(from, (unsigned int)lo - 1, 0);
        }
        from = (unsigned int)lo + 1;
    }
    if (hi >= 3) {
        if ((unsigned int)hi > from) {
            close_range(from, (unsigned int)hi - 1, 0);
        }
        from = (unsigned int)hi + 1;
    }
    close_range(from, ~0U, 0);
}

/* stdin from /dev/null, stdout+stderr to out_fd, nothing else inherited. */
static void
child_fds(const struct obx_dev_exec *x, int msg_fd)
{
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    int out = x->out_fd >= 0 ? x->out_fd : null_fd;

    if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) {
        child_fail(msg_fd);
    }
    if (x->keep_fd >= 0 && fcntl(x->keep_fd, F_SETFD, 0) < 0) {
        child_fail(msg_fd);
    }
    /* msg_fd is close-on-exec: it stays open until execve succeeds. */
    close_all_but(x->keep_fd, msg_fd);
}

static void
child_exec(const struct obx_dev_exec *x, int msg_fd, pid_t parent)
{
    sigset_t none;
    int sigs[] = {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGCHLD};

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        signal(sigs[i], SIG_DFL);
    }
    if (x->die_with_parent) {
        setpgid(0, 0);
        /* A test killed by its timeout takes its processes along. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) {
            _exit(127);
        }
    }
    if (x->cwd != NULL && chdir(x->cwd) != 0) {
        child_fail(msg_fd);
    }
    if (x->user != NULL && x->user->active &&
        (setgroups((size_t)x->user->ngroups, x->user->groups) != 0 || setgid(x->user->gid) != 0 ||
         setuid(x->user->uid) != 0)) {
        child_fail(msg_fd);
    }
    child_fds(x, msg_fd);
    execve(x->path, x->argv, x->envp != NULL ? x->envp : environ);
    child_fail(msg_fd);
}

/* Reads the children's messages until every writer is gone. */
static void
read_msgs(int fd, pid_t *pid, int *errnum)
{
    struct exec_msg m;
    ssize_t n;

    for (;;) {
        n = read(fd, &m, sizeof(m));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n != (ssize_t)sizeof(m)) {
            return;
        }
        if (m.tag == 'p') {
            *pid = m.value;
        } else {
            *errnum = m.value;
        }
    }
}

pid_t
obx_dev_exec_start(const struct obx_dev_exec *x, char *err, size_t len)
{
    int pfd[2];
    pid_t parent = getpid();
    pid_t pid;
    pid_t unused = 0;
    int errnum = 0;

    if (pipe2(pfd, O_CLOEXEC) != 0) {
        snprintf(err, len, "pipe: %s", strerror(errno));
        return -1;
    }
    pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        child_exec(x, pfd[1], parent);
    }
    close(pfd[1]);
    if (pid > 0 && x->die_with_parent) {
        setpgid(pid, pid); /* also here, so a signal to the group right away reaches it */
    }
    if (pid > 0) {
        read_msgs(pfd[0], &unused, &errnum);
    }
    close(pfd[0]);
    if (pid < 0 || errnum != 0) {
        snprintf(err, len, "could not run %s: %s", x->path, strerror(pid < 0 ? errno : errnum));
        if (pid > 0) {
            waitpid(pid, NULL, 0);
        }
        return -1;
    }
    return pid;
}

int
obx_dev_exec_run(const struct obx_dev_exec *x, int timeout_ms, char *err, size_t len)
{
    long long deadline = obx_monotonic_ms() + timeout_ms;
    pid_t pid = obx_dev_exec_start(x, err, len);
    int ws;

    if (pid < 0) {
        return -1;
    }
    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG);

        if (r == pid) {
            return obx_dev_wait_status(ws);
        }
        if (r < 0 && errno != EINTR) {
            snprintf(err, len, "waitpid %s: %s", x->path, strerror(errno));
            return -1;
        }
        if (obx_monotonic_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            snprintf(err, len, "%s did not finish within %d ms", x->path, timeout_ms);
            return -1;
        }
        obx_sleep_ms(10);
    }
}

pid_t
obx_dev_exec_daemon(const struct obx_dev_exec *x, char *err, size_t len)
{
    int pfd[2];
    pid_t mid;
    pid_t pid = -1;
    int errnum = 0;

    if (pipe2(pfd, O_CLOEXEC) != 0) {
        snprintf(err, len, "pipe: %s", strerror(errno));
        return -1;
    }
    mid = fork();
    if (mid == 0) {
        struct exec_msg m = {'p', 0};

        close(pfd[0]);
        if (setsid() < 0 || (m.value = fork()) < 0) {
            child_fail(pfd[1]);
        }
        if (m.value == 0) {
            child_exec(x, pfd[1], 0);
        }
        /* The daemon's parent exits now, so it is reparented away from the caller. */
        _exit(write(pfd[1], &m, sizeof(m)) == (ssize_t)sizeof(m) ? 0 : 1);
    }
    close(pfd[1]);
    if (mid > 0) {
        while (waitpid(mid, NULL, 0) < 0 && errno == EINTR) {
        }
        read_msgs(pfd[0], &pid, &errnum);
    }
    close(pfd[0]);
    if (mid < 0 || errnum != 0 || pid <= 0) {
        snprintf(err, len, "could not start %s: %s", x->path,
                 strerror(mid < 0       ? errno
                          : errnum != 0 ? errnum
                                        : ECHILD));
        return -1;
    }
    return pid;
}
