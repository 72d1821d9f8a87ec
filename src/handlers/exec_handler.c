/* SPDX-License-Identifier: MIT */
/*
 * exec_handler.c - a declared `exec:` handler: `/bin/sh -c COMMAND` with
 * the envelope on stdin and OUTBOX_EVENT_ID, OUTBOX_SUBJECT and
 * OUTBOX_ATTEMPTS in its environment. Exit 0: done; 75 (EX_TEMPFAIL), or
 * ended by SIGTERM, SIGINT or SIGHUP: retry later, no attempt spent;
 * anything else, or running past the timeout: failed, with the end of its
 * stderr as the reason. It runs in its own process group, between a
 * committed claim and the done mark: at least once. If the claim is lost
 * while it runs (outbox_delivery_claim_lost) its group is killed at once,
 * before another replica can take the claim over and run it too.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "devserver/devserver_exec.h"
#include "handlers/exec_handler.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { STDERR_KEEP = 300 };

struct child {
    pid_t pid;
    int in_fd;                  /* the envelope goes here; -1 once written */
    int err_fd;                 /* its stderr comes from here; -1 at EOF */
    int exit_fd;                /* a pidfd: readable once it exits; -1 if none */
    char tail[STDERR_KEEP + 1]; /* the last bytes of its stderr */
    size_t tail_len;
};

/* A pipe whose ends close on exec: the child gets only the dup2'ed copies. */
static int
cloexec_pipe(int fds[2])
{
    if (pipe(fds) != 0) {
        return -1;
    }
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    return 0;
}

static int
spawn(const char *command, const outbox_delivery *d, struct child *ch)
{
    char id[80], subject[300], attempts[40];
    char *extra[] = {id, subject, attempts, NULL};
    char *argv[] = {"/bin/sh", "-c", (char *)command, NULL};
    int in[2], er[2];
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t no_signals, default_signals;
    char **env;
    int rc;

    snprintf(id, sizeof(id), "OUTBOX_EVENT_ID=%s", outbox_delivery_event_id(d));
    snprintf(subject, sizeof(subject), "OUTBOX_SUBJECT=%s", outbox_delivery_subject(d));
    snprintf(attempts, sizeof(attempts), "OUTBOX_ATTEMPTS=%d", outbox_delivery_attempts(d));
    if (cloexec_pipe(in) != 0) {
        return -1;
    }
    /* Ours never blocks: a handler that does not read its stdin cannot outlast its timeout. */
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    if (cloexec_pipe(er) != 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    sigemptyset(&no_signals);
    sigemptyset(&default_signals);
    sigaddset(&default_signals, SIGPIPE);
    sigaddset(&default_signals, SIGTERM);
    sigaddset(&default_signals, SIGINT);
    sigaddset(&default_signals, SIGHUP);
    env = obx_dev_env_with(extra);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, er[1], STDERR_FILENO);
    /* Its own process group: a Ctrl-C or a group SIGTERM meant for outboxd does not cut a
     * handler short; outboxd finishes the batch in hand within its drain timeout. The
     * signals outboxd blocks (SIGTERM, SIGINT) or ignores (SIGPIPE) would otherwise be
     * inherited: a handler could not be stopped, nor see a closed pipe. */
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &no_signals);
    posix_spawnattr_setsigdefault(&attr, &default_signals);
    rc = env ? posix_spawn(&ch->pid, "/bin/sh", &fa, &attr, argv, env) : ENOMEM;
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    close(in[0]);
    close(er[1]);
    ch->in_fd = in[1];
    ch->err_fd = er[0];
    if (rc != 0) {
        close(ch->in_fd);
        close(ch->err_fd);
        errno = rc; /* posix_spawn returns its error instead of setting errno */
        return -1;
    }
    /* Its exit wakes the pump: a child's stderr reaches EOF a moment before it can be
     * reaped, and waiting out a poll timeout there cost 50 ms an event. Without pidfds
     * (Linux < 5.3) the pump falls back to short polls. */
    ch->exit_fd = pidfd_open(ch->pid, 0);
    return 0;
}

static void
keep_tail(struct child *ch, const char *data, size_t n)
{
    if (n >= STDERR_KEEP) {
        memcpy(ch->tail, data + n - STDERR_KEEP, STDERR_KEEP);
        ch->tail_len = STDERR_KEEP;
    } else {
        size_t keep = ch->tail_len + n > STDERR_KEEP ? STDERR_KEEP - n : ch->tail_len;

        memmove(ch->tail, ch->tail + ch->tail_len - keep, keep);
        memcpy(ch->tail + keep, data, n);
        ch->tail_len = keep + n;
    }
    ch->tail[ch->tail_len] = '\0';
}

/*
 * How long one round waits at most: the claim and the deadline are checked
 * between rounds. With the child's exit in the poll set, an exit ends the
 * wait at once; without it, an exit is seen only by waitpid() after the
 * wait, so the wait is short once the pipes are done.
 */
static int
round_ms(const struct child *ch)
{
    return ch->exit_fd >= 0 || ch->in_fd >= 0 || ch->err_fd >= 0 ? 50 : 1;
}

