/* SPDX-License-Identifier: MIT */
/*
 * server_info.c - the version a NATS server announces (see js_admin.h).
 *
 * nats.c 3.4.1 keeps the server's INFO to itself, so this reads it: a
 * server sends `INFO {...}\r\n` first on every connection, before any TLS
 * handshake or authentication. Read and closed; nothing is sent. The
 * servers of OUTBOX_NATS_URL are asked in turn until one answers, so a
 * cluster with a node down still tells its version.
 */
#include "js_admin.h"

#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/error.h"
#include "common/url_list.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { INFO_WAIT_MS = 2000, INFO_CAP = 8192 };

/* host and port of one URL: [scheme://][user[:pass]@]host[:port]. */
static int
host_port(const char *url, char *host, size_t host_cap, char *port, size_t port_cap)
{
    const char *p = strstr(url, "://"), *at, *end, *colon;
    size_t len;

    p = p != NULL ? p + 3 : url;
    end = p + strcspn(p, ",/");
    at = memchr(p, '@', (size_t)(end - p));
    p = at != NULL ? at + 1 : p;
    colon = memchr(p, ':', (size_t)(end - p));
    len = (size_t)((colon != NULL ? colon : end) - p);
    if (len == 0 || len >= host_cap) {
        return -1;
    }
    snprintf(host, host_cap, "%.*s", (int)len, p);
    snprintf(port, port_cap, "%.*s", colon != NULL ? (int)(end - colon - 1) : 4,
             colon != NULL ? colon + 1 : "4222");
    return 0;
}

static int
connect_to(const char *host, const char *port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int fd = -1;

    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        return -1;
    }
    for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

/* The INFO line into `buf`; its length, or -1. */
static ssize_t
read_info(int fd, char *buf, size_t cap)
{
    size_t used = 0;

    while (used + 1 < cap && memchr(buf, '\n', used) == NULL) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&pfd, 1, INFO_WAIT_MS) != 1) {
            return -1;
        }
        n = read(fd, buf + used, cap - 1 - used);
        if (n <= 0) {
            return -1;
        }
        used += (size_t)n;
    }
    buf[used] = '\0';
    return (ssize_t)used;
}

/* The version `host`:`port` announces; OUTBOX_EUNAVAILABLE with the reason if it does not. */
static outbox_status
version_of(const char *host, const char *port, char *out, size_t cap, outbox_error *err)
{
    char info[INFO_CAP];
    json_t *doc;
    const char *version;
    int fd = connect_to(host, port);

    if (fd < 0) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "cannot reach nats at %s:%s", host, port);
    }
    if (read_info(fd, info, sizeof(info)) < 0 || strncmp(info, "INFO ", 5) != 0) {
        close(fd);
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "nats at %s:%s sent no INFO", host, port);
    }
    close(fd);
    doc = json_loads(info + 5, JSON_DISABLE_EOF_CHECK, NULL);
    version = json_string_value(json_object_get(doc, "version"));
    if (version == NULL) {
        json_decref(doc);
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "nats at %s:%s announced no version", host, port);
    }
    snprintf(out, cap, "%s", version);
    json_decref(doc);
    return OUTBOX_OK;
}

outbox_status
obx_ctl_nats_server_version(const char *nats_url, char *out, size_t cap, outbox_error *err)
{
    struct obx_url_list l;
    char host[256], port[16];
    outbox_status st = obx_url_list_parse("nats_url", nats_url, &l, err);

    if (st != OUTBOX_OK) {
        return st;
    }
    st = OUTBOX_EUNAVAILABLE;
    for (size_t i = 0; i < l.count && st != OUTBOX_OK; i++) {
        if (host_port(l.urls[i], host, sizeof(host), port, sizeof(port)) != 0) {
            st = obx_fail(err, OUTBOX_EINVAL, "nats_url: \"%s\" names no host", l.urls[i]);
            break;
        }
        st = version_of(host, port, out, cap, err);
    }
    obx_url_list_free(&l);
    return st;
}
