/* SPDX-License-Identifier: MIT */
/*
 * http_endpoint.h - a real HTTP server on loopback (libmicrohttpd, a
 * thread per connection) for the http: handler's tests: it records every
 * request (headers and body), counts the requests in flight at once, and
 * answers by a script the test sets.
 */
#ifndef OBX_TEST_HTTP_ENDPOINT_H
#define OBX_TEST_HTTP_ENDPOINT_H

#include <stddef.h>

struct http_endpoint;

/*
 * Starts one on `port` (0: a free one), https with `cert_file` and
 * `key_file` when both are given. NULL if it could not.
 */
struct http_endpoint *http_endpoint_start(int port, const char *cert_file, const char *key_file);
void http_endpoint_stop(struct http_endpoint *ep);
int http_endpoint_port(const struct http_endpoint *ep);

/*
 * The script: the first `first_n` requests get `first_status` (with
 * `retry_after` as Retry-After unless NULL) after holding `first_delay_ms`;
 * every later one gets `status` after `delay_ms`.
 */
void http_endpoint_script(struct http_endpoint *ep, int first_n, int first_status,
                          const char *retry_after, int first_delay_ms, int status, int delay_ms);

/* Requests answered so far, and the most that were in flight at once. */
size_t http_endpoint_count(struct http_endpoint *ep);
int http_endpoint_max_in_flight(struct http_endpoint *ep);

/* TCP connections the endpoint accepted so far. */
int http_endpoint_connections(struct http_endpoint *ep);

/* Request i's header `name` (case-insensitive) or NULL, and its body; malloc'd copies. */
char *http_endpoint_header(struct http_endpoint *ep, size_t i, const char *name);
char *http_endpoint_body(struct http_endpoint *ep, size_t i);

/* Request i's headers as received, "Name: value\n" each; malloc'd, or NULL. */
char *http_endpoint_headers(struct http_endpoint *ep, size_t i);

/* Monotonic milliseconds at which request i arrived. */
long long http_endpoint_arrived_ms(struct http_endpoint *ep, size_t i);

#endif
