/* SPDX-License-Identifier: MIT */
/*
 * bus_nats.c - the relay's bus on nats.c: connecting, the connection's
 * callbacks, and the bus's lifetime. Publishing is in bus_batch_nats.c, the
 * state shared with nats.c's threads in bus_window_nats.c.
 *
 * nats.c may call us after obx_bus_close() returns (a closed callback
 * still queued, an ack being delivered), so the struct is reference
 * counted: one reference for the owner, one per connection (dropped by its
 * closed callback, the last one nats.c makes for it), one per message
 * nats.c holds (dropped by the ack or when we take the message back).
 */
#include "bus.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "bus_nats.h"
#include "bus_nats_int.h"
#include "common/error.h"
#include "common/text.h"
#include "envelope/subject.h"
#include "support/log.h"
#include "support/nats_conn_nats.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
note_lost(struct obx_bus *bus, natsConnection *nc)
{
    pthread_mutex_lock(&bus->mu);
    if (nc == bus->live_nc) {
        bus->lost_epoch++;
        pthread_cond_signal(&bus->cond);
    }
    pthread_mutex_unlock(&bus->mu);
}

static int
is_closing(struct obx_bus *bus)
{
    int closing;

    pthread_mutex_lock(&bus->mu);
    closing = bus->closing;
    pthread_mutex_unlock(&bus->mu);
    return closing;
}

static void
on_disconnected(natsConnection *nc, void *closure)
{
    struct obx_bus *bus = closure;

    obx_nats_log_state(is_closing(bus) ? OUTBOX_LOG_INFO : OUTBOX_LOG_WARN, "nats disconnected",
                       NULL, bus->name, bus->url_redacted);
    note_lost(bus, nc);
}

static void
on_reconnected(natsConnection *nc, void *closure)
{
    struct obx_bus *bus = closure;

    obx_nats_log_state(OUTBOX_LOG_INFO, "nats reconnected", nc, bus->name, bus->url_redacted);
}

/* The last callback nats.c makes for a connection: drops that connection's reference. */
static void
on_closed(natsConnection *nc, void *closure)
{
    struct obx_bus *bus = closure;

    if (is_closing(bus)) {
        obx_nats_log_state(OUTBOX_LOG_INFO, "nats connection closed", NULL, bus->name,
                           bus->url_redacted);
    } else {
        obx_nats_log_state(OUTBOX_LOG_WARN, "nats connection closed, will reopen", NULL, bus->name,
                           bus->url_redacted);
    }
    note_lost(bus, nc);
    pthread_mutex_lock(&bus->mu);
    obx_bus_unref_unlock(bus);
}

static void
drop_connection(struct obx_bus *bus)
{
    pthread_mutex_lock(&bus->mu);
    bus->live_nc = NULL; /* its late callbacks no longer concern any batch */
    pthread_mutex_unlock(&bus->mu);
    obx_bus_reclaim_pending(bus);
    obx_nats_teardown(bus->nc, bus->js, NULL); /* on_closed drops its reference later */
    bus->js = NULL;
    bus->js_used = 0;
    bus->nc = NULL;
}

static outbox_status
connect_js(struct obx_bus *bus, outbox_error *err)
{
    jsOptions jo;
    natsStatus ns;

    jsOptions_Init(&jo);
    jo.Wait = bus->publish_timeout_ms;
    /* A backstop only: our ring is the window. nats.c counts a message until
     * obx_bus_on_ack() returns, so an equal limit would stall on that race. */
    jo.PublishAsync.MaxPending = 2 * (int64_t)bus->window;
    jo.PublishAsync.StallWait = bus->publish_timeout_ms;
    jo.PublishAsync.AckHandler = obx_bus_on_ack;
    jo.PublishAsync.AckHandlerClosure = bus;
    ns = natsConnection_JetStream(&bus->js, bus->nc, &jo);
    return ns == NATS_OK ? OUTBOX_OK
                         : obx_nats_fail(err, ns, OUTBOX_ENOMEM, "creating the jetstream context");
}

