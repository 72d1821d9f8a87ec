/* SPDX-License-Identifier: MIT */
/*
 * nats_server.c - a throwaway nats-server with JetStream in the run's temp dir.
 *
 * The first start asks for a random port (-p -1) and learns it from the
 * ports file the server writes (nats-server_<pid>.ports), so two test
 * binaries can never race for a port. Restarts reuse that port and the same
 * store dir, so clients reconnect to the same URL and streams survive.
 * "Up" means a nats.c connect succeeds and JetStream answers an account
 * info request, not merely that the port is open. A test may restart the
 * server with credentials the harness does not know; then a refused
 * anonymous connect plus an "ok" from the monitoring port's /healthz (which
 * checks JetStream too) counts as up.
 *
 * Layout: <run>/nats (ports files), <run>/nats/js (store), <run>/nats/server.log.
 */
#include "harness_int.h"

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
#include <criterion/criterion.h>
#include <jansson.h>
#include <nats/nats.h>

#include "harness.h"

#include "banned.h" /* last: poisons unsafe functions */

enum { NATS_START_TIMEOUT_MS = 30 * 1000, NATS_STOP_TIMEOUT_MS = 10 * 1000, MAX_EXTRA = 32 };

/* Extra arguments this worker restarted the server with; reused by harness_nats_start(). */
static char *saved_extra[MAX_EXTRA + 1];

struct nats_paths {
    char dir[512];
    char store[512];
    char log[512];
};

