/* SPDX-License-Identifier: MIT */
/*
 * http.c - the daemon's small HTTP surface.
 *
 * /healthz answers 200 while the process serves at all; /readyz answers
 * 200 only while the database and the broker answer (503 otherwise), so
 * an orchestrator stops routing to, not restarting, a replica that waits
 * out an outage.
 */
#include "http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/text.h"

#include "common/banned.h" /* last: poisons unsafe functions */

struct obx_http {
    struct MHD_Daemon *daemon;
    struct obx_http_handlers handlers;
};

static enum MHD_Result
reply(struct MHD_Connection *conn, unsigned int code, const char *type, const char *body,
      size_t len)
{
    struct MHD_Response *res =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret;

    if (res == NULL) {
        return MHD_NO;
    }
    MHD_add_response_header(res, "Content-Type", type);
    ret = MHD_queue_response(conn, code, res);
    MHD_destroy_response(res);
    return ret;
}

static enum MHD_Result
handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
       const char *version, const char *upload, size_t *upload_size, void **state)
{
    struct obx_http *http = cls;
    struct obx_buf body;
    enum MHD_Result ret;

    (void)version;
    (void)upload;
    (void)upload_size;
    (void)state;
    if (strcmp(method, "GET") != 0) {
        return reply(conn, 405, "text/plain", "method not allowed\n", 19);
    }
    if (strcmp(url, "/healthz") == 0) {
        return reply(conn, 200, "text/plain", "ok\n", 3);
    }
    if (strcmp(url, "/readyz") == 0) {
        return http->handlers.ready(http->handlers.ctx)
                   ? reply(conn, 200, "text/plain", "ready\n", 6)
                   : reply(conn, 503, "text/plain", "not ready\n", 10);
    }
    if (strcmp(url, "/metrics") != 0) {
        return reply(conn, 404, "text/plain", "not found\n", 10);
    }
    obx_buf_init(&body);
    http->handlers.metrics(http->handlers.ctx, &body);
    ret = obx_buf_failed(&body) || body.data == NULL
              ? reply(conn, 500, "text/plain", "out of memory\n", 14)
              : reply(conn, 200, "text/plain; version=0.0.4", body.data, body.len);
    obx_buf_fini(&body);
    return ret;
}

/* "host:port" or ":port" (all interfaces) into an IPv4 address. */
static int
parse_addr(const char *addr, struct sockaddr_in *out)
{
    const char *colon = strrchr(addr, ':');
    char host[64];
    char *end = NULL;
    long port;

    if (colon == NULL || (size_t)(colon - addr) >= sizeof(host)) {
        return -1;
    }
    port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || port < 0 || port > 65535) {
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    memset(out, 0, sizeof(*out));
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)port);
    if (host[0] == '\0') {
        out->sin_addr.s_addr = htonl(INADDR_ANY);
        return 0;
    }
    if (strcmp(host, "localhost") == 0) {
        snprintf(host, sizeof(host), "127.0.0.1");
    }
    return inet_pton(AF_INET, host, &out->sin_addr) == 1 ? 0 : -1;
}

struct obx_http *
obx_http_start(const char *addr, const struct obx_http_handlers *handlers, char *msg,
               size_t msg_cap)
{
    struct sockaddr_in sin;
    struct obx_http *http;
    char shown[200];

    /* Quoted and escaped: a line break in the value cannot forge a line. */
    obx_quote_for_message(addr, shown, sizeof(shown));
    if (parse_addr(addr, &sin) != 0) {
        snprintf(msg, msg_cap, "OUTBOX_HTTP_ADDR=%s must be host:port (IPv4)", shown);
        return NULL;
    }
    http = calloc(1, sizeof(*http));
    if (http == NULL) {
        snprintf(msg, msg_cap, "out of memory");
        return NULL;
    }
    http->handlers = *handlers;
    http->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, ntohs(sin.sin_port), NULL,
                                    NULL, handle, http, MHD_OPTION_SOCK_ADDR, &sin, MHD_OPTION_END);
    if (http->daemon == NULL) {
        snprintf(msg, msg_cap, "cannot listen on OUTBOX_HTTP_ADDR=%s", shown);
        free(http);
        return NULL;
    }
    return http;
}

void
obx_http_stop(struct obx_http *http)
{
    if (http == NULL) {
        return;
    }
    MHD_stop_daemon(http->daemon);
    free(http);
}
