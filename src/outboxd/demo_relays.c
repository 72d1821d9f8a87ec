/* SPDX-License-Identifier: MIT */
/*
 * demo_relays.c - the demo's relay replicas: real `outboxd relay`
 * processes, each logging to its own file, dying with the demo.
 */
#include "demo_relays.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devserver_exec.h"

#include "banned.h" /* last: poisons unsafe functions */

int
obx_demo_relay_start(struct obx_demo_relay *r, const struct obx_config *cfg, const char *self,
                     const char *log_dir, int index)
{
    char name[48], url[1024], nats[512], log_path[600], err[700];
    char *argv[] = {(char *)self, "relay", NULL};
    /* A short lease, unless set: the killed replica's rows come back within the demo. */
    char *extra[] = {url,
                     nats,
                     name,
                     "OUTBOX_LOG_LEVEL=info",
                     getenv("OUTBOX_LEASE_SECONDS") ? NULL : "OUTBOX_LEASE_SECONDS=5",
                     NULL};
    struct obx_dev_exec x = {.path = self, .argv = argv, .die_with_parent = 1, .keep_fd = -1};
    char **env;
    int fd;

    snprintf(r->name, sizeof(r->name), "relay-%d", index + 1);
    snprintf(name, sizeof(name), "OUTBOX_NAME=%s", r->name);
    snprintf(url, sizeof(url), "OUTBOX_DATABASE_URL=%s", cfg->database_url);
    snprintf(nats, sizeof(nats), "OUTBOX_NATS_URL=%s", cfg->nats_url);
    snprintf(log_path, sizeof(log_path), "%s/%s.log", log_dir, r->name);
    fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    env = obx_dev_env_with(extra);
    x.envp = env;
    x.out_fd = fd;
    snprintf(err, sizeof(err), "cannot open %s", log_path);
    r->pid = fd >= 0 && env != NULL ? obx_dev_exec_start(&x, err, sizeof(err)) : -1;
    free(env);
    if (fd >= 0) {
        close(fd);
    }
    if (r->pid < 0) {
        fprintf(stderr, "outboxd demo: cannot start %s: %s\n", r->name, err);
        return -1;
    }
    return 0;
}

void
obx_demo_relay_kill(struct obx_demo_relay *r, int sig)
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
obx_demo_relay_stop(struct obx_demo_relay *r, int timeout_ms)
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
    obx_demo_relay_kill(r, SIGKILL);
    return -1;
}
