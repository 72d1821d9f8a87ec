/* SPDX-License-Identifier: MIT */
/*
 * js_conn_nats.h - a NATS connection with its JetStream context, as the
 * test support's stream and consumer readers open one per check.
 */
#ifndef OBX_TEST_JS_CONN_NATS_H
#define OBX_TEST_JS_CONN_NATS_H

#include <stddef.h>

#include <nats/nats.h>

struct test_js_conn {
    natsConnection *nc;
    jsCtx *js;
};

/* Connects to `url` (a comma-separated list is tried in turn); -1 with the reason in `err`. */
int test_js_open(struct test_js_conn *c, const char *url, char *err, size_t cap);

/* Closes what test_js_open() opened; safe on a zeroed or closed one. */
void test_js_close(struct test_js_conn *c);

#endif
