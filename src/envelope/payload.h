/* SPDX-License-Identifier: MIT */
/*
 * payload.h - the rules for an event's payload.
 *
 * A JSON object ({} is valid), at most OUTBOX_MAX_PAYLOAD_DEPTH deep, with
 * valid UTF-8 and no NUL in any string or key: PostgreSQL's jsonb refuses
 * \u0000, and finding that out at INSERT would abort the caller's
 * transaction, so it is found here first.
 */
#ifndef OBX_PAYLOAD_H
#define OBX_PAYLOAD_H

#include <stddef.h>

#include <jansson.h>

#include "outbox/outbox.h"

/* Checks a payload built in memory. */
outbox_status obx_payload_check(const json_t *payload, outbox_error *err);

/*
 * Parses and checks JSON text. On success `*out` (if not NULL) receives
 * the parsed value, which the caller releases with json_decref. Integers
 * too large for 64 bits are accepted (PostgreSQL's numeric keeps them).
 */
outbox_status obx_payload_parse(const char *json, size_t len, json_t **out, outbox_error *err);

#endif
