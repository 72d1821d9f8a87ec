/* SPDX-License-Identifier: MIT */
/*
 * relay_check.h - outboxctl checking rows the way the relay will, with the
 * relay's own code (obx_relay_batch_prepare: the envelope read again, its
 * id against the row's, the subject built with this OUTBOX_SUBJECT_PREFIX,
 * the body against the server's max_payload less the header budget).
 * `validate` finds the pending rows the relay would quarantine with it;
 * `quarantine release` lets a quarantined row go only once it passes.
 */
#ifndef OBX_CTL_RELAY_CHECK_H
#define OBX_CTL_RELAY_CHECK_H

#include <stddef.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "config/settings.h"
#include "outbox/outbox.h"
#include "outboxctl/query.h"

/*
 * The largest body the relay (or the DB feed) takes today: the server's
 * max_payload less the header budget, asked of NATS. When NATS cannot be
 * asked, prints why under `verb` and uses NATS's default of 1 MiB.
 */
size_t obx_ctl_body_limit(const struct obx_config *cfg, const char *verb);

/*
 * Runs `stmt` (its first two columns the id and the envelope as text, as
 * lease_batch.sql) and checks each row as the relay would. `*rows` gets
 * every row as JSON (owned), without "envelope"; a row the relay would
 * quarantine has "reason" set to why, a row that passes has none (a
 * "reason" column of the statement is replaced).
 */
outbox_status obx_ctl_relay_check(PGconn *conn, const struct obx_config *cfg,
                                  const struct obx_ctl_stmt *stmt, size_t max_body, json_t **rows,
                                  outbox_error *err);

#endif
