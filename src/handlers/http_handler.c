/* SPDX-License-Identifier: MIT */
/*
 * http_handler.c - a declared `http:` handler: each event POSTed to a URL
 * as a CloudEvent, in the HTTP binding's binary mode (the attributes as
 * ce-* headers, the envelope as the body) or its structured mode, with
 * Idempotency-Key: <event id>. Up to the handler's in-flight limit of
 * requests go at once through one libcurl multi handle; the consumer
 * claims each event before its request starts and marks it done after
 * a 2xx: at least once for the endpoint, never twice at the same time.
 *
 * The status-code contract (docs/consumers.md):
 *   2xx                          done
 *   429 or 503                   retry after Retry-After (else the usual
 *                                backoff), no attempt spent
 *   410                          dead-lettered at once
 *   other statuses, a timeout    failed: an attempt spent
 *   no connection (refused, DNS, TLS)
 *                                an outage: no attempt spent, and the
 *                                handler starts nothing more for a backoff
 *                                that grows while the outage lasts
 */
#include "http_handler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/error.h"
#include "config/config_files.h"
#include "consume/delivery.h"
#include "envelope/cloudevents.h"
#include "support/backoff.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum {
    TOKEN_MAX = 4096,
    REASON_BODY_KEEP = 200,           /* of an error answer's body, for the reason */
    RETRY_AFTER_MAX_MS = 3600 * 1000, /* a Retry-After beyond an hour is read as an hour */
};

/* One request in flight. */
struct request {
    unsigned long tag;
    CURL *easy;
    struct curl_slist *headers;
    struct obx_buf body;
    char answer[REASON_BODY_KEEP + 1]; /* the start of the answer's body */
    size_t answer_len;
    long long retry_after_ms; /* -1: none */
    char curl_error[CURL_ERROR_SIZE];
    struct request *next;
};

struct obx_http_handler {
    char name[65];
    char *url;
    char *ca_file;
    int timeout_ms;
    int structured;
    char *ce_source;
    int backoff_base_ms, backoff_cap_ms;
    struct curl_slist *fixed; /* the extra headers and Authorization, for every request */
    CURLM *multi;
    /*
     * Easy handles whose request ended, for the next ones: a new handle
     * costs an allocation and libcurl's defaults each time (about 6 % of
     * the consumer's thread at 64 in flight), and the options that do not
     * change between requests stay set on a kept one.
     */
    CURL **idle;
    size_t idle_count, idle_cap;
    struct request *going;     /* in flight */
    struct obx_run_end *ended; /* ends not reported yet: stopped, or not started */
    size_t ended_count, ended_cap;
    int outages;               /* in a row: the pause grows with them */
    long long paused_until_ms; /* monotonic; no request starts before */
    unsigned int jitter;
};

/* ---- setting up ------------------------------------------------------------------------ */

