/* SPDX-License-Identifier: MIT */
/*
 * http_get.h - a plain HTTP/1.0 GET on loopback, for tests that read a
 * daemon's /metrics: no client library, nothing the daemon could share.
 */
#ifndef OBX_TEST_HTTP_GET_H
#define OBX_TEST_HTTP_GET_H

/*
 * GETs `path` from 127.0.0.1:`port`. Returns the HTTP status (0 when it
 * could not connect) and the body in `*body` (malloc'd, or NULL).
 */
int http_get(int port, const char *path, char **body);

/*
 * The value on the line of `body` that starts with `series` and a space
 * ("outbox_relay_published_total", "outbox_dead_letters{handler=\"x\"}"),
 * or -1 when there is none.
 */
double http_metric(const char *body, const char *series);

/*
 * Polls /metrics on `port` until `series` reads at least `want` (30 s at
 * most, else the test fails); returns that body (malloc'd: the caller frees).
 */
char *http_wait_metric(int port, const char *series, double want);

/* A loopback TCP port free right now, for a daemon's OUTBOX_HTTP_ADDR. */
int http_free_port(void);

#endif
