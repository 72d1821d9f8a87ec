/* SPDX-License-Identifier: MIT */
/*
 * test_daemon_readiness.c - what a running daemon tells supervisors: the
 * sd_notify datagrams (READY=1 once the database and the broker answer,
 * WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1 on SIGTERM) on a path
 * and on an abstract $NOTIFY_SOCKET the test binds itself; the ready log
 * line, printed exactly once; and `outboxd health`, which the container
 * image's HEALTHCHECK runs: 0 while /readyz answers 200, 1 while it
 * answers 503 or nothing listens, 2 on bad usage; and the end of a stop: a
 * process whose exit stalls after its worker is done still ends within the
 * drain timeout and the exit grace, with its drain's exit code.
 */
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "harness.h"
#include "http_get.h"
#include "relay_check.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* The daemon's constant ready message (src/outboxd/lifecycle.h); users grep for it. */
#define READY_LINE "level=info outboxd ready command="

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(daemon_readiness, .init = setup, .fini = teardown, .timeout = 90);

/* The datagrams one $NOTIFY_SOCKET received, in order, joined by '|'. */
struct notify_sink {
    int fd;
    char env[sizeof(((struct sockaddr_un *)0)->sun_path) + 16]; /* NOTIFY_SOCKET=... */
    char seen[8192];
    char path[108]; /* a filesystem socket's path, unlinked at the end; "" if abstract */
};

static void
sink_open(struct notify_sink *s, int abstract)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t len;

    memset(s, 0, sizeof(*s));
    s->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(s->fd, 0);
    if (abstract) {
        int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "obx-notify-%d", (int)getpid());

        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
        snprintf(s->env, sizeof(s->env), "NOTIFY_SOCKET=@%s", sa.sun_path + 1);
    } else {
        snprintf(s->path, sizeof(s->path), "/tmp/obx-notify-%d.sock", (int)getpid());
        unlink(s->path);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->path);
        len = sizeof(sa);
        snprintf(s->env, sizeof(s->env), "NOTIFY_SOCKET=%s", s->path);
    }
    cr_assert_eq(bind(s->fd, (struct sockaddr *)&sa, len), 0, "bind %s", s->env);
}

static void
sink_close(struct notify_sink *s)
{
    close(s->fd);
    if (s->path[0] != '\0') {
        unlink(s->path);
    }
}

/* Reads datagrams until one contains `needle` (1) or timeout_ms passes (0). */
static int
sink_wait_for(struct notify_sink *s, const char *needle, int timeout_ms)
{
    long long deadline = harness_now_ms() + timeout_ms;

    for (;;) {
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        long long left = deadline - harness_now_ms();
        char msg[1024];
        ssize_t n;
        size_t used = strlen(s->seen);

        if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
            return 0;
        }
        n = recv(s->fd, msg, sizeof(msg) - 1, 0);
        cr_assert_gt(n, 0);
        msg[n] = '\0';
        snprintf(s->seen + used, sizeof(s->seen) - used, "%s|", msg);
        if (strstr(msg, needle) != NULL) {
            return 1;
        }
    }
}

static int
count_of(const char *haystack, const char *needle)
{
    int n = 0;

    for (const char *p = strstr(haystack, needle); p != NULL; p = strstr(p + 1, needle)) {
        n++;
    }
    return n;
}

/* Runs `outboxd health ARGS...` with `env`; returns its exit code, its output in `out`. */
static int
run_health(char *const extra_env[], const char *a1, const char *a2, char *out, size_t out_cap)
{
    char *argv[] = {(char *)harness_bin("outboxd"), "health", (char *)a1, (char *)a2, NULL};
    struct harness_proc p;
    char *log;
    int status;

    harness_spawn(&p, argv, extra_env);
    status = harness_proc_wait(&p, 15000);
    log = harness_proc_log(&p);
    snprintf(out, out_cap, "%s", log);
    free(log);
    cr_assert_neq(status, -1, "outboxd health did not return within 15 s");
    return status;
}

