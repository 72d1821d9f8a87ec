/* SPDX-License-Identifier: MIT */
/*
 * proxy.c - a socat TCP proxy between a client and a server, to cut the
 * network without touching the server.
 *
 * Pausing SIGSTOPs socat's whole process group (the listener and one child
 * per connection): bytes stop flowing both ways but no FIN or RST is sent,
 * which is what a dead network path looks like. Only a timeout can notice.
 */
#include "harness_int.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "devserver/devserver_probe.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { PROXY_START_TIMEOUT_MS = 10 * 1000, PROXY_SIGNAL_TIMEOUT_MS = 5 * 1000 };

/* Waits until socat accepts connections; 0 if it exited first (port taken) or never did. */
static int
wait_listening(struct harness_proxy *px)
{
    long long deadline = harness_now_ms() + PROXY_START_TIMEOUT_MS;

    while (!obx_dev_tcp_connects(px->port)) {
        if (harness_proc_wait(&px->proc, 0) >= 0 || harness_now_ms() >= deadline) {
            return 0;
        }
        harness_sleep_ms(10);
    }
    return 1;
}

/*
 * socat -d -d logs each accepted connection (harness_proxy_connections()
 * counts them); `dump_path`, if not NULL, receives every byte the clients
 * send (socat -r), appended in arrival order.
 */
static int
proxy_start(struct harness_proxy *px, int target_port, const char *dump_path)
{
    char listen_spec[96];
    char target_spec[64];
    char *argv[] = {"socat", "-d", "-d", listen_spec, target_spec, NULL, NULL, NULL};

    memset(px, 0, sizeof(*px));
    px->target_port = target_port;
    snprintf(target_spec, sizeof(target_spec), "TCP:127.0.0.1:%d", target_port);
    if (dump_path != NULL) {
        argv[3] = "-r";
        argv[4] = (char *)dump_path;
        argv[5] = listen_spec;
        argv[6] = target_spec;
    }
    /* The free port may be taken before socat binds it: try a few. */
    for (int attempt = 0; attempt < 5; attempt++) {
        px->port = obx_dev_free_port();
        cr_assert(px->port > 0, "harness_proxy_start: no free port");
        snprintf(listen_spec, sizeof(listen_spec), "TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork",
                 px->port);
        harness_spawn(&px->proc, argv, NULL);
        if (wait_listening(px)) {
            return px->port;
        }
        harness_proc_kill(&px->proc);
    }
    cr_assert_fail("harness_proxy_start: socat did not listen; its log ends with:\n%s",
                   obx_dev_file_tail(px->proc.log_path, 1500));
    return -1;
}

int
harness_proxy_start(struct harness_proxy *px, int target_port)
{
    return proxy_start(px, target_port, NULL);
}

int
harness_proxy_start_dumping(struct harness_proxy *px, int target_port, const char *dump_path)
{
    return proxy_start(px, target_port, dump_path);
}

int
harness_proxy_connections(const struct harness_proxy *px)
{
    char *log = harness_proc_log(&px->proc);
    int n = 0;

    /* The readiness probe (wait_listening) connected once before the clients did. */
    for (const char *p = log; (p = strstr(p, "accepting connection from")) != NULL; p++) {
        n++;
    }
    free(log);
    return n > 0 ? n - 1 : 0;
}

void
harness_proxy_pause(struct harness_proxy *px)
{
    harness_proc_signal(&px->proc, SIGSTOP);
    /* Wait until it took effect, so the test's next step really meets a black hole. */
    HARNESS_WAIT_UNTIL(obx_dev_pid_stopped(px->proc.pid), PROXY_SIGNAL_TIMEOUT_MS);
}

void
harness_proxy_resume(struct harness_proxy *px)
{
    harness_proc_signal(&px->proc, SIGCONT);
    HARNESS_WAIT_UNTIL(!obx_dev_pid_stopped(px->proc.pid), PROXY_SIGNAL_TIMEOUT_MS);
}

void
harness_proxy_stop(struct harness_proxy *px)
{
    harness_proc_kill(&px->proc);
}
