/* SPDX-License-Identifier: MIT */
/*
 * devserver_probe.c - the clock, process and port probes, and file helpers
 * shared by the throwaway servers and the test harness.
 *
 * Process probes read /proc: a zombie counts as gone, because the PID 1 of
 * a container may never reap an orphan, and a pid may be reused, so callers
 * that kill check the command line or the start time first.
 */
#include "devserver_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "common/banned.h" /* last: poisons unsafe functions */

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
obx_dev_pid_gone(pid_t pid)
{
    char state;

    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) {
        return 1;
    }
    state = proc_state(pid);
    return state == 'Z' || state == 'X';
}

int
obx_dev_pid_stopped(pid_t pid)
{
    char state = proc_state(pid);

    return state == 'T' || state == 't';
}

int
obx_dev_wait_pid_gone(pid_t pid, int timeout_ms)
{
    long long deadline = obx_monotonic_ms() + timeout_ms;

    while (!obx_dev_pid_gone(pid)) {
        if (obx_monotonic_ms() >= deadline) {
            return 0;
        }
        obx_sleep_ms(10);
    }
    return 1;
}

int
obx_dev_cmdline_contains(pid_t pid, const char *needle)
{
    char path[64];
    size_t len = 0;
    char *cmdline;
    int found = 0;

    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    cmdline = obx_dev_read_file(path, &len);
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
obx_dev_pid_starttime(pid_t pid)
{
    char path[64];
    char *stat;
    const char *p;
    long long start = -1;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    stat = obx_dev_read_file(path, NULL);
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

/* The lowest port the kernel hands out as a connection's source port (32768 by default). */
static int
ephemeral_low(void)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int low = 32768;

    if (f != NULL) {
        if (fscanf(f, "%d", &low) != 1) {
            low = 32768;
        }
        fclose(f);
    }
    return low;
}

/* 1 when nothing holds `port` on loopback right now. */
static int
port_is_free(int port)
{
    struct sockaddr_in addr;
    int fd = loopback_socket(port, &addr);
    int ok;

    if (fd < 0) {
        return 0;
    }
    ok = bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
    close(fd);
    return ok;
}

/* Ports this process handed out (one bit each): never handed out twice. */
static pthread_mutex_t handed_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char handed[65536 / 8];
static unsigned int calls;

/*
 * A free port below the ephemeral range. Servers are restarted on the port
 * they had, and while one is down a port from the ephemeral range can become
 * some connection's source port (even a client's own reconnect, which then
 * connects to itself), so the restart finds it taken. Below the range only
 * another explicit bind can take it.
 *
 * A free port stays free until its server binds it, so two calls before
 * that (two servers started one after the other, or by two threads) could
 * draw the same one: the random draws of one millisecond repeat, their seed
 * being the pid and the clock. So the process remembers every port it
 * handed out and never hands one out again, and each call draws its own
 * sequence.
 */
int
obx_dev_free_port(void)
{
    enum { SPAN = 12000, TRIES = 400 };
    int high = ephemeral_low(), found = -1;
    int low = high - SPAN > 1024 ? high - SPAN : 1024;
    unsigned int seed;

    pthread_mutex_lock(&handed_lock);
    seed = (unsigned int)getpid() * 2654435761u ^ (unsigned int)obx_monotonic_ms() ^
           ++calls * 0x9e3779b9u;
    for (int i = 0; high - low > 0 && i < TRIES && found < 0; i++) {
        int port = low + (int)(rand_r(&seed) % (unsigned int)(high - low));

        if ((handed[port / 8] & 1u << port % 8) == 0 && port_is_free(port)) {
            handed[port / 8] |= (unsigned char)(1u << port % 8);
            found = port;
        }
    }
    pthread_mutex_unlock(&handed_lock);
    return found;
}

int
obx_dev_tcp_connects(int port)
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

int
obx_dev_path(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", dir, name);

    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* Reads fd to EOF into a growing buffer; returns the bytes read (the buffer may have moved). */
static size_t
read_all(int fd, char **buf, size_t cap)
{
    size_t used = 0;
    ssize_t n;

    while ((n = read(fd, *buf + used, cap - used - 1)) != 0) {
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            break;
        }
        used += (size_t)n;
        if (cap - used < 2) {
            char *bigger = realloc(*buf, cap * 2);

            if (bigger == NULL) {
                break;
            }
            *buf = bigger;
            cap *= 2;
        }
    }
    return used;
}

char *
obx_dev_read_file(const char *path, size_t *len)
{
    char *buf = malloc(4096);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t used;

    if (fd < 0 || buf == NULL) {
        free(buf);
        if (fd >= 0) {
            close(fd);
        }
        return NULL;
    }
    /* Files in /proc report size 0, so read until EOF instead of trusting fstat. */
    used = read_all(fd, &buf, 4096);
    close(fd);
    buf[used] = '\0';
    if (len != NULL) {
        *len = used;
    }
    return buf;
}

const char *
obx_dev_file_tail(const char *path, size_t max)
{
    static char tail[4096];
    size_t len = 0;
    char *text = obx_dev_read_file(path, &len);
    size_t keep;

    if (text == NULL) {
        snprintf(tail, sizeof(tail), "(no %s)", path);
        return tail;
    }
    keep = len < max ? len : max;
    keep = keep < sizeof(tail) - 1 ? keep : sizeof(tail) - 1;
    memcpy(tail, text + len - keep, keep);
    tail[keep] = '\0';
    free(text);
    return tail;
}
