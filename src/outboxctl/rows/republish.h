/* SPDX-License-Identifier: MIT */
/*
 * republish.h - outboxctl publishing outbox events again (dead requeue,
 * replay, audit --repair) exactly as the relay publishes them: the relay's
 * batch code checks each envelope and builds its subject and CloudEvents
 * headers (relay/relay_batch.c), the relay's bus publishes it with
 * Nats-Msg-Id and ExpectStream and classifies the PubAck (bus/bus.h). The
 * body is the stored envelope's text, as the relay sends it.
 */
#ifndef OBX_CTL_REPUBLISH_H
#define OBX_CTL_REPUBLISH_H

#include <stddef.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "config/settings.h"
#include "outbox/outbox.h"
#include "outboxctl/query.h"

struct obx_ctl_publisher;

/*
 * Connects the bus with the relay's settings (URL, credentials, TLS,
 * OUTBOX_CE_SOURCE, publish timeout, window) and creates the stream with
 * the relay's settings if it is missing (a stream deleted by accident:
 * the way back starts with the stream). OUTBOX_EUNAVAILABLE when NATS is
 * down.
 */
outbox_status obx_ctl_publisher_open(const struct obx_config *cfg, struct obx_ctl_publisher **out,
                                     outbox_error *err);
void obx_ctl_publisher_close(struct obx_ctl_publisher *p);

/*
 * Publishes the rows `stmt` returns (columns: id, envelope text, and an
 * optional msg_id: the Nats-Msg-Id when not the id) and appends one object
 * per row to `results`: {id, msg_id, outcome, stream_seq, reason}, outcome
 * one of published, duplicate (the stream had it), failed (retry later),
 * invalid (the relay would quarantine it).
 */
outbox_status obx_ctl_republish(struct obx_ctl_publisher *p, PGconn *conn,
                                const struct obx_ctl_stmt *stmt, json_t *results,
                                outbox_error *err);

/* Records the stream sequences of the published and duplicate `results` on their done rows. */
outbox_status obx_ctl_record_seqs(PGconn *conn, const char *schema, json_t *results,
                                  outbox_error *err);

/* True if `result` (from obx_ctl_republish) is in the stream now. */
int obx_ctl_result_stored(json_t *result);

#endif
