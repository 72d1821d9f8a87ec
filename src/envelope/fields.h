/* SPDX-License-Identifier: MIT */
/*
 * fields.h - checks for the envelope's scalar fields.
 *
 * Shared by the writer (before anything is sent) and the relay (before
 * anything is published). Messages name the field and quote the value the
 * way outbox.event_error() does.
 */
#ifndef OBX_FIELDS_H
#define OBX_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#include "common/uuid7.h"
#include "outbox/outbox.h"

/* Checks and lower-cases a canonical UUID into `out` (OBX_UUID_TEXT_LEN + 1 bytes). */
outbox_status obx_check_uuid_field(const char *field, const char *value, char *out,
                                   outbox_error *err);

/* tenant_id, data_subject: 1..max_bytes of UTF-8 without control bytes. NULL is fine. */
outbox_status obx_check_label_field(const char *field, const char *value, size_t max_bytes,
                                    outbox_error *err);

/* W3C traceparent, version 00, ids not all zero. NULL is fine. */
outbox_status obx_check_traceparent(const char *value, outbox_error *err);

/*
 * An RFC 3339 timestamp as the envelope writes it (date, 'T', time, an
 * optional fraction, Z or an offset) that names a real instant: a day of
 * its month, hours 00-23, minutes and seconds 00-59, an offset within
 * 23:59 (the table's row rule checks the same, outbox.time_is_real()).
 * The message names `field`, quotes the value and says why.
 */
outbox_status obx_check_timestamp_field(const char *field, const char *value, outbox_error *err);

/* Formats Unix milliseconds as 2026-11-29T09:41:56.123Z into `out` (32 bytes). */
outbox_status obx_format_timestamp_ms(int64_t unix_ms, char *out, outbox_error *err);

#endif
