/* SPDX-License-Identifier: MIT */
/*
 * http_get.c - a minimal GET for the tests (http_get.h).
 */
#include "http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "common/buf.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

int
http_get(int port, const char *path, char **body)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    struct obx_buf reply;
    char request[256], chunk[4096];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), status = 0;
    const char *start;
    ssize_t n;

    *body = NULL;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return 0;
    }
    snprintf(request, sizeof(request), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (write(fd, request, strlen(request)) < 0) {
        close(fd);
        return 0;
    }
    obx_buf_init(&reply);
    while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
        obx_buf_append(&reply, chunk, (size_t)n);
    }
    close(fd);
    if (reply.data != NULL && sscanf(reply.data, "HTTP/%*s %d", &status) == 1 &&
        (start = strstr(reply.data, "\r\n\r\n")) != NULL) {
        *body = strdup(start + 4);
    }
    obx_buf_fini(&reply);
    return status;
}

double
http_metric(const char *body, const char *series)
{
    size_t len = strlen(series);

    for (const char *line = body; line != NULL && *line; line = strchr(line, '\n')) {
        line += *line == '\n';
        if (strncmp(line, series, len) == 0 && line[len] == ' ') {
            return strtod(line + len + 1, NULL);
        }
    }
    return -1;
}

int
http_free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
        port = ntohs(sa.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

char *
http_wait_metric(int port, const char *series, double want)
{
    long long deadline = harness_now_ms() + 30000;
    char *body = NULL;

    for (;;) {
        free(body);
        body = NULL;
        /* The daemon's HTTP server may not listen yet: 0 until it does. */
        if (http_get(port, "/metrics", &body) == 200 && http_metric(body, series) >= want) {
            return body;
        }
        cr_assert_lt(harness_now_ms(), deadline, "%s never reached %g:\n%s", series, want, body);
        harness_sleep_ms(200);
    }
}