static int
nats_paths(const char *run_dir, struct nats_paths *p)
{
    return hx_path(p->dir, sizeof(p->dir), run_dir, "nats") != 0 ||
                   hx_path(p->store, sizeof(p->store), p->dir, "js") != 0 ||
                   hx_path(p->log, sizeof(p->log), p->dir, "server.log") != 0
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
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
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
wait_ready(const struct nats_paths *p, struct hx_state *st, char *err, size_t len)
{
    long long deadline = harness_now_ms() + NATS_START_TIMEOUT_MS;
    int port = 0;
    int monitor_port = 0;
    char why[256] = "no ports file yet";

    for (;;) {
        if (hx_pid_gone(st->nats_pid)) {
            snprintf(err, len, "nats-server exited at start; its log ends with:\n%s",
                     hx_file_tail(p->log, 1500));
            return -1;
        }
        if (port == 0) {
            port = read_ports_file(p, st->nats_pid, &monitor_port);
        }
        if (port > 0 && answers(port, monitor_port, why, sizeof(why))) {
            st->nats_port = port;
            return 0;
        }
        if (harness_now_ms() >= deadline) {
            snprintf(err, len, "nats-server did not answer within %d ms: %s; log ends with:\n%s",
                     NATS_START_TIMEOUT_MS, why, hx_file_tail(p->log, 1500));
            return -1;
        }
        harness_sleep_ms(20);
    }
}

int
hx_nats_launch(const char *run_dir, struct hx_state *st, char *const extra[], char *err, size_t len)
{
    struct nats_paths p;
    char exe[512];
    char port[16];
    /* -m -1: a monitoring port for /healthz, in case a test turns authentication on. */
    char *argv[16 + MAX_EXTRA] = {exe,   "-js",  "-a", "127.0.0.1",        "-p",
                                  port,  "-m",   "-1", "--ports_file_dir", p.dir,
                                  "-sd", p.store};
    struct hx_exec x = {exe, argv, NULL, -1, run_dir, NULL, 0, -1};
    size_t n = 12;

    if (nats_paths(run_dir, &p) != 0 || hx_which("nats-server", exe, sizeof(exe)) != 0) {
        snprintf(err, len, "nats-server not found in PATH");
        return -1;
    }
    for (size_t i = 0; extra != NULL && extra[i] != NULL && i < MAX_EXTRA; i++) {
        argv[n++] = extra[i];
    }
    snprintf(port, sizeof(port), "%d", st->nats_port > 0 ? st->nats_port : -1);
    x.out_fd = open(p.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (x.out_fd < 0) {
        snprintf(err, len, "cannot open %s: %s", p.log, strerror(errno));
        return -1;
    }
    /* Daemonized: a runner child that dies mid-run hangs Criterion (servers.c). */
    st->nats_pid = hx_exec_daemon(&x, err, len);
    close(x.out_fd);
    if (st->nats_pid < 0) {
        st->nats_pid = 0;
        st->nats_status = HX_NATS_DEAD;
        return -1;
    }
    st->nats_status = HX_NATS_RUNNING;
    if (wait_ready(&p, st, err, len) != 0) {
        hx_nats_halt(run_dir, st, 0);
        return -1;
    }
    return 0;
}

void
hx_nats_halt(const char *run_dir, struct hx_state *st, int graceful)
{
    struct nats_paths p;
    char ports_file[600];
    pid_t pid = st->nats_pid;

    /* The cmdline check keeps us from killing a stranger that reused the pid. */
    if (pid > 0 && !hx_pid_gone(pid) && hx_cmdline_contains(pid, run_dir)) {
        kill(pid, SIGCONT);
        if (!graceful || kill(pid, SIGTERM) != 0 || !hx_wait_pid_gone(pid, NATS_STOP_TIMEOUT_MS)) {
            kill(pid, SIGKILL);
            hx_wait_pid_gone(pid, NATS_STOP_TIMEOUT_MS);
        }
    }
    /* SIGKILL leaves the ports file behind. */
    if (pid > 0 && nats_paths(run_dir, &p) == 0) {
        snprintf(ports_file, sizeof(ports_file), "%s/nats-server_%d.ports", p.dir, (int)pid);
        unlink(ports_file);
    }
    st->nats_status = HX_NATS_DEAD;
}

int
hx_nats_boot(const char *run_dir, struct hx_state *st, char *err, size_t len)
{
    struct nats_paths p;
    char url[64];

    if (nats_paths(run_dir, &p) != 0 || (mkdir(p.dir, 0700) != 0 && errno != EEXIST)) {
        snprintf(err, len, "cannot create %s: %s", p.dir, strerror(errno));
        return -1;
    }
    st->nats_port = 0;
    if (hx_nats_launch(run_dir, st, NULL, err, len) != 0) {
        return -1;
    }
    st->nats_owned = 1;
    /* Workers are fresh processes: the runner's nats.c threads must not linger. */
    nats_CloseAndWait(5000);
    snprintf(url, sizeof(url), "nats://127.0.0.1:%d", st->nats_port);
    return setenv(HX_ENV_NATS, url, 1);
}

/* ---- faults ---------------------------------------------------------------------------- */

const char *
harness_nats_url(void)
{
    const char *url = getenv(HX_ENV_NATS);

    cr_assert(url != NULL && url[0] != '\0', "harness: %s is not set", HX_ENV_NATS);
    hx_servers_lock(0);
    return url;
}

int
harness_nats_port(void)
{
    struct hx_state st;

    hx_state_load(&st);
    hx_require_owned(st.nats_owned, "nats-server", HX_ENV_NATS);
    hx_servers_lock(0);
    return st.nats_port;
}

/* The state after taking the lock exclusively, skipping if the server is not ours. */
static void
load_owned_exclusive(struct hx_state *st)
{
    hx_state_load(st);
    hx_require_owned(st->nats_owned, "nats-server", HX_ENV_NATS);
    harness_servers_exclusive();
    hx_state_load(st);
}

static void
save_state(const struct hx_state *st)
{
    const char *dir = hx_run_dir();

    cr_assert(hx_state_write(dir, st) == 0, "harness: cannot write %s/state", dir);
}

void
harness_nats_kill(int sig)
{
    struct hx_state st;
    int ending = sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGQUIT;

    load_owned_exclusive(&st);
    cr_assert(!hx_pid_gone(st.nats_pid), "harness_nats_kill(%d): nats-server is not running", sig);
    cr_assert(kill(st.nats_pid, sig) == 0, "harness_nats_kill(%d): %s", sig, strerror(errno));
    if (ending) {
        cr_assert(hx_wait_pid_gone(st.nats_pid, NATS_STOP_TIMEOUT_MS),
                  "harness_nats_kill(%d): nats-server %d still runs after %d ms", sig,
                  (int)st.nats_pid, NATS_STOP_TIMEOUT_MS);
        hx_nats_halt(hx_run_dir(), &st, 0); /* removes the ports file */
    } else if (sig == SIGSTOP) {
        HARNESS_WAIT_UNTIL(hx_pid_stopped(st.nats_pid), NATS_STOP_TIMEOUT_MS);
        st.nats_status = HX_NATS_STOPPED;
    } else if (sig == SIGCONT) {
        HARNESS_WAIT_UNTIL(!hx_pid_stopped(st.nats_pid), NATS_STOP_TIMEOUT_MS);
        st.nats_status = HX_NATS_RUNNING;
    }
    save_state(&st);
}

void
harness_nats_start(void)
{
    struct hx_state st;
    char err[2048];
    int rc;

    load_owned_exclusive(&st);
    cr_assert(hx_pid_gone(st.nats_pid),
              "harness_nats_start: nats-server %d is still running; kill it first",
              (int)st.nats_pid);
    rc = hx_nats_launch(hx_run_dir(), &st, saved_extra, err, sizeof(err));
    save_state(&st);
    cr_assert(rc == 0, "harness_nats_start on port %d: %s", st.nats_port, err);
}

void
harness_nats_restart_with_args(char *const extra[])
{
    struct hx_state st;
    char err[2048];
    size_t n = 0;
    int rc;

    load_owned_exclusive(&st);
    for (size_t i = 0; saved_extra[i] != NULL; i++) {
        free(saved_extra[i]);
        saved_extra[i] = NULL;
    }
    for (; extra != NULL && extra[n] != NULL; n++) {
        cr_assert(n < MAX_EXTRA, "harness_nats_restart_with_args: more than %d", MAX_EXTRA);
        saved_extra[n] = strdup(extra[n]);
    }
    hx_nats_halt(hx_run_dir(), &st, 1);
    st.nats_custom = n > 0; /* so the next test's lock restores the defaults */
    rc = hx_nats_launch(hx_run_dir(), &st, saved_extra, err, sizeof(err));
    save_state(&st);
    cr_assert(rc == 0, "harness_nats_restart_with_args on port %d: %s", st.nats_port, err);
}
