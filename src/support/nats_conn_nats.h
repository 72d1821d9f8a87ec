/* SPDX-License-Identifier: MIT */
/*
 * nats_conn_nats.h - what every NATS connection of ours has in common (the
 * relay's bus, the consumers' feed, the stream tools): how it connects,
 * how a natsStatus becomes an outbox_status, and how it is named in logs.
 *
 * Connections built from these options never print, reconnect forever with
 * a jittered wait, notice a hung server through pings within seconds, and
 * never block a write on a stalled socket longer than the write timeout.
 */
#ifndef OBX_NATS_CONN_NATS_H
#define OBX_NATS_CONN_NATS_H

#include <stddef.h>

#include <nats/nats.h>

#include "nats_auth.h"
#include "outbox/worker.h"

struct obx_nats_settings {
    const char *url;           /* comma-separated server URLs */
    const char *name;          /* connection name shown by the server; NULL: none */
    struct obx_nats_auth auth; /* credentials and TLS */
    int connect_timeout_ms;    /* per attempt, also for each reconnect attempt */
    int write_timeout_ms;      /* longest a write may block on a stalled socket */
};

/* How long to wait between reconnect attempts to one server (plus jitter). */
#define OBX_NATS_RECONNECT_WAIT_MS 2000

/*
 * Builds natsOptions from `s`; the caller adds its callbacks and owns the
 * result (natsOptions_Destroy). An error handler that logs instead of
 * printing is installed; callers may replace it. Returns OUTBOX_EINVAL for
 * settings nats.c refuses (bad URL, unreadable TLS, credential or secret
 * files), naming the setting and its file.
 */
outbox_status obx_nats_options_new(const struct obx_nats_settings *s, natsOptions **out,
                                   outbox_error *err);

/* Connect and write timeout of the one-shot connections of tools. */
#define OBX_NATS_TOOL_TIMEOUT_MS 5000

/*
 * A connection for a tool's few questions (stream audit, bench setup, the
 * server's version): the same options, every server of `url` tried once,
 * no reconnects. The caller destroys *nc. OUTBOX_EINVAL for a bad list
 * (naming nats_url and the entry), OUTBOX_EUNAVAILABLE when no server answers.
 */
outbox_status obx_nats_connect_once(const char *url, const char *name, natsConnection **nc,
                                    outbox_error *err);

/*
 * Ends a connection with its JetStream context and subscription (any may be
 * NULL): the connection is closed first, which joins nats.c's reader thread,
 * and only then are the subscriptions freed (the context owns one for
 * publish acks). nats.c 3.4.1 looks a subscription up for an arriving message
 * and uses it without holding a reference, so freeing one while the reader
 * runs is a use-after-free (fixed upstream in 3.7.0).
 */
void obx_nats_teardown(natsConnection *nc, jsCtx *js, natsSubscription *sub);

/* True for statuses that mean "cannot reach NATS right now": retry later. */
int obx_nats_status_is_transport(natsStatus s);

/*
 * Reports a failed nats.c call: transport problems become
 * OUTBOX_EUNAVAILABLE, NATS_NO_MEMORY OUTBOX_ENOMEM, anything else
 * `otherwise`. The message says what we were `doing` and nats.c's reason,
 * with credentials removed. Returns the code.
 */
outbox_status obx_nats_fail(outbox_error *err, natsStatus s, outbox_status otherwise,
                            const char *doing);

/*
 * Copies `text` into `out` (cap bytes, always terminated) with the user
 * information of every URL in it removed ("nats://u:p@h:4222" becomes
 * "nats://h:4222"), so URLs can go into logs and messages.
 */
void obx_nats_redact(const char *text, char *out, size_t cap);

/*
 * obx_nats_fail() for a failed connect, with what to check when TLS or the
 * credentials were refused (see obx_nats_hints_init; NULL: no hint).
 */
struct obx_nats_hints;
outbox_status obx_nats_fail_connect(outbox_error *err, natsStatus s, outbox_status otherwise,
                                    const char *doing, const struct obx_nats_hints *hints);

/*
 * Logs a state change (`what` is a constant such as "nats connected") with
 * the server's URL, or `configured_url` when none is connected; redacted.
 */
void obx_nats_log_state(outbox_log_level level, const char *what, natsConnection *nc,
                        const char *name, const char *configured_url);

#endif
