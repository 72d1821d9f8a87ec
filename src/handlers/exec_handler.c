/* SPDX-License-Identifier: MIT */
/*
 * exec_handler.c - a declared `exec:` handler: `/bin/sh -c COMMAND` with
 * the envelope on stdin and OUTBOX_EVENT_ID, OUTBOX_SUBJECT and
 * OUTBOX_ATTEMPTS in its environment. Exit 0: done; 75 (EX_TEMPFAIL), or
 * ended by SIGTERM, SIGINT or SIGHUP: retry later, no attempt spent;
 * anything else, or running past the timeout: failed, with the end of its
 * stderr as the reason. It runs in its own process group, between a
 * committed claim and the done mark: at least once. If the claim is lost
 * while it runs its group is killed at once, before another replica can
 * take the claim over and run it too.
 *
 * As a handler kind (obx_exec_kind) it keeps up to the handler's in-flight
 * limit of children going at once: one poll() watches every child's
 * pipes and its pidfd, so a child's exit wakes it at once.
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

#include "common/clock.h"
#include "common/error.h"
#include "devserver/devserver_exec.h"
#include "handlers/exec_handler.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    STDERR_KEEP = 300,
    DRAIN_MS = 500, /* stderr read after the exit, at most: a grandchild may hold it open */
};

enum child_state { CHILD_RUNNING, CHILD_DRAINING, CHILD_ENDED };

