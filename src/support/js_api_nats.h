/* SPDX-License-Identifier: MIT */
/*
 * js_api_nats.h - raw JetStream API requests, shared by the stream setup
 * (stream_nats.c) and the consumer setup (feed_consumer_nats.c).
 *
 * Both read a config as JSON and send the server's own object back with
 * one field changed, so fields this nats.c does not know survive updates.
 */
#ifndef OBX_JS_API_NATS_H
#define OBX_JS_API_NATS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <nats/nats.h>

#include "outbox/outbox.h"

#define OBX_JS_API_TIMEOUT_MS 5000
/*
 * For INFO requests: a server answers them in milliseconds, even loaded,
 * but one sent while a cluster elects the stream's (or consumer's) leader
 * is never answered, so its timeout is how late a worker notices the new
 * leader (the election itself takes 4-10 s, FACTS 18).
 */
#define OBX_JS_API_INFO_TIMEOUT_MS 1500
#define OBX_NANOS_PER_SECOND       INT64_C(1000000000)

/*
 * Sends `body` to `subject` ("$JS.API.…"), waiting up to `timeout_ms`
 * (OBX_JS_API_TIMEOUT_MS, or the INFO one), and parses the answer into
 * *reply (a JSON object, owned by the caller). Transport failures, no
 * responders (JetStream down or not enabled) and a non-JSON answer are
 * OUTBOX_EUNAVAILABLE; `doing` names the request in the message.
 */
outbox_status obx_js_api_request(natsConnection *nc, const char *subject, const char *body,
                                 int timeout_ms, const char *doing, json_t **reply,
                                 outbox_error *err);

/* 1 and the reply's err_code and description (never NULL) if it carries an error. */
int obx_js_api_error(json_t *reply, int *code, const char **text);

/* "1h", "90m", "45s", "1500ms": what the nats CLI's duration flags accept. */
void obx_js_format_duration(int64_t ns, char *out, size_t cap);

#endif
