/* SPDX-License-Identifier: MIT */
/*
 * commit_cutter.c - see commit_cutter.h. One thread, poll() over the
 * listening socket and every connection pair; blocking writes (the
 * clients here send a few kilobytes at a time). Every descriptor is
 * close-on-exec: a process the test spawns must not hold a connection open
 * after it is cut.
 */
#define _GNU_SOURCE /* accept4, pipe2 */

#include "commit_cutter.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/banned.h" /* last: poisons unsafe functions */

enum { MAX_PAIRS = 32, CHUNK = 65536 };

struct pair {
    int client_fd; /* -1 when unused */
    int server_fd;
};

static int
listen_loopback(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int
connect_loopback(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((unsigned short)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int
write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The word anywhere in the bytes: a COMMIT is a statement of its own, sent in one write. */
static int
holds_commit(const char *buf, size_t len)
{
    for (size_t i = 0; i + 6 <= len; i++) {
        if (strncasecmp(buf + i, "commit", 6) == 0) {
            return 1;
        }
    }
    return 0;
}

static void
pair_close(struct pair *p)
{
    close(p->client_fd);
    close(p->server_fd);
    p->client_fd = p->server_fd = -1;
}

static void
accept_pair(struct commit_cutter *c, struct pair *pairs)
{
    int client = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    int server = client >= 0 ? connect_loopback(c->target_port) : -1;

    for (int i = 0; server >= 0 && i < MAX_PAIRS; i++) {
        if (pairs[i].client_fd < 0) {
            pairs[i].client_fd = client;
            pairs[i].server_fd = server;
            return;
        }
    }
    if (client >= 0) {
        close(client); /* no server, or no room: the client sees a refused connection */
    }
    if (server >= 0) {
        close(server);
    }
}

/* Moves what `from` has to the other side; 0 when the pair must close. */
static int
forward(struct commit_cutter *c, struct pair *p, int from_client)
{
    char buf[CHUNK]; /* on the thread's stack: 64 KiB of its 8 MiB */
    ssize_t n = read(from_client ? p->client_fd : p->server_fd, buf, sizeof(buf));

    if (n <= 0) {
        return n < 0 && errno == EINTR;
    }
    if (from_client && c->cuts == 0 && holds_commit(buf, (size_t)n)) {
        c->cuts = 1;
        if (c->when == CUT_AFTER_COMMIT) {
            write_all(p->server_fd, buf, (size_t)n); /* ahead of the FIN: the server reads it */
        }
        return 0;
    }
    return write_all(from_client ? p->server_fd : p->client_fd, buf, (size_t)n) == 0;
}

static void *
run(void *arg)
{
    struct commit_cutter *c = arg;
    struct pair pairs[MAX_PAIRS];
    struct pollfd fds[2 + 2 * MAX_PAIRS];

    for (int i = 0; i < MAX_PAIRS; i++) {
        pairs[i].client_fd = pairs[i].server_fd = -1;
    }
    for (;;) {
        nfds_t n = 0;

        fds[n++] = (struct pollfd){.fd = c->wake_fd[0], .events = POLLIN};
        fds[n++] = (struct pollfd){.fd = c->listen_fd, .events = POLLIN};
        for (int i = 0; i < MAX_PAIRS; i++) {
            fds[n++] = (struct pollfd){.fd = pairs[i].client_fd, .events = POLLIN};
            fds[n++] = (struct pollfd){.fd = pairs[i].server_fd, .events = POLLIN};
        }
        if (poll(fds, n, -1) < 0 && errno != EINTR) {
            break;
        }
        if (fds[0].revents != 0) {
            break;
        }
        if (fds[1].revents & POLLIN) {
            accept_pair(c, pairs);
        }
        for (int i = 0; i < MAX_PAIRS; i++) {
            int keep = 1;

            if (pairs[i].client_fd >= 0 && fds[2 + 2 * i].revents != 0) {
                keep = forward(c, &pairs[i], 1);
            }
            if (keep && pairs[i].client_fd >= 0 && fds[3 + 2 * i].revents != 0) {
                keep = forward(c, &pairs[i], 0);
            }
            if (!keep) {
                pair_close(&pairs[i]);
            }
        }
    }
    for (int i = 0; i < MAX_PAIRS; i++) {
        if (pairs[i].client_fd >= 0) {
            pair_close(&pairs[i]);
        }
    }
    return NULL;
}

int
commit_cutter_start(struct commit_cutter *c, int target_port, enum commit_cut when)
{
    memset(c, 0, sizeof(*c));
    c->target_port = target_port;
    c->when = when;
    c->listen_fd = listen_loopback(&c->port);
    if (c->listen_fd < 0) {
        return -1;
    }
    if (pipe2(c->wake_fd, O_CLOEXEC) != 0 || pthread_create(&c->thread, NULL, run, c) != 0) {
        close(c->listen_fd);
        return -1;
    }
    return c->port;
}

void
commit_cutter_stop(struct commit_cutter *c)
{
    if (write(c->wake_fd[1], "x", 1) == 1) {
        pthread_join(c->thread, NULL);
    }
    close(c->wake_fd[0]);
    close(c->wake_fd[1]);
    close(c->listen_fd);
}
