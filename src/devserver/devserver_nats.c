/* SPDX-License-Identifier: MIT */
/*
 * devserver_nats.c - a throwaway nats-server with JetStream.
 *
 * The first launch takes a free port below the ephemeral range (see
 * obx_dev_free_port) and tries another if a server started at the same
 * moment took it; the monitoring port comes from the ports file the server
 * writes (nats-server_<pid>.ports). Later launches reuse the client port and
 * the same store dir, so clients reconnect to the same URL and streams
 * survive. "Up" means a nats.c connect succeeds and JetStream
 * answers an account info request, not merely that the port is open. The
 * test harness may restart the server with credentials we do not know;
 * then a refused anonymous connect plus an "ok" from the monitoring port's
 * /healthz (which checks JetStream too) counts as up.
 */
#include "devserver_nats.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <nats/nats.h>

#include "devserver_exec.h"
#include "devserver_probe.h"
#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    NATS_START_TIMEOUT_MS = 30 * 1000,
    NATS_STOP_TIMEOUT_MS = 10 * 1000,
    PORT_ATTEMPTS = 5,        /* first start: ports tried when another process took one */
    PORT_WAIT_MS = 15 * 1000, /* restart: how long the old port may stay taken */
};

struct nats_paths {
    char dir[512];
    char store[512];
    char log[512];
};

static int
nats_paths(const char *dir, struct nats_paths *p)
{
    return obx_dev_path(p->dir, sizeof(p->dir), dir, "nats") != 0 ||
                   obx_dev_path(p->store, sizeof(p->store), p->dir, "js") != 0 ||
                   obx_dev_path(p->log, sizeof(p->log), p->dir, "server.log") != 0
               ? -1
               : 0;
}

/* The port of the first URL in `key` of a ports file, or 0. */
static int
port_of(json_t *root, const char *key)
{
    const char *url = json_string_value(json_array_get(json_object_get(root, key), 0));
    const char *colon = url != NULL ? strrchr(url, ':') : NULL;

    return colon != NULL ? (int)strtol(colon + 1, NULL, 10) : 0;
}

/* Client and monitoring ports from nats-server_<pid>.ports; 0 while it is not (fully) written. */
static int
read_ports_file(const struct nats_paths *p, pid_t pid, int *monitor_port)
{
    char path[600];
    json_t *root;
    int port;

    snprintf(path, sizeof(path), "%s/nats-server_%d.ports", p->dir, (int)pid);
    root = json_load_file(path, 0, NULL);
    port = port_of(root, "nats");
    *monitor_port = port_of(root, "monitoring");
    json_decref(root);
    return port;
}

/* 1 when GET /healthz on the monitoring port answers 200 with status ok. */
static int
healthz_ok(int port)
{
    static const char request[] = "GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    struct timeval timeout = {2, 0};
    char reply[2048];
    size_t used = 0;
    ssize_t n;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)) != 0 ||
        connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        write(fd, request, sizeof(request) - 1) != (ssize_t)(sizeof(request) - 1)) {
        if (fd >= 0) {
            close(fd);
        }
        return 0;
    }
    while (used < sizeof(reply) - 1 && (n = read(fd, reply + used, sizeof(reply) - 1 - used)) > 0) {
        used += (size_t)n;
    }
    close(fd);
    reply[used] = '\0';
    return strstr(reply, " 200 ") != NULL && strstr(reply, "\"ok\"") != NULL;
}

/* NATS_OK when a client can connect and JetStream answers; the reason in `why` otherwise. */
static natsStatus
jetstream_answers(int port, char *why, size_t len)
{
    char url[64];
    natsOptions *opts = NULL;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsAccountInfo *info = NULL;
    jsErrCode jerr = 0;
    natsStatus s;

    snprintf(url, sizeof(url), "nats://127.0.0.1:%d", port);
    s = natsOptions_Create(&opts);
    if (s == NATS_OK) {
        s = natsOptions_SetURL(opts, url);
    }
    if (s == NATS_OK) {
        s = natsOptions_SetTimeout(opts, 2000);
    }
    if (s == NATS_OK) {
        s = natsConnection_Connect(&nc, opts);
    }
    if (s == NATS_OK) {
        s = natsConnection_JetStream(&js, nc, NULL);
    }
    if (s == NATS_OK) {
        s = js_GetAccountInfo(&info, js, NULL, &jerr);
    }
    snprintf(why, len, "%s (jetstream error %d)", natsStatus_GetText(s), (int)jerr);
    jsAccountInfo_Destroy(info);
    obx_nats_teardown(nc, js, NULL);
    natsOptions_Destroy(opts);
    return s;
}

/* Up: JetStream answers, or the server refuses strangers and its health check is ok. */
static int
answers(int port, int monitor_port, char *why, size_t len)
{
    natsStatus s = jetstream_answers(port, why, len);

    if (s == NATS_CONNECTION_AUTH_FAILED || s == NATS_NOT_PERMITTED) {
        return monitor_port > 0 && healthz_ok(monitor_port);
    }
    return s == NATS_OK;
}

