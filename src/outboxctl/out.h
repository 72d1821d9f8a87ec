/* SPDX-License-Identifier: MIT */
/*
 * out.h - what outboxctl prints: one JSON object per line with --json,
 * otherwise one line per record for people, `kind key=value ...` in the
 * daemons' log style (values with spaces quoted), and plain sentences for
 * summaries. Everything goes to stdout; problems go to stderr.
 */
#ifndef OBX_CTL_OUT_H
#define OBX_CTL_OUT_H

#include <stddef.h>

#include <jansson.h>

/*
 * Prints record `obj` of `kind` ("dead_letter", "finding", ...): with
 * `json`, as {"kind": kind, ...obj} on one line; otherwise `kind` and the
 * `keys` (NULL-terminated; NULL: every key) as key=value. Borrows `obj`.
 */
void obx_ctl_emit(int json, const char *kind, json_t *obj, const char *const *keys);

/* `obj[key]` as text: strings bare, null as "-", arrays comma-joined, the rest as JSON. */
const char *obx_ctl_text(json_t *obj, const char *key, char *buf, size_t cap);

/* Shorthands for typed fields of a row; 0 / NULL when absent or null. */
long long obx_ctl_int(json_t *obj, const char *key);
const char *obx_ctl_str(json_t *obj, const char *key);

#endif