static outbox_status
fixed_headers(struct obx_http_handler *h, const struct obx_http_handler_config *cfg,
              outbox_error *err)
{
    char token[TOKEN_MAX], *auth;
    size_t auth_len;
    struct curl_slist *l;

    /* libcurl would send "Expect: 100-continue" for a large body: one round trip more. */
    h->fixed = curl_slist_append(NULL, "Expect:");
    for (size_t i = 0; h->fixed != NULL && i < cfg->header_count; i++) {
        l = curl_slist_append(h->fixed, cfg->headers[i]);
        h->fixed = l != NULL ? l : (curl_slist_free_all(h->fixed), NULL);
    }
    if (h->fixed == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    if (cfg->token_file == NULL) {
        return OUTBOX_OK;
    }
    if (obx_secret_file_read("token_file", cfg->token_file, token, sizeof(token), err) !=
        OUTBOX_OK) {
        return obx_fail(err, OUTBOX_EINVAL, "handler %s: %s", cfg->name, err->message);
    }
    auth_len = strlen(token) + sizeof("Authorization: Bearer ");
    auth = malloc(auth_len);
    if (auth == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    snprintf(auth, auth_len, "Authorization: Bearer %s", token);
    l = curl_slist_append(h->fixed, auth);
    explicit_bzero(auth, auth_len);
    explicit_bzero(token, sizeof(token));
    free(auth);
    if (l == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    h->fixed = l;
    return OUTBOX_OK;
}

outbox_status
obx_http_handler_new(const struct obx_http_handler_config *cfg, struct obx_http_handler **out,
                     outbox_error *err)
{
    struct obx_http_handler *h = calloc(1, sizeof(*h));
    outbox_status st = OUTBOX_OK;

    obx_error_reset(err);
    *out = NULL;
    if (h == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    /* Once, before any other thread uses libcurl: outboxd registers its handlers first. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        free(h);
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "handler %s: libcurl did not start", cfg->name);
    }
    snprintf(h->name, sizeof(h->name), "%s", cfg->name);
    h->url = strdup(cfg->url);
    h->ca_file = cfg->ca_file ? strdup(cfg->ca_file) : NULL;
    h->ce_source = strdup(cfg->ce_source ? cfg->ce_source : "pgoutbox");
    h->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
    h->structured = cfg->structured;
    h->backoff_base_ms = cfg->backoff_base_ms;
    h->backoff_cap_ms = cfg->backoff_cap_ms;
    h->jitter = (unsigned int)obx_monotonic_ms() ^ (unsigned int)(uintptr_t)h;
    h->multi = curl_multi_init();
    if (h->multi != NULL) {
        /*
         * One open connection per request in flight, kept between batches.
         * libcurl's default keeps four per request still going, so as a
         * batch's last requests ended it closed the others, and the next
         * batch connected again (over https: a handshake each).
         */
        curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS,
                          (long)(cfg->in_flight > 0 ? cfg->in_flight : OBX_HTTP_DEFAULT_IN_FLIGHT));
    }
    if (h->url == NULL || h->ce_source == NULL || (cfg->ca_file && h->ca_file == NULL) ||
        h->multi == NULL) {
        st = obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    if (st == OUTBOX_OK) {
        st = fixed_headers(h, cfg, err);
    }
    if (st != OUTBOX_OK) {
        obx_http_handler_free(h);
        return st;
    }
    *out = h;
    return OUTBOX_OK;
}

/* Keeps an ended request's handle for the next request; false if it cannot. */
static int
keep_idle(struct obx_http_handler *h, CURL *e)
{
    if (h->idle_count == h->idle_cap) {
        size_t cap = h->idle_cap ? h->idle_cap * 2 : 16;
        CURL **more = realloc(h->idle, cap * sizeof(*more));

        if (more == NULL) {
            return 0;
        }
        h->idle = more;
        h->idle_cap = cap;
    }
    h->idle[h->idle_count++] = e;
    return 1;
}

/* `reuse`: the request ended (not stopped halfway), so its handle may serve the next one. */
static void
request_free(struct obx_http_handler *h, struct request *r, int reuse)
{
    if (r->easy != NULL) {
        curl_multi_remove_handle(h->multi, r->easy);
        if (!reuse || !keep_idle(h, r->easy)) {
            curl_easy_cleanup(r->easy);
        }
    }
    curl_slist_free_all(r->headers);
    obx_buf_fini(&r->body);
    free(r);
}

void
obx_http_handler_free(struct obx_http_handler *h)
{
    if (h == NULL) {
        return;
    }
    while (h->going != NULL) {
        struct request *r = h->going;

        h->going = r->next;
        request_free(h, r, 0);
    }
    while (h->idle_count > 0) {
        curl_easy_cleanup(h->idle[--h->idle_count]);
    }
    free(h->idle);
    if (h->multi != NULL) {
        curl_multi_cleanup(h->multi);
    }
    curl_slist_free_all(h->fixed);
    free(h->ended);
    free(h->url);
    free(h->ca_file);
    free(h->ce_source);
    free(h);
    curl_global_cleanup();
}

/* ---- one request ----------------------------------------------------------------------- */

/* Keeps an end to report at the next wait (a run stopped, or one that could not start). */
static void
keep_end(struct obx_http_handler *h, const struct obx_run_end *e)
{
    if (h->ended_count == h->ended_cap) {
        size_t cap = h->ended_cap ? h->ended_cap * 2 : 16;
        struct obx_run_end *more = realloc(h->ended, cap * sizeof(*more));

        if (more == NULL) {
            return; /* the loop waits for it until its claim's renewal gives up */
        }
        h->ended = more;
        h->ended_cap = cap;
    }
    h->ended[h->ended_count++] = *e;
}

/* Retry-After: delay-seconds or an HTTP-date (RFC 9110); -1 if neither. */
static long long
retry_after_ms(const char *value)
{
    char *end;
    long long seconds = strtoll(value, &end, 10);
    time_t at;

    if (end != value && (*end == '\0' || *end == '\r' || *end == '\n' || *end == ' ') &&
        seconds >= 0) {
        return seconds * 1000 < RETRY_AFTER_MAX_MS ? seconds * 1000 : RETRY_AFTER_MAX_MS;
    }
    at = curl_getdate(value, NULL);
    if (at < 0) {
        return -1;
    }
    seconds = (long long)(at - time(NULL));
    return seconds <= 0                          ? 0
           : seconds * 1000 < RETRY_AFTER_MAX_MS ? seconds * 1000
                                                 : RETRY_AFTER_MAX_MS;
}

static size_t
on_header(char *data, size_t size, size_t n, void *arg)
{
    struct request *r = arg;
    size_t len = size * n;
    char value[128];

    if (len > 12 && len - 12 < sizeof(value) && strncasecmp(data, "Retry-After:", 12) == 0) {
        memcpy(value, data + 12, len - 12);
        value[len - 12] = '\0';
        r->retry_after_ms = retry_after_ms(value + strspn(value, " \t"));
    }
    return len;
}

/* The start of the answer's body, for a failure's reason; the rest is dropped. */
static size_t
on_body(char *data, size_t size, size_t n, void *arg)
{
    struct request *r = arg;
    size_t len = size * n, keep = REASON_BODY_KEEP - r->answer_len;

    keep = len < keep ? len : keep;
    memcpy(r->answer + r->answer_len, data, keep);
    r->answer_len += keep;
    r->answer[r->answer_len] = '\0';
    return len;
}

static int
add_header(struct curl_slist **headers, const char *key, const char *value)
{
    char line[1024];
    struct curl_slist *l;

    snprintf(line, sizeof(line), "%s: %s", key, value);
    l = curl_slist_append(*headers, line);
    if (l == NULL) {
        return -1;
    }
    *headers = l;
    return 0;
}

int
obx_http_handler_request(const struct obx_http_handler *h, const struct obx_envelope_head *head,
                         const char *envelope, size_t len, struct curl_slist **headers,
                         struct obx_buf *body)
{
    struct obx_ce_attrs a;
    struct obx_ce_text text;
    struct obx_ce_header ce[OBX_CE_MAX_HEADERS];
    size_t n;
    int rc = 0;

    obx_ce_attrs_of(head, h->ce_source, &a, &text);
    for (struct curl_slist *f = h->fixed; f != NULL && rc == 0; f = f->next) {
        struct curl_slist *l = curl_slist_append(*headers, f->data);

        rc = l != NULL ? 0 : -1;
        *headers = l != NULL ? l : *headers;
    }
    rc = rc == 0 ? add_header(headers, "Idempotency-Key", a.id) : rc;
    if (h->structured) {
        rc = rc == 0 ? add_header(headers, "Content-Type", OBX_CE_STRUCTURED_CONTENT_TYPE) : rc;
        if (rc == 0 && a.traceparent != NULL) {
            rc = add_header(headers, "traceparent", a.traceparent); /* for the tracing middleware */
        }
        obx_ce_structured(&a, envelope, len, body);
    } else {
        n = obx_ce_binary_headers(&a, ce);
        for (size_t i = 0; i < n && rc == 0; i++) {
            rc = add_header(headers, ce[i].key, ce[i].value);
        }
        obx_buf_append(body, envelope, len);
    }
    return rc == 0 && !obx_buf_failed(body) ? 0 : -1;
}

/* The request's headers and body: the CloudEvent of `d`, binary or structured. */
static int
build(const struct obx_http_handler *h, struct request *r, const outbox_delivery *d)
{
    size_t len = 0;
    const char *envelope = outbox_delivery_envelope(d, &len);

    return obx_http_handler_request(h, d->head, envelope, len, &r->headers, &r->body);
}

/* What every request of the handler sends the same way: set once on each handle. */
static CURL *
easy_new(const struct obx_http_handler *h)
{
    CURL *e = curl_easy_init();

    if (e == NULL) {
        return NULL;
    }
    curl_easy_setopt(e, CURLOPT_URL, h->url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)h->timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    if (h->ca_file != NULL) {
        curl_easy_setopt(e, CURLOPT_CAINFO, h->ca_file);
    }
    return e;
}

/* A kept handle or a new one, pointed at this request's body, headers and buffers. */
static CURL *
easy_for(struct obx_http_handler *h, struct request *r)
{
    CURL *e = h->idle_count > 0 ? h->idle[--h->idle_count] : easy_new(h);

    if (e == NULL) {
        return NULL;
    }
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body.data);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body.len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->curl_error);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    return e;
}

static void
kind_start(void *ctx, unsigned long tag, const outbox_delivery *d)
{
    struct obx_http_handler *h = ctx;
    struct request *r = calloc(1, sizeof(*r));

    if (r != NULL) {
        r->tag = tag;
        r->retry_after_ms = -1;
        obx_buf_init(&r->body);
    }
    if (r == NULL || build(h, r, d) != 0 || (r->easy = easy_for(h, r)) == NULL ||
        curl_multi_add_handle(h->multi, r->easy) != CURLM_OK) {
        struct obx_run_end e = {.tag = tag, .result = OUTBOX_HANDLER_RETRY};

        obx_fail(&e.err, OUTBOX_ENOMEM, "http handler: out of memory");
        keep_end(h, &e);
        if (r != NULL) {
            request_free(h, r, 0);
        }
        return;
    }
    r->next = h->going;
    h->going = r;
}

/* ---- how a request ended --------------------------------------------------------------- */

/* Nothing reached the endpoint's HTTP server: refused, no such host, or TLS refused. */
static int
unreachable(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
        return 1;
    default:
        return 0;
    }
}

