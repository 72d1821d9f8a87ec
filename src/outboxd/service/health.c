/* SPDX-License-Identifier: MIT */
/*
 * health.c - a minimal HTTP/1.0 GET over a plain socket: the image runs
 * its HEALTHCHECK with the daemon's own binary instead of shipping curl.
 *
 * Only http:// URLs with a literal or resolvable host are understood;
 * anything else is a usage error (exit 2), so a typo in a health check
 * fails loudly instead of reporting "not ready" forever. The whole
 * exchange is bounded by one deadline, well inside Docker's default
 * health check timeout (30 s).
 */
#include "health.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/banned.h" /* last: poisons unsafe functions */

enum { DEADLINE_MS = 5000 };

struct target {
    char host[256]; /* without the brackets of an IPv6 literal */
    char port[8];
    char path[512];
};

static long long
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Fills host and port of `t` from "host:port" or "[v6]:port" (`len` bytes
 * of `s`). A daemon listening on a wildcard address is asked on loopback.
 */
static int
split_host_port(const char *s, size_t len, struct target *t)
{
    const char *end = s + len, *host = s, *colon = NULL;
    size_t host_len, port_len;

    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);

        if (close == NULL || close + 1 == end || close[1] != ':') {
            return -1;
        }
        host = s + 1;
        host_len = (size_t)(close - host);
        colon = close + 1;
    } else {
        for (const char *p = s; p < end; p++) {
            colon = *p == ':' ? p : colon;
        }
        if (colon == NULL) {
            return -1;
        }
        host_len = (size_t)(colon - s);
    }
    port_len = (size_t)(end - colon - 1);
    if (host_len >= sizeof(t->host) || port_len == 0 || port_len > 5 ||
        strspn(colon + 1, "0123456789") < port_len) {
        return -1;
    }
    snprintf(t->host, sizeof(t->host), "%.*s", (int)host_len, host);
    snprintf(t->port, sizeof(t->port), "%.*s", (int)port_len, colon + 1);
    if (t->host[0] == '\0' || strcmp(t->host, "0.0.0.0") == 0) {
        snprintf(t->host, sizeof(t->host), "127.0.0.1");
    } else if (strcmp(t->host, "::") == 0) {
        snprintf(t->host, sizeof(t->host), "::1");
    }
    return 0;
}

/* http://host:port[/path]; the path defaults to "/". */
static int
parse_url(const char *url, struct target *t)
{
    const char *rest, *slash;

    if (strncmp(url, "http://", 7) != 0) {
        return -1;
    }
    rest = url + 7;
    slash = strchr(rest, '/');
    if (split_host_port(rest, slash != NULL ? (size_t)(slash - rest) : strlen(rest), t) != 0) {
        return -1;
    }
    if ((size_t)snprintf(t->path, sizeof(t->path), "%s", slash != NULL ? slash : "/") >=
        sizeof(t->path)) {
        return -1;
    }
    return 0;
}

/* Waits for `events` on `fd` until `deadline`; 1 ready, 0 timed out, -1 error. */
static int
wait_fd(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        struct pollfd p = {.fd = fd, .events = events};
        int n;

        if (left <= 0) {
            return 0;
        }
        n = poll(&p, 1, (int)left);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        return n > 0 ? 1 : n;
    }
}

/* A connected non-blocking socket to one of the host's addresses, or -1 with `why`. */
static int
connect_target(const struct target *t, long long deadline, const char **why)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    int fd = -1;

    if (getaddrinfo(t->host, t->port, &hints, &res) != 0) {
        *why = "cannot resolve host";
        return -1;
    }
    *why = "connection refused";
    for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        int soerr = 0;
        socklen_t soerr_len = sizeof(soerr);

        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 &&
            (errno != EINPROGRESS || wait_fd(fd, POLLOUT, deadline) != 1 ||
             getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &soerr_len) != 0 || soerr != 0)) {
            *why = now_ms() >= deadline ? "timed out connecting" : "connection refused";
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

/* Sends the request and reads the status code; -1 with `why` on failure. */
static int
http_status(int fd, const struct target *t, long long deadline, const char **why)
{
    char buf[1024];
    size_t have = 0;
    int len, code;

    len = snprintf(buf, sizeof(buf), "GET %s HTTP/1.0\r\nHost: %s:%s\r\nConnection: close\r\n\r\n",
                   t->path, t->host, t->port);
    for (int off = 0; off < len;) {
        ssize_t n = send(fd, buf + off, (size_t)(len - off), MSG_NOSIGNAL);

        if (n < 0 && (errno == EAGAIN || errno == EINTR) && wait_fd(fd, POLLOUT, deadline) == 1) {
            continue;
        }
        if (n <= 0) {
            *why = "cannot send the request";
            return -1;
        }
        off += (int)n;
    }
    /* The status line is all we need: "HTTP/1.x NNN ...". */
    while (have < 12) {
        ssize_t n = recv(fd, buf + have, sizeof(buf) - 1 - have, 0);

        if (n < 0 && (errno == EAGAIN || errno == EINTR) && wait_fd(fd, POLLIN, deadline) == 1) {
            continue;
        }
        if (n <= 0) {
            *why = n < 0 && now_ms() >= deadline ? "timed out waiting for an answer"
                                                 : "connection closed without an answer";
            return -1;
        }
        have += (size_t)n;
    }
    buf[have] = '\0';
    if (strncmp(buf, "HTTP/1.", 7) != 0 || sscanf(buf + 8, " %3d", &code) != 1) {
        *why = "not an HTTP answer";
        return -1;
    }
    return code;
}

static int
usage_error(const char *msg)
{
    fprintf(stderr,
            "outboxd health: %s\nusage: outboxd health [--url http://HOST:PORT/PATH]\n"
            "  (default: http://$OUTBOX_HTTP_ADDR/readyz; exit 0 ready, 1 not ready)\n",
            msg);
    return 2;
}

int
obx_cmd_health(int argc, char **argv)
{
    const char *url = NULL, *addr = getenv("OUTBOX_HTTP_ADDR"), *why = NULL;
    char default_url[300];
    struct target t;
    long long deadline = now_ms() + DEADLINE_MS;
    int fd, code;

    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
            url = argv[++i];
        } else if (strncmp(argv[i], "--url=", 6) == 0) {
            url = argv[i] + 6;
        } else {
            return usage_error("unknown argument");
        }
    }
    if (url == NULL) {
        if (addr == NULL || addr[0] == '\0') {
            return usage_error("OUTBOX_HTTP_ADDR is not set and no --url was given");
        }
        snprintf(default_url, sizeof(default_url), "http://%s/readyz", addr);
        url = default_url;
    }
    if (parse_url(url, &t) != 0) {
        return usage_error("the URL must be http://HOST:PORT[/PATH]");
    }
    fd = connect_target(&t, deadline, &why);
    code = fd < 0 ? -1 : http_status(fd, &t, deadline, &why);
    if (fd >= 0) {
        close(fd);
    }
    if (code == 200) {
        printf("ready\n");
        return 0;
    }
    if (code > 0) {
        printf("not ready: %s answered %d\n", t.path, code);
    } else {
        printf("not ready: %s\n", why);
    }
    return 1;
}
