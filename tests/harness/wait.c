/* SPDX-License-Identifier: MIT */
/*
 * wait.c - waiting with a deadline, and the small probes worth polling:
 * is a process gone or stopped, is a port free or answering.
 *
 * Tests never sleep a fixed time to let something happen: they poll the
 * condition every 10 ms until a deadline, so a fast machine does not wait
 * and a slow one does not fail.
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
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "harness.h"

#include "banned.h" /* last: poisons unsafe functions */

long long
harness_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
harness_sleep_ms(int ms)
{
    struct timespec left = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

int
harness_wait_until(int (*cond)(void *), void *arg, int timeout_ms)
{
    long long deadline = harness_now_ms() + timeout_ms;

    for (;;) {
        if (cond(arg)) {
            return 1;
        }
        if (harness_now_ms() >= deadline) {
            return 0;
        }
        harness_sleep_ms(10);
    }
}

/* The state letter of /proc/<pid>/stat ('R', 'S', 'T', 'Z', ...), or 0. */
static char
proc_state(pid_t pid)
{
    char path[64];
    char buf[512];
    const char *close_paren;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    /* The command name may contain spaces and parentheses: the state follows the last ')'. */
    close_paren = strrchr(buf, ')');
    return close_paren != NULL && close_paren[1] == ' ' ? close_paren[2] : 0;
}

int
hx_pid_gone(pid_t pid)
{
    char state;

    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) {
        return 1;
    }
    state = proc_state(pid);
    return state == 'Z' || state == 'X';
}

int
hx_pid_stopped(pid_t pid)
{
    char state = proc_state(pid);

    return state == 'T' || state == 't';
}

int
hx_wait_pid_gone(pid_t pid, int timeout_ms)
{
    long long deadline = harness_now_ms() + timeout_ms;

    while (!hx_pid_gone(pid)) {
        if (harness_now_ms() >= deadline) {
            return 0;
        }
        harness_sleep_ms(10);
    }
    return 1;
}

int
hx_cmdline_contains(pid_t pid, const char *needle)
{
    char path[64];
    size_t len = 0;
    char *cmdline;
    int found = 0;

    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    cmdline = hx_read_file(path, &len);
    if (cmdline == NULL) {
        return 0;
    }
    /* Arguments are NUL-separated; join them so one strstr sees them all. */
    for (size_t i = 0; i < len; i++) {
        if (cmdline[i] == '\0') {
            cmdline[i] = ' ';
        }
    }
    found = strstr(cmdline, needle) != NULL;
    free(cmdline);
    return found;
}

long long
hx_pid_starttime(pid_t pid)
{
    char path[64];
    char *stat;
    const char *p;
    long long start = -1;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    stat = hx_read_file(path, NULL);
    if (stat == NULL) {
        return -1;
    }
    p = strrchr(stat, ')');
    /* Field 22 is the start time; the text after ')' begins with field 3. */
    for (int field = 2; p != NULL && field < 22; field++) {
        p = strchr(p + 1, ' ');
    }
    if (p != NULL) {
        start = strtoll(p + 1, NULL, 10);
    }
    free(stat);
    return start;
}

static int
loopback_socket(int port, struct sockaddr_in *addr)
{
    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    addr->sin_port = htons((unsigned short)port);
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

int
hx_free_port(void)
{
    struct sockaddr_in addr;
    socklen_t addr_len = sizeof(addr);
    int fd = loopback_socket(0, &addr);
    int port = -1;

    if (fd < 0) {
        return -1;
    }
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
        getsockname(fd, (struct sockaddr *)&addr, &addr_len) == 0) {
        port = ntohs(addr.sin_port);
    }
    close(fd);
    return port;
}

int
hx_tcp_connects(int port)
{
    struct sockaddr_in addr;
    int fd = loopback_socket(port, &addr);
    int ok;

    if (fd < 0) {
        return 0;
    }
    ok = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
    close(fd);
    return ok;
}