static outbox_status
bus_connect(struct obx_bus *bus, outbox_error *err)
{
    natsStatus ns;
    outbox_status st;
    int64_t max_payload;
    char doing[300];

    pthread_mutex_lock(&bus->mu);
    bus->refs++; /* the connection's callbacks; on_closed drops it */
    pthread_mutex_unlock(&bus->mu);
    ns = natsConnection_Connect(&bus->nc, bus->opts);
    if (ns != NATS_OK) {
        pthread_mutex_lock(&bus->mu);
        bus->refs--; /* a connection that never connected makes no callbacks */
        pthread_mutex_unlock(&bus->mu);
        bus->nc = NULL;
        snprintf(doing, sizeof(doing), "connecting to nats at %s", bus->url_redacted);
        return obx_nats_fail_connect(err, ns, OUTBOX_EINVAL, doing, &bus->hints);
    }
    pthread_mutex_lock(&bus->mu);
    bus->live_nc = bus->nc;
    pthread_mutex_unlock(&bus->mu);
    st = connect_js(bus, err);
    if (st != OUTBOX_OK) {
        drop_connection(bus);
        return st;
    }
    max_payload = natsConnection_GetMaxPayload(bus->nc);
    bus->max_payload_bytes = max_payload > 0 ? (size_t)max_payload : 0;
    obx_nats_log_state(OUTBOX_LOG_INFO, "nats connected", bus->nc, bus->name, bus->url_redacted);
    return OUTBOX_OK;
}

/*
 * nats.c stops reconnecting in some cases (the same auth error twice in a
 * row, some -ERRs on an established connection), leaving the connection
 * closed for good. The contract says the bus reconnects forever, so open
 * a new one, at most once per reconnect wait.
 */
void
obx_bus_reopen_if_closed(struct obx_bus *bus)
{
    outbox_error e = {0};
    long long now = obx_monotonic_ms();

    if (bus->nc != NULL && !natsConnection_IsClosed(bus->nc)) {
        return;
    }
    if (now - bus->last_reopen_ms < OBX_NATS_RECONNECT_WAIT_MS) {
        return;
    }
    bus->last_reopen_ms = now;
    drop_connection(bus);
    if (bus_connect(bus, &e) != OUTBOX_OK) {
        obx_log(OUTBOX_LOG_WARN, "nats reopen failed url=%s reason=\"%s\"", bus->url_redacted,
                e.message);
    }
}

void
obx_bus_options_init(struct obx_bus_options *o)
{
    memset(o, 0, sizeof(*o));
    o->kind = OBX_BUS_JETSTREAM;
    o->url = "nats://127.0.0.1:4222";
    o->stream = "EVENTS";
    o->ce_source = "pgoutbox";
    o->name = "pgoutbox";
    o->connect_timeout_ms = 2000;
    o->publish_timeout_ms = 5000;
    o->max_in_flight = 1024;
}

static outbox_status
check_options(const struct obx_bus_options *o, outbox_error *err)
{
    if (o->kind != OBX_BUS_JETSTREAM && o->kind != OBX_BUS_NATS_CORE) {
        return obx_fail(err, OUTBOX_EINVAL, "bus kind %d is unknown", (int)o->kind);
    }
    if (o->kind == OBX_BUS_JETSTREAM &&
        (o->stream == NULL || !obx_token_valid(o->stream, strlen(o->stream)))) {
        return obx_fail(err, OUTBOX_EINVAL, "stream name must be one token of [A-Za-z0-9_-]");
    }
    if (o->ce_source == NULL || o->ce_source[0] == '\0' || obx_has_control(o->ce_source)) {
        return obx_fail(err, OUTBOX_EINVAL, "ce_source must be non-empty without control bytes");
    }
    if (o->publish_timeout_ms <= 0) {
        return obx_fail(err, OUTBOX_EINVAL, "publish_timeout_ms %d must be positive",
                        o->publish_timeout_ms);
    }
    if (o->max_in_flight <= 0 || o->max_in_flight > 1000000) {
        return obx_fail(err, OUTBOX_EINVAL, "max_in_flight %d must be within 1..1000000",
                        o->max_in_flight);
    }
    return OUTBOX_OK;
}

static char *
dup_or_empty(const char *s)
{
    return strdup(s != NULL ? s : "");
}

