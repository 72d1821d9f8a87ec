/* SPDX-License-Identifier: MIT */
/*
 * envelope_scan.h - the one-pass envelope reader behind obx_envelope_parse
 * (see envelope_scan.c): "accepted" with the top-level members sliced out,
 * or "not sure", and then the full parse decides.
 */
#ifndef OBX_ENVELOPE_SCAN_H
#define OBX_ENVELOPE_SCAN_H

#include <stddef.h>

/* Top-level members; the string ones first, in struct obx_envelope's order. */
enum obx_envelope_member {
    OBX_MEMBER_ID,
    OBX_MEMBER_EVENT_TYPE,
    OBX_MEMBER_AGGREGATE_TYPE,
    OBX_MEMBER_AGGREGATE_ID,
    OBX_MEMBER_TENANT_ID,
    OBX_MEMBER_OCCURRED_AT,
    OBX_MEMBER_DATA_SUBJECT,
    OBX_MEMBER_TRACEPARENT,
    OBX_ENVELOPE_STRING_MEMBERS,
    OBX_MEMBER_SCHEMA_VERSION = OBX_ENVELOPE_STRING_MEMBERS,
    OBX_MEMBER_PAYLOAD,
    OBX_MEMBER_AGGREGATE_SEQ,
    OBX_ENVELOPE_MEMBERS
};

/*
 * The string members' raw text (no escapes in them); text NULL when absent.
 * aggregate_seq's text too (digits), NULL when absent.
 */
struct obx_envelope_slices {
    const char *text[OBX_ENVELOPE_STRING_MEMBERS];
    size_t len[OBX_ENVELOPE_STRING_MEMBERS];
    const char *seq_text;
    size_t seq_len;
};

/*
 * aggregate_seq's text `text[0..len)` as a number: plain digits, no sign,
 * fraction, exponent or leading zero, 1 to 9223372036854775807 (bigint).
 * 1 and `*out` set, or 0.
 */
int obx_envelope_seq_parse(const char *text, size_t len, long long *out);

/*
 * 1: `json` is a well-formed envelope object whose payload meets every
 * payload rule, with all required members, no unknown or repeated one and
 * schema_version 1; the field rules (uuids, route, ...) are still to check.
 * 0: not sure; only the full parse can say.
 */
int obx_envelope_scan(const char *json, size_t len, struct obx_envelope_slices *out);

#endif
