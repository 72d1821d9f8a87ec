/* SPDX-License-Identifier: MIT */
/*
 * http_handler.h - the http: handlers outboxd hosts from declarations
 * (outboxd/handler_spec.h): each event POSTed to a URL as a CloudEvent,
 * many requests in flight through libcurl's multi interface
 * (http_handler.c). The status-code contract is in docs/consumers.md.
 */
#ifndef OBX_HTTP_HANDLER_H
#define OBX_HTTP_HANDLER_H

#include <stddef.h>

#include "common/buf.h"
#include "consume/handler.h"
#include "envelope/envelope.h"
#include "outbox/outbox.h"

/*
 * Requests at once when the declaration does not say (in_flight=N). The
 * consumer writes the ledger in rounds (the done marks of the requests
 * that ended, the claims of those that start: one commit), and a round
 * costs about the same for 8 events as for 64, so more in flight is more
 * events per round (docs/consumers.md, "The ledger in rounds").
 */
enum { OBX_HTTP_DEFAULT_IN_FLIGHT = 64 };

/* What an http handler POSTs to and how; all borrowed for the call to obx_http_handler_new. */
struct obx_http_handler_config {
    const char *name;           /* the handler's, for the log */
    const char *url;            /* http:// or https:// */
    int timeout_ms;             /* a whole request; past it the run fails (an attempt) */
    const char *token_file;     /* first line: the bearer token; NULL: no Authorization */
    const char *ca_file;        /* https: the CA bundle; NULL: the system's */
    const char *const *headers; /* "Name: value" each, sent with every request */
    size_t header_count;
    int structured;        /* CloudEvents structured mode; else binary */
    const char *ce_source; /* the CloudEvents source (OUTBOX_CE_SOURCE) */
    int backoff_base_ms;   /* an outage's pause: the consumer's backoff */
    int backoff_cap_ms;
    int in_flight; /* requests at once, so connections kept open; 0: the default */
};

struct obx_http_handler;

/*
 * Reads the token file (its content is never shown) and prepares the
 * requests. OUTBOX_EINVAL names what is wrong.
 */
outbox_status obx_http_handler_new(const struct obx_http_handler_config *cfg,
                                   struct obx_http_handler **out, outbox_error *err);

/* Ends every request still in flight. NULL is fine. */
void obx_http_handler_free(struct obx_http_handler *h);

/*
 * The headers and body this handler POSTs for the event `envelope` (`len`
 * bytes) whose head is `head`: appended to `*headers` and `body`. Returns 0,
 * or -1 when out of memory. outbox-bench's raw POSTs send the same
 * requests with no pgoutbox.
 */
struct curl_slist;
int obx_http_handler_request(const struct obx_http_handler *h, const struct obx_envelope_head *head,
                             const char *envelope, size_t len, struct curl_slist **headers,
                             struct obx_buf *body);

/* The http kind, for obx_consumer_add_external: ctx is a struct obx_http_handler. */
extern const struct obx_handler_ops obx_http_kind;

#endif
