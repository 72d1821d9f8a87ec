/* SPDX-License-Identifier: MIT */
/*
 * nats_conn_nats.c - connection options, status translation and log naming
 * shared by every NATS connection of ours.
 *
 * Nothing here may print: nats.c's default error handler writes to stderr,
 * so every options object we build carries a handler that logs instead.
 * URLs can carry user:password@; they are redacted before any log line or
 * error message sees them.
 */
#include "nats_conn_nats.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/url_list.h"
#include "log.h"
#include "nats_auth_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/*
 * A server that stops answering (SIGSTOP, a black-holed link) is declared
 * stale after MAX_PINGS_OUT unanswered pings, so the connection starts
 * reconnecting within 10-15 s instead of nats.c's default 4-6 minutes.
 */
#define PING_INTERVAL_MS     5000
#define MAX_PINGS_OUT        2
#define RECONNECT_JITTER_MS  500
#define RECONNECT_JITTER_TLS 1000

static void
log_async_error(natsConnection *nc, natsSubscription *sub, natsStatus s, void *closure)
{
    const char *text = NULL;
    char clean[256];

    (void)sub;
    (void)closure;
    natsConnection_GetLastError(nc, &text);
    obx_nats_redact(text != NULL ? text : "", clean, sizeof(clean));
    obx_log(OUTBOX_LOG_WARN, "nats async error status=%s text=\"%s\"", natsStatus_GetText(s),
            clean);
}

/* Reports `s` as `code`, with nats.c's reason for it and `hint` ("": none). */
static outbox_status
fail_as(outbox_error *err, natsStatus s, outbox_status code, const char *doing, const char *hint)
{
    natsStatus last_status = NATS_OK;
    const char *last = nats_GetLastError(&last_status);
    char clean[256];
    /* The thread's last error only explains `s` if it is about the same status. */
    if (last == NULL || last_status != s) {
        last = "";
    }
    /* nats.c prefixes "(conn.c:2088): "; the reason alone reads better. */
    if (last[0] == '(' && strstr(last, "): ") != NULL) {
        last = strstr(last, "): ") + 3;
    }
    if (strcmp(last, natsStatus_GetText(s)) == 0) {
        last = "";
    }
    obx_nats_redact(last, clean, sizeof(clean));
    return obx_fail(err, code, "%s: %s%s%s%s%s", doing, natsStatus_GetText(s), clean[0] ? ": " : "",
                    clean, hint[0] ? "; " : "", hint);
}

outbox_status
obx_nats_fail(outbox_error *err, natsStatus s, outbox_status otherwise, const char *doing)
{
    return obx_nats_fail_connect(err, s, otherwise, doing, NULL);
}

outbox_status
obx_nats_fail_connect(outbox_error *err, natsStatus s, outbox_status otherwise, const char *doing,
                      const struct obx_nats_hints *hints)
{
    outbox_status code = otherwise;

    if (obx_nats_status_is_transport(s)) {
        code = OUTBOX_EUNAVAILABLE;
    } else if (s == NATS_NO_MEMORY) {
        code = OUTBOX_ENOMEM;
    }
    return fail_as(err, s, code, doing, hints != NULL ? obx_nats_hint_for(hints, s) : "");
}

