/* SPDX-License-Identifier: MIT */
/*
 * http_endpoint.c - a recording HTTP endpoint on loopback (see
 * http_endpoint.h).
 */
#include "http_endpoint.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "devserver/devserver_probe.h"

enum { MAX_REQUESTS = 4096 };

struct seen {
    char *headers; /* "name: value\n" each */
    char *body;
    long long arrived_ms;
};

struct http_endpoint {
    struct MHD_Daemon *daemon;
    int port;
    pthread_mutex_t lock;
    int first_n, first_status, first_delay_ms, status, delay_ms;
    char retry_after[64];
    int started; /* requests begun, for the script */
    int in_flight, max_in_flight;
    int connections; /* TCP connections accepted, ever */
    struct seen seen[MAX_REQUESTS];
    size_t count;
    char *cert, *key;
};

/* One request being received. */
struct pending {
    struct obx_buf headers, body;
    long long arrived_ms;
};

static enum MHD_Result
keep_header(void *arg, enum MHD_ValueKind kind, const char *key, const char *value)
{
    struct pending *p = arg;

    (void)kind;
    obx_buf_appendf(&p->headers, "%s: %s\n", key, value ? value : "");
    return MHD_YES;
}

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text = NULL;
    long len;

    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = calloc(1, (size_t)len + 1);
    if (text != NULL && fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        text = NULL;
    }
    fclose(f);
    return text;
}

static enum MHD_Result
answer(void *cls, struct MHD_Connection *c, const char *url, const char *method,
       const char *version, const char *upload, size_t *upload_size, void **state)
{
    struct http_endpoint *ep = cls;
    struct pending *p = *state;
    struct MHD_Response *res;
    int status, delay_ms, nth;
    char retry_after[64] = "";
    enum MHD_Result rc;

    (void)url;
    (void)method;
    (void)version;
    if (p == NULL) { /* headers in: the request is in flight from now */
        p = calloc(1, sizeof(*p));
        obx_buf_init(&p->headers);
        obx_buf_init(&p->body);
        p->arrived_ms = obx_monotonic_ms();
        MHD_get_connection_values(c, MHD_HEADER_KIND, keep_header, p);
        *state = p;
        pthread_mutex_lock(&ep->lock);
        ep->in_flight++;
        ep->max_in_flight = ep->in_flight > ep->max_in_flight ? ep->in_flight : ep->max_in_flight;
        pthread_mutex_unlock(&ep->lock);
        return MHD_YES;
    }
    if (*upload_size > 0) {
        obx_buf_append(&p->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&ep->lock);
    nth = ep->started++;
    status = nth < ep->first_n ? ep->first_status : ep->status;
    delay_ms = nth < ep->first_n ? ep->first_delay_ms : ep->delay_ms;
    if (nth < ep->first_n) {
        snprintf(retry_after, sizeof(retry_after), "%s", ep->retry_after);
    }
    pthread_mutex_unlock(&ep->lock);
    if (delay_ms > 0) {
        usleep((useconds_t)delay_ms * 1000);
    }
    pthread_mutex_lock(&ep->lock);
    if (ep->count < MAX_REQUESTS) {
        ep->seen[ep->count].headers = obx_buf_take(&p->headers);
        ep->seen[ep->count].body = obx_buf_take(&p->body);
        ep->seen[ep->count].arrived_ms = p->arrived_ms;
        ep->count++;
    }
    ep->in_flight--;
    pthread_mutex_unlock(&ep->lock);
    res = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (retry_after[0] != '\0') {
        MHD_add_response_header(res, "Retry-After", retry_after);
    }
    rc = MHD_queue_response(c, (unsigned int)status, res);
    MHD_destroy_response(res);
    return rc;
}

static void
done(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why)
{
    struct pending *p = *state;

    (void)cls;
    (void)c;
    (void)why;
    if (p != NULL) {
        obx_buf_fini(&p->headers);
        obx_buf_fini(&p->body);
        free(p);
        *state = NULL;
    }
}

static void
connected(void *cls, struct MHD_Connection *c, void **socket_context,
          enum MHD_ConnectionNotificationCode code)
{
    struct http_endpoint *ep = cls;

    (void)c;
    (void)socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        pthread_mutex_lock(&ep->lock);
        ep->connections++;
        pthread_mutex_unlock(&ep->lock);
    }
}

