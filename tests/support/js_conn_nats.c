/* SPDX-License-Identifier: MIT */
/*
 * js_conn_nats.c - one NATS connection and JetStream context for a check.
 */
#include "js_conn_nats.h"

#include <stdio.h>
#include <string.h>

void
test_js_close(struct test_js_conn *c)
{
    jsCtx_Destroy(c->js);
    natsConnection_Destroy(c->nc);
    memset(c, 0, sizeof(*c));
}

int
test_js_open(struct test_js_conn *c, const char *url, char *err, size_t cap)
{
    natsStatus s;

    memset(c, 0, sizeof(*c));
    s = natsConnection_ConnectTo(&c->nc, url);
    if (s == NATS_OK) {
        s = natsConnection_JetStream(&c->js, c->nc, NULL);
    }
    if (s != NATS_OK) {
        snprintf(err, cap, "connecting to %s: %s", url, natsStatus_GetText(s));
        test_js_close(c);
        return -1;
    }
    return 0;
}
