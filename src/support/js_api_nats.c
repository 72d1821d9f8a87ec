/* SPDX-License-Identifier: MIT */
/*
 * js_api_nats.c - one JetStream API request as JSON in, JSON out.
 *
 * jansson rather than nats.c's config structs: the server's answer is kept
 * whole, so an update can send back fields this nats.c does not know.
 */
#include "js_api_nats.h"

#include <inttypes.h>
#include <stdio.h>

#include "common/error.h"
#include "nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

outbox_status
obx_js_api_request(natsConnection *nc, const char *subject, const char *body, int timeout_ms,
                   const char *doing, json_t **reply, outbox_error *err)
{
    natsMsg *msg = NULL;
    json_t *parsed;
    natsStatus ns;

    ns = natsConnection_RequestString(&msg, nc, subject, body, timeout_ms);
    if (ns != NATS_OK) {
        /* No responders: JetStream is not enabled, or not up yet. */
        return obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, doing);
    }
    parsed = json_loadb(natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg), 0, NULL);
    natsMsg_Destroy(msg);
    if (!json_is_object(parsed)) {
        json_decref(parsed);
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "%s: jetstream answered with no json", doing);
    }
    *reply = parsed;
    return OUTBOX_OK;
}

int
obx_js_api_error(json_t *reply, int *code, const char **text)
{
    json_t *e = json_object_get(reply, "error");

    if (!json_is_object(e)) {
        return 0;
    }
    *code = (int)json_integer_value(json_object_get(e, "err_code"));
    *text = json_string_value(json_object_get(e, "description"));
    if (*text == NULL) {
        *text = "";
    }
    return 1;
}

void
obx_js_format_duration(int64_t ns, char *out, size_t cap)
{
    int64_t s = ns / OBX_NANOS_PER_SECOND;

    if (ns % OBX_NANOS_PER_SECOND != 0) {
        snprintf(out, cap, "%" PRId64 "ms", ns / 1000000);
    } else if (s != 0 && s % 3600 == 0) {
        snprintf(out, cap, "%" PRId64 "h", s / 3600);
    } else if (s != 0 && s % 60 == 0) {
        snprintf(out, cap, "%" PRId64 "m", s / 60);
    } else {
        snprintf(out, cap, "%" PRId64 "s", s);
    }
}