struct http_endpoint *
http_endpoint_start(int port, const char *cert_file, const char *key_file)
{
    struct http_endpoint *ep = calloc(1, sizeof(*ep));
    unsigned int flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;

    if (ep == NULL) {
        return NULL;
    }
    pthread_mutex_init(&ep->lock, NULL);
    ep->status = 204;
    if (cert_file != NULL && key_file != NULL) {
        ep->cert = slurp(cert_file);
        ep->key = slurp(key_file);
        flags |= MHD_USE_TLS;
    }
    for (int tries = 0; tries < (port > 0 ? 1 : 20) && ep->daemon == NULL; tries++) {
        ep->port = port > 0 ? port : obx_dev_free_port();
        if (flags & MHD_USE_TLS) {
            ep->daemon = MHD_start_daemon(
                flags, (uint16_t)ep->port, NULL, NULL, answer, ep, MHD_OPTION_HTTPS_MEM_CERT,
                ep->cert, MHD_OPTION_HTTPS_MEM_KEY, ep->key, MHD_OPTION_NOTIFY_COMPLETED, done, ep,
                MHD_OPTION_NOTIFY_CONNECTION, connected, ep, MHD_OPTION_END);
        } else {
            ep->daemon = MHD_start_daemon(
                flags, (uint16_t)ep->port, NULL, NULL, answer, ep, MHD_OPTION_NOTIFY_COMPLETED,
                done, ep, MHD_OPTION_NOTIFY_CONNECTION, connected, ep, MHD_OPTION_END);
        }
    }
    if (ep->daemon == NULL) {
        http_endpoint_stop(ep);
        return NULL;
    }
    return ep;
}

void
http_endpoint_stop(struct http_endpoint *ep)
{
    if (ep == NULL) {
        return;
    }
    if (ep->daemon != NULL) {
        MHD_stop_daemon(ep->daemon);
    }
    for (size_t i = 0; i < ep->count; i++) {
        free(ep->seen[i].headers);
        free(ep->seen[i].body);
    }
    pthread_mutex_destroy(&ep->lock);
    free(ep->cert);
    free(ep->key);
    free(ep);
}

int
http_endpoint_port(const struct http_endpoint *ep)
{
    return ep->port;
}

void
http_endpoint_script(struct http_endpoint *ep, int first_n, int first_status,
                     const char *retry_after, int first_delay_ms, int status, int delay_ms)
{
    pthread_mutex_lock(&ep->lock);
    ep->first_n = first_n;
    ep->first_status = first_status;
    snprintf(ep->retry_after, sizeof(ep->retry_after), "%s", retry_after ? retry_after : "");
    ep->first_delay_ms = first_delay_ms;
    ep->status = status;
    ep->delay_ms = delay_ms;
    ep->started = 0;
    pthread_mutex_unlock(&ep->lock);
}

size_t
http_endpoint_count(struct http_endpoint *ep)
{
    size_t n;

    pthread_mutex_lock(&ep->lock);
    n = ep->count;
    pthread_mutex_unlock(&ep->lock);
    return n;
}

/* One of the endpoint's counters, read under its lock. */
static int
counter(struct http_endpoint *ep, const int *field)
{
    int n;

    pthread_mutex_lock(&ep->lock);
    n = *field;
    pthread_mutex_unlock(&ep->lock);
    return n;
}

int
http_endpoint_max_in_flight(struct http_endpoint *ep)
{
    return counter(ep, &ep->max_in_flight);
}

int
http_endpoint_connections(struct http_endpoint *ep)
{
    return counter(ep, &ep->connections);
}

char *
http_endpoint_header(struct http_endpoint *ep, size_t i, const char *name)
{
    char *found = NULL;
    size_t len = strlen(name);

    pthread_mutex_lock(&ep->lock);
    for (const char *line = i < ep->count ? ep->seen[i].headers : NULL; line && *line;) {
        const char *end = strchr(line, '\n');

        if (strncasecmp(line, name, len) == 0 && line[len] == ':' && line[len + 1] == ' ') {
            found = strndup(line + len + 2, (size_t)(end - line - (long)len - 2));
            break;
        }
        line = end ? end + 1 : NULL;
    }
    pthread_mutex_unlock(&ep->lock);
    return found;
}

char *
http_endpoint_body(struct http_endpoint *ep, size_t i)
{
    char *body;

    pthread_mutex_lock(&ep->lock);
    body = i < ep->count && ep->seen[i].body ? strdup(ep->seen[i].body) : NULL;
    pthread_mutex_unlock(&ep->lock);
    return body;
}

long long
http_endpoint_arrived_ms(struct http_endpoint *ep, size_t i)
{
    long long at;

    pthread_mutex_lock(&ep->lock);
    at = i < ep->count ? ep->seen[i].arrived_ms : -1;
    pthread_mutex_unlock(&ep->lock);
    return at;
}

char *
http_endpoint_headers(struct http_endpoint *ep, size_t i)
{
    char *headers;

    pthread_mutex_lock(&ep->lock);
    headers = i < ep->count && ep->seen[i].headers ? strdup(ep->seen[i].headers) : NULL;
    pthread_mutex_unlock(&ep->lock);
    return headers;
}