struct child {
    unsigned long tag;
    const outbox_delivery *d;
    enum child_state state;
    int status;   /* its wait status, once reaped */
    int ended_by; /* 0: it exited; -1: past the deadline; -2: stopped (claim lost); -3: no start */
    outbox_error start_err; /* -3: why it did not start */
    long long deadline_ms;
    long long drain_until_ms;
    const char *body; /* the envelope, borrowed from the delivery */
    size_t len, written;
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

/* Kills the child's whole group (a pipeline's other commands too) and reaps it. */
static void
kill_group(struct child *ch)
{
    kill(-ch->pid, SIGKILL);
    while (waitpid(ch->pid, &ch->status, 0) < 0 && errno == EINTR) {
    }
}

static void
close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Reads stderr if `revents` says it has data; closes it at EOF. */
static void
read_stderr(struct child *ch, short revents)
{
    char buf[4096];
    ssize_t got;

    if (ch->err_fd < 0 || revents == 0) {
        return;
    }
    got = read(ch->err_fd, buf, sizeof(buf));
    if (got > 0) {
        keep_tail(ch, buf, (size_t)got);
    } else if (got == 0 || errno != EINTR) {
        close_fd(&ch->err_fd);
    }
}

/* Writes more envelope if `revents` says the pipe takes it. */
static void
write_stdin(struct child *ch, short revents)
{
    ssize_t put;

    if (ch->in_fd < 0 || revents == 0) {
        return;
    }
    put = write(ch->in_fd, ch->body + ch->written, ch->len - ch->written);
    ch->written += put > 0 ? (size_t)put : 0;
    /* EPIPE: it did not want the rest. EAGAIN: the pipe is full again, next round. */
    if ((put < 0 && errno != EAGAIN && errno != EINTR) || ch->written == ch->len) {
        close_fd(&ch->in_fd);
    }
}

/*
 * Moves a child on after a poll: reaped once it exited (then its stderr
 * is read to EOF for a moment), killed past its deadline.
 */
static void
advance(struct child *ch, long long now)
{
    if (ch->state == CHILD_RUNNING) {
        pid_t done = waitpid(ch->pid, &ch->status, WNOHANG);

        if (done == ch->pid || (done < 0 && errno != EINTR)) {
            close_fd(&ch->exit_fd); /* reaped: it would wake every poll from now on */
            ch->state = CHILD_DRAINING;
            ch->drain_until_ms = now + DRAIN_MS;
        } else if (now >= ch->deadline_ms) {
            kill_group(ch);
            ch->ended_by = -1;
            ch->state = CHILD_ENDED;
        }
    }
    if (ch->state == CHILD_DRAINING && (ch->err_fd < 0 || now >= ch->drain_until_ms)) {
        ch->state = CHILD_ENDED;
    }
    if (ch->state == CHILD_ENDED) {
        close_fd(&ch->in_fd);
        close_fd(&ch->err_fd);
        close_fd(&ch->exit_fd);
    }
}

/*
 * How long a poll may wait: without a pidfd a child's exit is seen only by
 * waitpid() after the poll, so it is short then; a draining child's stderr
 * waits at most until its drain ends.
 */
static int
poll_ms(const struct child *const *ch, size_t n, int timeout_ms, long long now)
{
    long long ms = timeout_ms;

    for (size_t i = 0; i < n; i++) {
        long long until = ch[i]->state == CHILD_DRAINING ? ch[i]->drain_until_ms
                          : ch[i]->exit_fd < 0           ? now + 1
                                                         : ch[i]->deadline_ms;

        ms = until - now < ms ? until - now : ms;
    }
    return ms < 0 ? 0 : (int)ms;
}

/* One poll over every child's pipes and pidfd, then each child moved on. */
static void
pump_all(struct child *const *ch, size_t n, int timeout_ms)
{
    struct pollfd p[3 * OBX_EXEC_MAX_CHILDREN];
    long long now = obx_monotonic_ms();

    for (size_t i = 0; i < n; i++) {
        p[3 * i] = (struct pollfd){ch[i]->err_fd, POLLIN, 0};
        p[3 * i + 1] = (struct pollfd){ch[i]->in_fd, POLLOUT, 0};
        p[3 * i + 2] = (struct pollfd){ch[i]->exit_fd, POLLIN, 0};
    }
    if (poll(p, 3 * n, poll_ms((const struct child *const *)ch, n, timeout_ms, now)) > 0) {
        for (size_t i = 0; i < n; i++) {
            read_stderr(ch[i], p[3 * i].revents);
            write_stdin(ch[i], p[3 * i + 1].revents);
        }
    }
    now = obx_monotonic_ms();
    for (size_t i = 0; i < n; i++) {
        advance(ch[i], now);
    }
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

/* How a child's run ended, for the consumer. */
static outbox_handler_result
result_of(const struct obx_exec_handler *h, const struct child *ch, outbox_error *err)
{
    if (ch->ended_by == -3) {
        *err = ch->start_err;
        return OUTBOX_HANDLER_FAIL;
    }
    if (ch->ended_by == -2) {
        obx_fail(err, OUTBOX_ECONFLICT, "exec handler stopped: its claim was lost");
        return OUTBOX_HANDLER_RETRY; /* the consumer records nothing and spends no attempt */
    }
    if (ch->ended_by == -1) {
        obx_fail(err, OUTBOX_EREJECTED, "exec handler ran longer than %d ms: %s", h->timeout_ms,
                 ch->tail);
        return OUTBOX_HANDLER_FAIL;
    }
    return outcome(ch, ch->status, err);
}

/* Starts a child for `d`; one that could not start is ended at once, with the reason. */
static struct child *
start_child(const struct obx_exec_handler *h, unsigned long tag, const outbox_delivery *d)
{
    struct child *ch = calloc(1, sizeof(*ch));

    if (ch == NULL) {
        return NULL;
    }
    *ch = (struct child){.tag = tag,
                         .d = d,
                         .pid = -1,
                         .in_fd = -1,
                         .err_fd = -1,
                         .exit_fd = -1,
                         .deadline_ms = obx_monotonic_ms() + h->timeout_ms};
    ch->body = outbox_delivery_envelope(d, &ch->len);
    if (spawn(h->command, d, ch) != 0) {
        obx_fail(&ch->start_err, OUTBOX_EREJECTED, "exec handler could not start /bin/sh: %s",
                 strerror(errno));
        ch->ended_by = -3;
        ch->state = CHILD_ENDED;
    }
    return ch;
}

static void
kind_start(void *ctx, unsigned long tag, const outbox_delivery *d)
{
    struct obx_exec_handler *h = ctx;
    struct child *ch;

    if (h->children == NULL) {
        h->children = calloc(OBX_EXEC_MAX_CHILDREN, sizeof(*h->children));
    }
    ch = h->children != NULL && h->count < OBX_EXEC_MAX_CHILDREN ? start_child(h, tag, d) : NULL;
    if (ch == NULL) {
        /* Out of memory: the run is reported as stopped, so it comes back with nothing
         * spent (the loop never starts more than the limit). */
        h->lost_tag = tag;
        h->lost = 1;
        return;
    }
    h->children[h->count++] = ch;
}

static size_t
kind_wait(void *ctx, int timeout_ms, struct obx_run_end *ends, size_t max)
{
    struct obx_exec_handler *h = ctx;
    size_t n = 0;

    if (h->lost && max > 0) {
        ends[n++] = (struct obx_run_end){.tag = h->lost_tag, .result = OUTBOX_HANDLER_RETRY};
        obx_fail(&ends[0].err, OUTBOX_ENOMEM, "exec handler: out of memory");
        h->lost = 0;
        return n;
    }
    if (h->count == 0) {
        return 0;
    }
    pump_all(h->children, h->count, timeout_ms);
    for (size_t i = 0; i < h->count && n < max;) {
        struct child *ch = h->children[i];

        if (ch->state != CHILD_ENDED) {
            i++;
            continue;
        }
        ends[n] = (struct obx_run_end){.tag = ch->tag};
        ends[n].result = result_of(h, ch, &ends[n].err);
        n++;
        free(ch);
        h->children[i] = h->children[--h->count];
    }
    return n;
}

static void
kind_stop(void *ctx, unsigned long tag)
{
    struct obx_exec_handler *h = ctx;

    for (size_t i = 0; i < h->count; i++) {
        struct child *ch = h->children[i];

        if (ch->tag == tag && ch->state == CHILD_RUNNING) {
            kill_group(ch);
            ch->ended_by = -2;
            ch->state = CHILD_ENDED;
            advance(ch, obx_monotonic_ms());
        }
    }
}

const struct obx_handler_ops obx_exec_kind = {
    .kind = "exec", .start = kind_start, .wait = kind_wait, .stop = kind_stop};

void
obx_exec_handler_fini(struct obx_exec_handler *h)
{
    for (size_t i = 0; i < h->count; i++) {
        kind_stop(h, h->children[i]->tag);
        free(h->children[i]);
    }
    h->count = 0;
    free(h->children);
    h->children = NULL;
}

outbox_handler_result
obx_exec_handler(void *ctx, const outbox_delivery *d, outbox_error *err)
{
    struct obx_exec_handler *h = ctx;
    struct obx_run_end end = {0};

    kind_start(h, 0, d);
    while (kind_wait(h, 50, &end, 1) == 0) {
        if (outbox_delivery_claim_lost(d)) {
            kind_stop(h, 0);
        }
    }
    if (h->count == 0) { /* a caller of this one never calls obx_exec_handler_fini */
        free(h->children);
        h->children = NULL;
    }
    *err = end.err;
    return end.result;
}
