/* SPDX-License-Identifier: MIT */
/*
 * demo_procs.c - the demo's replicas: real `outboxd relay` and `outboxd
 * consume` processes, each logging to its own file, dying with the demo.
 */
#include "demo_procs.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devserver/devserver_exec.h"

#include "common/banned.h" /* last: poisons unsafe functions */

int
obx_demo_proc_start(struct obx_demo_proc *p, const struct obx_config *cfg, const char *self,
                    const char *log_dir)
{
    char name[48], url[1024], nats[512], log_path[600], err[700];
    char *argv[] = {(char *)self, (char *)p->command, p->handler ? "--handler" : NULL,
                    (char *)p->handler, NULL};
    /* Short leases and ack waits, unless set: a killed replica's work comes back within
     * the demo rather than after the production minute. */
    char lease[64], ack_wait[64];
    /* The ack wait only for consumers: a relay would warn that it does not read it. */
    char *extra[] = {url, nats, name, lease, "OUTBOX_LOG_LEVEL=info", p->handler ? ack_wait : NULL,
                     NULL};
    struct obx_dev_exec x = {.path = self, .argv = argv, .die_with_parent = 1, .keep_fd = -1};
    char **env;
    int fd;

    snprintf(name, sizeof(name), "OUTBOX_NAME=%s", p->name);
    snprintf(lease, sizeof(lease), "OUTBOX_LEASE_SECONDS=%lld",
             cfg->lease_seconds < 5 ? cfg->lease_seconds : 5LL);
    snprintf(ack_wait, sizeof(ack_wait), "OUTBOX_ACK_WAIT_SECONDS=%lld",
             cfg->ack_wait_seconds < 10 ? cfg->ack_wait_seconds : 10LL);
    snprintf(url, sizeof(url), "OUTBOX_DATABASE_URL=%s", cfg->database_url);
    snprintf(nats, sizeof(nats), "OUTBOX_NATS_URL=%s", cfg->nats_url);
    snprintf(log_path, sizeof(log_path), "%s/%s.log", log_dir, p->name);
    fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    env = obx_dev_env_with(extra);
    x.envp = env;
    x.out_fd = fd;
    snprintf(err, sizeof(err), "cannot open %s", log_path);
    p->pid = fd >= 0 && env != NULL ? obx_dev_exec_start(&x, err, sizeof(err)) : -1;
    free(env);
    if (fd >= 0) {
        close(fd);
    }
    if (p->pid < 0) {
        fprintf(stderr, "outboxd demo: cannot start %s: %s\n", p->name, err);
        return -1;
    }
    return 0;
}

void
obx_demo_proc_kill(struct obx_demo_proc *r, int sig)
{
    int status;

    if (r->pid <= 0) {
        return;
    }
    kill(r->pid, sig);
    if (sig == SIGKILL) {
        waitpid(r->pid, &status, 0);
        r->pid = 0;
    }
}

int
obx_demo_proc_stop(struct obx_demo_proc *r, int timeout_ms)
{
    int status = 0;

    if (r->pid <= 0) {
        return 0;
    }
    kill(r->pid, SIGTERM);
    for (int waited = 0; waited < timeout_ms; waited += 20) {
        if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
            r->pid = 0;
            return obx_dev_wait_status(status);
        }
        usleep(20 * 1000);
    }
    obx_demo_proc_kill(r, SIGKILL);
    return -1;
}