/* One round: read stderr if it has data, write more envelope if the pipe takes it. */
static void
pump_once(struct child *ch, const char *body, size_t len, size_t *written)
{
    struct pollfd p[3] = {
        {ch->err_fd, POLLIN, 0}, {ch->in_fd, POLLOUT, 0}, {ch->exit_fd, POLLIN, 0}};
    char buf[4096];

    if (poll(p, 3, round_ms(ch)) <= 0) {
        return;
    }
    if (ch->err_fd >= 0 && p[0].revents) {
        ssize_t got = read(ch->err_fd, buf, sizeof(buf));

        if (got > 0) {
            keep_tail(ch, buf, (size_t)got);
        } else if (got == 0 || errno != EINTR) {
            close(ch->err_fd);
            ch->err_fd = -1;
        }
    }
    if (ch->in_fd >= 0 && p[1].revents) {
        ssize_t put = write(ch->in_fd, body + *written, len - *written);

        *written += put > 0 ? (size_t)put : 0;
        /* EPIPE: it did not want the rest. EAGAIN: the pipe is full again, next round. */
        if ((put < 0 && errno != EAGAIN && errno != EINTR) || *written == len) {
            close(ch->in_fd);
            ch->in_fd = -1;
        }
    }
}

/* Kills the child's whole group (a pipeline's other commands too) and reaps it. */
static void
kill_group(struct child *ch, int *status)
{
    kill(-ch->pid, SIGKILL);
    while (waitpid(ch->pid, status, 0) < 0 && errno == EINTR) {
    }
}

/*
 * Writes the envelope and reads stderr together (neither pipe can fill and
 * stall) until the child exits. Returns 0 with its status, -1 past the
 * deadline or -2 once the claim is lost (the child is then killed and
 * reaped: a round waits at most 50 ms, so it stops well inside the third
 * of the lease the keeper leaves).
 */
static int
pump(struct child *ch, const outbox_delivery *d, long long deadline_ms, int *status)
{
    size_t written = 0, len = 0;
    const char *body = outbox_delivery_envelope(d, &len);

    for (;;) {
        pid_t done = waitpid(ch->pid, status, WNOHANG);

        if (done == ch->pid || (done < 0 && errno != EINTR)) {
            break;
        }
        if (outbox_delivery_claim_lost(d)) {
            kill_group(ch, status);
            return -2;
        }
        if (obx_monotonic_ms() >= deadline_ms) {
            kill_group(ch, status);
            return -1;
        }
        pump_once(ch, body, len, &written);
    }
    if (ch->exit_fd >= 0) { /* reaped: it would wake every round from now on */
        close(ch->exit_fd);
        ch->exit_fd = -1;
    }
    /* Whatever it wrote to stderr just before exiting; a background grandchild may keep
     * the pipe open, so only for a moment. */
    for (long long until = obx_monotonic_ms() + 500;
         ch->err_fd >= 0 && obx_monotonic_ms() < until;) {
        pump_once(ch, body, len, &written);
    }
    return 0;
}

static outbox_handler_result
outcome(const struct child *ch, int status, outbox_error *err)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        return OUTBOX_HANDLER_DONE;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == OBX_EXEC_RETRY_STATUS) {
        return OUTBOX_HANDLER_RETRY;
    }
    /* Asked to stop (a shutdown, an operator): not the handler's failure, no attempt spent. */
    if (WIFSIGNALED(status) &&
        (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGHUP)) {
        return OUTBOX_HANDLER_RETRY;
    }
    if (WIFEXITED(status)) {
        obx_fail(err, OUTBOX_EREJECTED, "exec handler exited with %d: %s", WEXITSTATUS(status),
                 ch->tail);
    } else {
        obx_fail(err, OUTBOX_EREJECTED, "exec handler killed by signal %d: %s",
                 WIFSIGNALED(status) ? WTERMSIG(status) : 0, ch->tail);
    }
    return OUTBOX_HANDLER_FAIL;
}

outbox_handler_result
obx_exec_handler(void *ctx, const outbox_delivery *d, outbox_error *err)
{
    const struct obx_exec_handler *h = ctx;
    struct child ch = {.pid = -1, .in_fd = -1, .err_fd = -1, .exit_fd = -1};
    int status = 0, ended;

    if (spawn(h->command, d, &ch) != 0) {
        obx_fail(err, OUTBOX_EREJECTED, "exec handler could not start /bin/sh: %s",
                 strerror(errno));
        return OUTBOX_HANDLER_FAIL;
    }
    ended = pump(&ch, d, obx_monotonic_ms() + h->timeout_ms, &status);
    if (ch.in_fd >= 0) {
        close(ch.in_fd);
    }
    if (ch.err_fd >= 0) {
        close(ch.err_fd);
    }
    if (ch.exit_fd >= 0) {
        close(ch.exit_fd);
    }
    if (ended == -2) {
        obx_fail(err, OUTBOX_ECONFLICT, "exec handler stopped: its claim was lost");
        return OUTBOX_HANDLER_RETRY; /* the consumer records nothing and spends no attempt */
    }
    if (ended == -1) {
        obx_fail(err, OUTBOX_EREJECTED, "exec handler ran longer than %d ms: %s", h->timeout_ms,
                 ch.tail);
        return OUTBOX_HANDLER_FAIL;
    }
    return outcome(&ch, status, err);
}