static outbox_status
bus_new(const struct obx_bus_options *o, struct obx_bus **out, outbox_error *err)
{
    struct obx_nats_settings ns = {
        .url = o->url,
        .name = o->name,
        .auth = o->auth,
        .connect_timeout_ms = o->connect_timeout_ms,
        .write_timeout_ms = o->publish_timeout_ms, /* send() never blocks longer on a stall */
    };
    struct obx_bus *bus = calloc(1, sizeof(*bus));
    pthread_condattr_t ca;
    char redacted[512];
    outbox_status st;

    if (bus == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory for the bus");
    }
    pthread_mutex_init(&bus->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&bus->cond, &ca);
    pthread_condattr_destroy(&ca);
    bus->refs = 1;
    bus->kind = o->kind;
    bus->publish_timeout_ms = o->publish_timeout_ms;
    bus->window = (size_t)o->max_in_flight;
    obx_nats_redact(o->url != NULL ? o->url : "", redacted, sizeof(redacted));
    bus->stream = dup_or_empty(o->stream);
    bus->ce_source = dup_or_empty(o->ce_source);
    bus->name = dup_or_empty(o->name);
    bus->url_redacted = dup_or_empty(redacted);
    obx_nats_hints_init(&bus->hints, &o->auth, o->url != NULL ? o->url : "");
    bus->ring = calloc(bus->window, sizeof(*bus->ring));
    *out = bus; /* from here on obx_bus_close() cleans up */
    if (!bus->stream || !bus->ce_source || !bus->name || !bus->url_redacted || !bus->ring) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory for the bus");
    }
    st = obx_nats_options_new(&ns, &bus->opts, err);
    if (st != OUTBOX_OK) {
        return st;
    }
    natsOptions_SetDisconnectedCB(bus->opts, on_disconnected, bus);
    natsOptions_SetReconnectedCB(bus->opts, on_reconnected, bus);
    natsOptions_SetClosedCB(bus->opts, on_closed, bus);
    return OUTBOX_OK;
}

outbox_status
obx_bus_open(const struct obx_bus_options *opts, struct obx_bus **out, outbox_error *err)
{
    struct obx_bus *bus = NULL;
    outbox_status st = check_options(opts, err);

    if (st == OUTBOX_OK) {
        st = bus_new(opts, &bus, err);
    }
    if (st == OUTBOX_OK) {
        st = bus_connect(bus, err);
    }
    if (st != OUTBOX_OK) {
        obx_bus_close(bus);
        return st;
    }
    *out = bus;
    return OUTBOX_OK;
}

void
obx_bus_close(struct obx_bus *bus)
{
    if (bus == NULL) {
        return;
    }
    pthread_mutex_lock(&bus->mu);
    bus->closing = 1;
    bus->live_nc = NULL;
    obx_bus_ring_abandon_locked(bus, NOTE_LOST); /* acks still on their way find nothing */
    pthread_mutex_unlock(&bus->mu);
    drop_connection(bus);
    if (bus->opts != NULL) {
        natsOptions_Destroy(bus->opts);
    }
    obx_bus_slots_free(bus);
    pthread_mutex_lock(&bus->mu);
    obx_bus_unref_unlock(bus);
}

int
obx_bus_connected_now(struct obx_bus *bus)
{
    return bus->nc != NULL && natsConnection_Status(bus->nc) == NATS_CONN_STATUS_CONNECTED;
}

/*
 * Callers ask this before sending and do not send while it is false, so
 * this is where a connection closed for good gets replaced; never while a
 * batch is in flight, whose window holds the old connection's messages.
 */
int
obx_bus_is_connected(struct obx_bus *bus)
{
    if (!bus->batch_open) {
        obx_bus_reopen_if_closed(bus);
    }
    return obx_bus_connected_now(bus);
}

size_t
obx_bus_max_payload(struct obx_bus *bus)
{
    if (obx_bus_connected_now(bus)) {
        int64_t max_payload = natsConnection_GetMaxPayload(bus->nc);

        if (max_payload > 0) {
            bus->max_payload_bytes = (size_t)max_payload;
        }
    }
    return bus->max_payload_bytes;
}

jsCtx *
obx_bus_js(struct obx_bus *bus)
{
    return bus->js;
}

natsConnection *
obx_bus_conn(struct obx_bus *bus)
{
    return bus->nc;
}