/* An outage: the handler pauses, longer each time in a row. */
static void
outage(struct obx_http_handler *h, struct obx_run_end *e, const char *why)
{
    long long now = obx_monotonic_ms();
    int pause;

    if (now >= h->paused_until_ms) { /* the runs of one outage count it once */
        h->outages += h->outages < 30;
        pause = obx_backoff_delay_ms(h->outages, h->backoff_base_ms, h->backoff_cap_ms,
                                     (double)rand_r(&h->jitter) / ((double)RAND_MAX + 1.0));
        h->paused_until_ms = now + (pause > 0 ? pause : 1);
        obx_log(OUTBOX_LOG_WARN,
                "http handler cannot reach its endpoint, pausing (no attempt spent) handler=%s "
                "pause_ms=%d error=\"%s\"",
                h->name, pause, why);
    }
    e->result = OUTBOX_HANDLER_RETRY;
    e->retry_ms = h->paused_until_ms - now > 0 ? h->paused_until_ms - now : 1;
    obx_fail(&e->err, OUTBOX_EUNAVAILABLE, "http handler: endpoint unreachable: %s", why);
}

static void
classify(struct obx_http_handler *h, struct request *r, CURLcode rc, struct obx_run_end *e)
{
    long status = 0;

    e->tag = r->tag;
    if (rc != CURLE_OK && unreachable(rc)) {
        outage(h, e, r->curl_error[0] ? r->curl_error : curl_easy_strerror(rc));
        return;
    }
    if (rc == CURLE_OPERATION_TIMEDOUT) {
        e->result = OUTBOX_HANDLER_FAIL;
        obx_fail(&e->err, OUTBOX_EREJECTED, "http handler: no answer within %d ms", h->timeout_ms);
        return;
    }
    if (rc != CURLE_OK) {
        e->result = OUTBOX_HANDLER_FAIL;
        obx_fail(&e->err, OUTBOX_EREJECTED, "http handler: %s",
                 r->curl_error[0] ? r->curl_error : curl_easy_strerror(rc));
        return;
    }
    h->outages = 0; /* it answered */
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) {
        e->result = OUTBOX_HANDLER_DONE;
    } else if (status == 429 || status == 503) {
        /* Busy, not this event's fault: no attempt spent. */
        e->result = OUTBOX_HANDLER_RETRY;
        e->retry_ms = r->retry_after_ms > 0 ? r->retry_after_ms : 0;
        obx_fail(&e->err, OUTBOX_ECONFLICT, "http handler: endpoint answered %ld", status);
    } else {
        e->result = OUTBOX_HANDLER_FAIL;
        e->dead_now = status == 410; /* Gone: it never will take this event */
        obx_fail(&e->err, OUTBOX_EREJECTED, "http handler: endpoint answered %ld%s%s", status,
                 r->answer_len > 0 ? ": " : "", r->answer);
    }
}