static int
is_set(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/*
 * Every server of the list, as an array: natsOptions_SetURL takes one URL in
 * nats.c 3.4.1 and, given a list, never connects (FACTS 20). The client
 * tries each at connect, and on a loss reconnects to the others (and to
 * the cluster's other nodes the servers announce).
 */
static outbox_status
set_servers(natsOptions *o, const char *list, outbox_error *err)
{
    struct obx_url_list l;
    natsStatus ns;
    outbox_status st = obx_url_list_parse("nats_url", list, &l, err);

    if (st != OUTBOX_OK) {
        return st;
    }
    ns = natsOptions_SetServers(o, (const char **)l.urls, (int)l.count);
    obx_url_list_free(&l);
    return ns == NATS_OK ? OUTBOX_OK
                         : obx_nats_fail(err, ns, OUTBOX_EINVAL, "parsing the nats url");
}

/* Reconnect and liveness settings: forever, jittered, pings and write deadline. */
static natsStatus
set_liveness(natsOptions *o, const struct obx_nats_settings *s)
{
    natsStatus ns = natsOptions_SetTimeout(o, s->connect_timeout_ms);

    if (ns == NATS_OK) {
        ns = natsOptions_SetMaxReconnect(o, -1);
    }
    if (ns == NATS_OK) {
        ns = natsOptions_SetReconnectWait(o, OBX_NATS_RECONNECT_WAIT_MS);
    }
    if (ns == NATS_OK) {
        ns = natsOptions_SetReconnectJitter(o, RECONNECT_JITTER_MS, RECONNECT_JITTER_TLS);
    }
    if (ns == NATS_OK) {
        ns = natsOptions_SetPingInterval(o, PING_INTERVAL_MS);
    }
    if (ns == NATS_OK) {
        ns = natsOptions_SetMaxPingsOut(o, MAX_PINGS_OUT);
    }
    if (ns == NATS_OK && s->write_timeout_ms > 0) {
        ns = natsOptions_SetWriteDeadline(o, s->write_timeout_ms);
    }
    if (ns == NATS_OK) {
        /* JetStream API calls (stream info, updates) fail at once on a disconnect. */
        ns = natsOptions_SetFailRequestsOnDisconnect(o, true);
    }
    if (ns == NATS_OK) {
        ns = natsOptions_SetErrorHandler(o, log_async_error, NULL);
    }
    return ns;
}

outbox_status
obx_nats_options_new(const struct obx_nats_settings *s, natsOptions **out, outbox_error *err)
{
    natsOptions *o = NULL;
    natsStatus ns;
    outbox_status st = OUTBOX_OK;

    if (!is_set(s->url)) {
        return obx_fail(err, OUTBOX_EINVAL, "nats_url must not be empty");
    }
    if (s->connect_timeout_ms <= 0) {
        return obx_fail(err, OUTBOX_EINVAL, "connect_timeout_ms %d must be positive",
                        s->connect_timeout_ms);
    }
    ns = natsOptions_Create(&o);
    if (ns != NATS_OK) {
        return obx_nats_fail(err, ns, OUTBOX_ENOMEM, "creating nats options");
    }
    st = set_servers(o, s->url, err);
    if (st != OUTBOX_OK) {
        goto done;
    }
    ns = is_set(s->name) ? natsOptions_SetName(o, s->name) : NATS_OK;
    if (ns == NATS_OK) {
        ns = set_liveness(o, s);
    }
    if (ns != NATS_OK) {
        st = obx_nats_fail(err, ns, OUTBOX_EINVAL, "setting nats options");
        goto done;
    }
    st = obx_nats_auth_apply(o, &s->auth, s->url, err);
done:
    if (st != OUTBOX_OK) {
        natsOptions_Destroy(o);
        return st;
    }
    *out = o;
    return OUTBOX_OK;
}

outbox_status
obx_nats_connect_once(const char *url, const char *name, natsConnection **nc, outbox_error *err)
{
    struct obx_nats_settings s = {.url = url,
                                  .name = name,
                                  .auth = *obx_nats_tool_auth(),
                                  .connect_timeout_ms = OBX_NATS_TOOL_TIMEOUT_MS,
                                  .write_timeout_ms = OBX_NATS_TOOL_TIMEOUT_MS};
    struct obx_nats_hints hints;
    natsOptions *o = NULL;
    natsStatus ns;
    outbox_status st = obx_nats_options_new(&s, &o, err);

    *nc = NULL;
    if (st != OUTBOX_OK) {
        return st;
    }
    ns = natsOptions_SetMaxReconnect(o, 0); /* one question, then closed: no reconnect loop */
    if (ns == NATS_OK) {
        ns = natsConnection_Connect(nc, o);
    }
    natsOptions_Destroy(o);
    if (ns != NATS_OK) {
        *nc = NULL;
        obx_nats_hints_init(&hints, &s.auth, url);
        return obx_nats_fail_connect(err, ns, OUTBOX_EUNAVAILABLE, "connecting to nats", &hints);
    }
    return OUTBOX_OK;
}

void
obx_nats_teardown(natsConnection *nc, jsCtx *js, natsSubscription *sub)
{
    if (nc != NULL) {
        natsConnection_Close(nc); /* returns after the reader thread has ended */
    }
    jsCtx_Destroy(js);
    natsSubscription_Destroy(sub); /* closed with the connection: no UNSUB is sent */
    natsConnection_Destroy(nc);
}

int
obx_nats_status_is_transport(natsStatus s)
{
    switch (s) {
    case NATS_IO_ERROR:
    case NATS_CONNECTION_CLOSED:
    case NATS_NO_SERVER:
    case NATS_STALE_CONNECTION:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_CONNECTION_AUTH_FAILED: /* credentials can be fixed without restarting us */
    case NATS_SSL_ERROR:
    case NATS_TIMEOUT:
    case NATS_NOT_YET_CONNECTED:
    case NATS_DRAINING:
    case NATS_NO_RESPONDERS:
    case NATS_INSUFFICIENT_BUFFER: /* reconnect buffer full */
    case NATS_SYS_ERROR:
        return 1;
    default:
        return 0;
    }
}

/* Length of the user information after "://" (up to and including '@'), or 0. */
static size_t
userinfo_len(const char *p)
{
    size_t i;

    for (i = 0; p[i] != '\0'; i++) {
        if (p[i] == '@') {
            return i + 1;
        }
        if (p[i] == '/' || p[i] == ',' || p[i] == ' ' || p[i] == '"' || p[i] == '\'') {
            return 0;
        }
    }
    return 0;
}

void
obx_nats_redact(const char *text, char *out, size_t cap)
{
    size_t o = 0;

    if (cap == 0) {
        return;
    }
    while (*text != '\0' && o + 1 < cap) {
        if (strncmp(text, "://", 3) == 0) {
            size_t skip;

            for (int k = 0; k < 3 && o + 1 < cap; k++) {
                out[o++] = *text++;
            }
            skip = userinfo_len(text);
            text += skip;
            continue;
        }
        out[o++] = *text++;
    }
    out[o] = '\0';
}

void
obx_nats_log_state(outbox_log_level level, const char *what, natsConnection *nc, const char *name,
                   const char *configured_url)
{
    char url[256] = "";
    char clean[256];

    /* While disconnected nats.c knows no server URL; name the configured ones then. */
    if (nc == NULL || natsConnection_GetConnectedUrl(nc, url, sizeof(url)) != NATS_OK ||
        url[0] == '\0') {
        snprintf(url, sizeof(url), "%s", configured_url != NULL ? configured_url : "");
    }
    obx_nats_redact(url, clean, sizeof(clean));
    obx_log(level, "%s url=%s name=%s", what, clean[0] ? clean : "-",
            name != NULL && name[0] ? name : "-");
}
