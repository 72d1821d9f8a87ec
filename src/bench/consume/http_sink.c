/* SPDX-License-Identifier: MIT */
/*
 * http_sink.c - the http case's endpoint: a local HTTP server
 * (libmicrohttpd, a small thread pool) that reads every POST's body and
 * answers 204, for the http: handler and the raw_http_post baseline
 * alike. Its workers poll() their connections: with epoll, one run in six
 * to ten hung for good, 128 connections accepted with their requests
 * unread in the kernel and both workers asleep (libmicrohttpd 0.9.75).
 */
#include <stdlib.h>

#include <microhttpd.h>

#include "bench/bench.h"
#include "devserver/devserver_probe.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static int first_call;

static enum MHD_Result
answer(void *cls, struct MHD_Connection *c, const char *url, const char *method,
       const char *version, const char *upload, size_t *upload_size, void **state)
{
    struct MHD_Response *res;
    enum MHD_Result rc;

    (void)cls;
    (void)url;
    (void)method;
    (void)version;
    (void)upload;
    if (*state == NULL) { /* the headers: the body comes next */
        *state = &first_call;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        *upload_size = 0;
        return MHD_YES;
    }
    res = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    rc = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, res);
    MHD_destroy_response(res);
    return rc;
}

struct obx_bench_sink *
obx_bench_sink_start(int *port)
{
    struct MHD_Daemon *d = NULL;

    for (int tries = 0; tries < 20 && d == NULL; tries++) {
        *port = obx_dev_free_port();
        d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, (uint16_t)*port, NULL,
                             NULL, answer, NULL, MHD_OPTION_THREAD_POOL_SIZE, 2u,
                             MHD_OPTION_CONNECTION_LIMIT, 1000u, MHD_OPTION_END);
    }
    return (struct obx_bench_sink *)d;
}

void
obx_bench_sink_stop(struct obx_bench_sink *s)
{
    if (s != NULL) {
        MHD_stop_daemon((struct MHD_Daemon *)s);
    }
}