/* Waits for the ports file, then for JetStream; fails early if the server exits. */
static int
wait_ready(const struct nats_paths *p, struct obx_dev_nats *n, char *err, size_t len)
{
    long long deadline = obx_monotonic_ms() + NATS_START_TIMEOUT_MS;
    int port = 0;
    int monitor_port = 0;
    char why[256] = "no ports file yet";

    for (;;) {
        if (obx_dev_pid_gone(n->pid)) {
            snprintf(err, len, "nats-server exited at start; its log ends with:\n%s",
                     obx_dev_file_tail(p->log, 1500));
            return -1;
        }
        if (port == 0) {
            port = read_ports_file(p, n->pid, &monitor_port);
        }
        if (port > 0 && answers(port, monitor_port, why, sizeof(why))) {
            n->port = port;
            return 0;
        }
        if (obx_monotonic_ms() >= deadline) {
            snprintf(err, len, "nats-server did not answer within %d ms: %s; log ends with:\n%s",
                     NATS_START_TIMEOUT_MS, why, obx_dev_file_tail(p->log, 1500));
            return -1;
        }
        obx_sleep_ms(20);
    }
}

int
obx_dev_nats_spawn(const char *dir, struct obx_dev_nats *n, char *const extra[], int port_number,
                   char *err, size_t len)
{
    struct nats_paths p;
    char exe[512];
    char port[16];
    /* -m -1: a monitoring port for /healthz, in case a test turns authentication on. */
    char *argv[16 + OBX_DEV_NATS_MAX_EXTRA] = {exe,   "-js",  "-a", "127.0.0.1",        "-p",
                                               port,  "-m",   "-1", "--ports_file_dir", p.dir,
                                               "-sd", p.store};
    struct obx_dev_exec x = {exe, argv, NULL, -1, dir, NULL, 0, -1};
    size_t argc = 12;

    if (nats_paths(dir, &p) != 0 || obx_dev_which("nats-server", exe, sizeof(exe)) != 0) {
        snprintf(err, len, "nats-server not found in PATH");
        return -1;
    }
    for (size_t i = 0; extra != NULL && extra[i] != NULL && i < OBX_DEV_NATS_MAX_EXTRA; i++) {
        argv[argc++] = extra[i];
    }
    snprintf(port, sizeof(port), "%d", port_number);
    x.out_fd = open(p.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (x.out_fd < 0) {
        snprintf(err, len, "cannot open %s: %s", p.log, strerror(errno));
        return -1;
    }
    /* Daemonized: a Criterion runner hangs when a child of its own dies mid-run. */
    n->pid = obx_dev_exec_daemon(&x, err, len);
    close(x.out_fd);
    if (n->pid < 0) {
        n->pid = 0;
        return -1;
    }
    return 0;
}

int
obx_dev_nats_wait(const char *dir, struct obx_dev_nats *n, char *err, size_t len)
{
    struct nats_paths p;

    if (nats_paths(dir, &p) != 0) {
        snprintf(err, len, "path too long: %s", dir);
        return -1;
    }
    if (wait_ready(&p, n, err, len) != 0) {
        obx_dev_nats_halt(dir, n, 0);
        return -1;
    }
    return 0;
}

/* One start of the server on `port`; n->port is set once it answers. */
static int
launch_on(const char *dir, struct obx_dev_nats *n, char *const extra[], int port_number, char *err,
          size_t len)
{
    if (obx_dev_nats_spawn(dir, n, extra, port_number, err, len) != 0) {
        return -1;
    }
    return obx_dev_nats_wait(dir, n, err, len);
}

int
obx_dev_nats_launch(const char *dir, struct obx_dev_nats *n, char *const extra[], char *err,
                    size_t len)
{
    /* A restart keeps its port and waits for whoever holds it briefly to let go. */
    int restart = n->port > 0;
    long long deadline = obx_monotonic_ms() + PORT_WAIT_MS;

    for (int attempt = 1;; attempt++) {
        int port = restart ? n->port : obx_dev_free_port();
        int rc = port > 0 ? launch_on(dir, n, extra, port, err, len) : -1;

        if (port <= 0) {
            snprintf(err, len, "no free port below the ephemeral range");
        }
        if (rc == 0 || port <= 0 || strstr(err, "address already in use") == NULL ||
            (restart ? obx_monotonic_ms() >= deadline : attempt >= PORT_ATTEMPTS)) {
            return rc;
        }
        if (restart) {
            obx_sleep_ms(200);
        }
    }
}

void
obx_dev_nats_halt(const char *dir, const struct obx_dev_nats *n, int graceful)
{
    struct nats_paths p;
    char ports_file[600];
    pid_t pid = n->pid;

    /* The cmdline check keeps us from killing a stranger that reused the pid. */
    if (pid > 0 && !obx_dev_pid_gone(pid) && obx_dev_cmdline_contains(pid, dir)) {
        kill(pid, SIGCONT);
        if (!graceful || kill(pid, SIGTERM) != 0 ||
            !obx_dev_wait_pid_gone(pid, NATS_STOP_TIMEOUT_MS)) {
            kill(pid, SIGKILL);
            obx_dev_wait_pid_gone(pid, NATS_STOP_TIMEOUT_MS);
        }
    }
    /* SIGKILL leaves the ports file behind. */
    if (pid > 0 && nats_paths(dir, &p) == 0) {
        snprintf(ports_file, sizeof(ports_file), "%s/nats-server_%d.ports", p.dir, (int)pid);
        unlink(ports_file);
    }
}

int
obx_dev_nats_prepare(const char *dir, char *err, size_t len)
{
    struct nats_paths p;

    if (nats_paths(dir, &p) != 0 || (mkdir(p.dir, 0700) != 0 && errno != EEXIST)) {
        snprintf(err, len, "cannot create %s/nats: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int
obx_dev_nats_boot(const char *dir, struct obx_dev_nats *n, char *err, size_t len)
{
    if (obx_dev_nats_prepare(dir, err, len) != 0) {
        return -1;
    }
    n->port = 0;
    return obx_dev_nats_launch(dir, n, NULL, err, len);
}