Test(daemon_readiness, a_relay_notifies_ready_watchdog_and_stopping_and_logs_ready_once)
{
    struct notify_sink sink;
    struct relay_env env;
    struct harness_proc relay;
    char addr[64], url[96], out[1024], *log;
    char *health_env[2] = {NULL, NULL};

    sink_open(&sink, 0);
    relay_test_env(&env, "READY_RELAY", "readyrelay");
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", http_free_port());
    relay_env_set(&env, "OUTBOX_HTTP_ADDR", addr);
    relay_env_set(&env, "OUTBOX_LOG_LEVEL", "info");
    relay_env_set(&env, "NOTIFY_SOCKET", strchr(sink.env, '=') + 1);
    relay_env_set(&env, "WATCHDOG_USEC", "400000"); /* a ping every 200 ms */
    relay_test_start(&relay, &env, "ready-1");

    cr_assert(sink_wait_for(&sink, "READY=1", 30000), "no READY=1; got %s\n%s", sink.seen,
              consume_test_log_tail(&relay, 2000));
    cr_assert(harness_proc_log_contains(&relay, READY_LINE "relay"), "no ready line");

    snprintf(url, sizeof(url), "OUTBOX_HTTP_ADDR=%s", addr);
    health_env[0] = url;
    cr_assert_eq(run_health(health_env, NULL, NULL, out, sizeof(out)), 0, "%s", out);
    cr_assert(strstr(out, "ready") != NULL, "%s", out);
    snprintf(url, sizeof(url), "http://%s/readyz", addr);
    cr_assert_eq(run_health(NULL, "--url", url, out, sizeof(out)), 0, "%s", out);

    /* Pings keep coming after READY=1: at least three more within 2 s. */
    for (int i = 0; i < 3; i++) {
        cr_assert(sink_wait_for(&sink, "WATCHDOG=1", 2000), "watchdog pings stopped: %s",
                  sink.seen);
    }
    harness_proc_signal(&relay, SIGTERM);
    cr_assert(sink_wait_for(&sink, "STOPPING=1", 10000), "no STOPPING=1; got %s", sink.seen);
    cr_assert_eq(harness_proc_wait(&relay, 15000), 0);
    cr_assert_lt(strstr(sink.seen, "READY=1"), strstr(sink.seen, "STOPPING=1"));

    log = harness_proc_log(&relay);
    cr_assert_eq(count_of(log, READY_LINE), 1, "the ready line must appear once:\n%s", log);
    free(log);
    relay_env_fini(&env);
    sink_close(&sink);
}

/*
 * After the worker stopped, an exit handler sleeps 60 s (a test hook), as a
 * library's can while its threads run: the relay still ends within the
 * drain timeout and the exit grace (src/outboxd/service/exit_guard.h), with
 * the drain's code, 0, and says why in one line.
 */
Test(daemon_readiness, a_relay_whose_exit_stalls_ends_within_the_drain_timeout_and_the_grace)
{
    enum { DRAIN_S = 2, GRACE_S = 3 };
    struct relay_env env;
    struct harness_proc relay;
    long long asked_ms, took_ms;
    int status;

    relay_test_env(&env, "EXIT_STALL", "exitstall");
    relay_env_set_int(&env, "OUTBOX_DRAIN_TIMEOUT_SECONDS", DRAIN_S);
    relay_env_set(&env, "OUTBOX_TEST_STALL_AT_EXIT_MS", "60000");
    relay_test_start(&relay, &env, "exit-stall");
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&relay, READY_LINE "relay"), 30000);

    asked_ms = harness_now_ms();
    kill(relay.pid, SIGTERM);
    status = harness_proc_wait(&relay, 30000);
    took_ms = harness_now_ms() - asked_ms;
    cr_log_info("a stalled exit ended %lld ms after SIGTERM", took_ms);
    cr_assert_eq(status, 0, "exit status %d (-1: still running 30 s on):\n%s", status,
                 consume_test_log_tail(&relay, 3000));
    cr_assert(harness_proc_log_contains(&relay, "relay stopped"), "%s",
              consume_test_log_tail(&relay, 3000));
    cr_assert(harness_proc_log_contains(&relay, "stalling at exit on purpose"),
              "the hook did not stall the exit:\n%s", consume_test_log_tail(&relay, 3000));
    cr_assert(harness_proc_log_contains(
                  &relay, "level=warn exit stalled after the stop, ending the process code=0"),
              "%s", consume_test_log_tail(&relay, 3000));
    cr_assert_lt(took_ms, (DRAIN_S + GRACE_S) * 1000 + 2000,
                 "a %d s drain timeout and a %d s grace took %lld ms", DRAIN_S, GRACE_S, took_ms);
    relay_env_fini(&env);
}