static size_t
kind_wait(void *ctx, int timeout_ms, struct obx_run_end *ends, size_t max)
{
    struct obx_http_handler *h = ctx;
    size_t n = 0;
    int running = 0, left = 0;
    CURLMsg *m;

    while (h->ended_count > 0 && n < max) {
        ends[n++] = h->ended[--h->ended_count];
    }
    if (n > 0 || h->going == NULL) {
        return n;
    }
    curl_multi_perform(h->multi, &running);
    if ((m = curl_multi_info_read(h->multi, &left)) == NULL) {
        curl_multi_poll(h->multi, NULL, 0, timeout_ms, NULL);
        curl_multi_perform(h->multi, &running);
        m = curl_multi_info_read(h->multi, &left);
    }
    for (; m != NULL && n < max; m = n < max ? curl_multi_info_read(h->multi, &left) : NULL) {
        struct request *r = NULL, **p;

        if (m->msg != CURLMSG_DONE) {
            continue;
        }
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        ends[n] = (struct obx_run_end){0};
        classify(h, r, m->data.result, &ends[n++]);
        for (p = &h->going; *p != NULL && *p != r; p = &(*p)->next) {
        }
        if (*p == r) {
            *p = r->next;
        }
        request_free(h, r, 1);
    }
    return n;
}

static void
kind_stop(void *ctx, unsigned long tag)
{
    struct obx_http_handler *h = ctx;

    for (struct request **p = &h->going; *p != NULL; p = &(*p)->next) {
        struct request *r = *p;

        if (r->tag == tag) {
            struct obx_run_end e = {.tag = tag, .result = OUTBOX_HANDLER_RETRY};

            *p = r->next;
            request_free(h, r, 0);
            obx_fail(&e.err, OUTBOX_ECONFLICT, "http handler stopped: its claim was lost");
            keep_end(h, &e);
            return;
        }
    }
}

static long long
kind_paused_ms(void *ctx)
{
    struct obx_http_handler *h = ctx;
    long long left = h->paused_until_ms - obx_monotonic_ms();

    return left > 0 ? left : 0;
}

const struct obx_handler_ops obx_http_kind = {.kind = "http",
                                              .start = kind_start,
                                              .wait = kind_wait,
                                              .stop = kind_stop,
                                              .paused_ms = kind_paused_ms};