Test(daemon_readiness, a_consumer_notifies_an_abstract_socket)
{
    const char *const handlers[] = {"noop=sql:SELECT 1", NULL};
    struct notify_sink sink;
    struct consume_group g;
    struct harness_proc consumer;

    sink_open(&sink, 1);
    consume_group_init(&g, "jetstream", "READY", NULL);
    relay_env_set(&g.env, "OUTBOX_LOG_LEVEL", "info");
    relay_env_set(&g.env, "NOTIFY_SOCKET", strchr(sink.env, '=') + 1);
    consume_test_start(&consumer, &g.env, "ready-c1", handlers);
    cr_assert(sink_wait_for(&sink, "READY=1", 30000), "no READY=1; got %s\n%s", sink.seen,
              consume_test_log_tail(&consumer, 2000));
    cr_assert(harness_proc_log_contains(&consumer, READY_LINE "consume"), "no ready line");
    cr_assert_eq(count_of(sink.seen, "WATCHDOG=1"), 0, "pings without WATCHDOG_USEC");
    kill(consumer.pid, SIGTERM);
    cr_assert(sink_wait_for(&sink, "STOPPING=1", 10000), "no STOPPING=1; got %s", sink.seen);
    cr_assert_eq(harness_proc_wait(&consumer, 15000), 0);
    consume_group_fini(&g);
    sink_close(&sink);
}

Test(daemon_readiness, health_fails_while_the_daemon_waits_for_its_database)
{
    struct notify_sink sink;
    struct relay_env env;
    struct harness_proc relay;
    char addr[64], url[96], out[1024];
    long long deadline;
    int code = -1;

    sink_open(&sink, 0);
    relay_test_env(&env, "READY_DOWN", "readydown");
    relay_env_set(&env, "OUTBOX_DATABASE_URL", "postgresql://127.0.0.1:1/none?connect_timeout=1");
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", http_free_port());
    relay_env_set(&env, "OUTBOX_HTTP_ADDR", addr);
    relay_env_set(&env, "NOTIFY_SOCKET", strchr(sink.env, '=') + 1);
    relay_test_start(&relay, &env, "down-1");
    snprintf(url, sizeof(url), "http://%s/readyz", addr);

    /* Until its HTTP server listens health says "refused"; then /readyz says 503. */
    for (deadline = harness_now_ms() + 20000; harness_now_ms() < deadline;) {
        code = run_health(NULL, "--url", url, out, sizeof(out));
        if (strstr(out, "answered 503") != NULL) {
            break;
        }
        harness_sleep_ms(100);
    }
    cr_assert_eq(code, 1, "%s", out);
    cr_assert(strstr(out, "answered 503") != NULL, "%s", out);
    cr_assert(sink_wait_for(&sink, "STATUS=waiting", 5000), "got %s", sink.seen);
    cr_assert_not(sink_wait_for(&sink, "READY=1", 1500), "READY=1 without a database: %s",
                  sink.seen);
    cr_assert_not(harness_proc_log_contains(&relay, READY_LINE), "ready line without a database");

    harness_proc_signal(&relay, SIGTERM);
    cr_assert(sink_wait_for(&sink, "STOPPING=1", 10000), "no STOPPING=1; got %s", sink.seen);
    harness_proc_wait(&relay, 15000);
    relay_env_fini(&env);
    sink_close(&sink);
}

Test(daemon_readiness, health_exits_1_when_nothing_listens_and_2_on_bad_usage)
{
    char url[64], out[1024];
    char *no_addr[] = {"OUTBOX_HTTP_ADDR=", NULL};
    char *wildcard[] = {url, NULL};

    snprintf(url, sizeof(url), "OUTBOX_HTTP_ADDR=0.0.0.0:%d", http_free_port());
    cr_assert_eq(run_health(wildcard, NULL, NULL, out, sizeof(out)), 1, "%s", out);
    cr_assert(strstr(out, "connection refused") != NULL, "%s", out);
    cr_assert_eq(run_health(no_addr, NULL, NULL, out, sizeof(out)), 2, "%s", out);
    cr_assert(strstr(out, "OUTBOX_HTTP_ADDR is not set") != NULL, "%s", out);
    cr_assert_eq(run_health(NULL, "--url", "https://127.0.0.1:1/", out, sizeof(out)), 2, "%s", out);
    cr_assert_eq(run_health(NULL, "--url", "http://127.0.0.1/", out, sizeof(out)), 2, "%s", out);
    cr_assert_eq(run_health(NULL, "--bogus", NULL, out, sizeof(out)), 2, "%s", out);
}
