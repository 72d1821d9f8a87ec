/* SPDX-License-Identifier: MIT */
/*
 * subject.c - NATS subject rules. Messages are worded exactly as
 * outbox.event_error() in sql/migrations words them.
 */
#include "subject.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/secret.h"
#include "common/text.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static int
token_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

int
obx_token_valid(const char *s, size_t len)
{
    if (len == 0) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (!token_char(s[i])) {
            return 0;
        }
    }
    return 1;
}

int
obx_dotted_tokens_valid(const char *s)
{
    const char *start = s;

    for (;; s++) {
        if (*s == '.' || *s == '\0') {
            if (!obx_token_valid(start, (size_t)(s - start))) {
                return 0;
            }
            if (*s == '\0') {
                return 1;
            }
            start = s + 1;
        }
    }
}

outbox_status
obx_route_check(const char *aggregate_type, const char *event_type, outbox_error *err)
{
    char quoted[160], quoted2[160], prefix[OUTBOX_MAX_ROUTE_BYTES + 2];
    size_t agg_len, route_len;

    if (aggregate_type == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "aggregate_type is required");
    }
    agg_len = strlen(aggregate_type);
    if (!obx_token_valid(aggregate_type, agg_len)) {
        obx_quote_for_message(aggregate_type, quoted, sizeof(quoted));
        return obx_fail(err, OUTBOX_EINVAL, "aggregate_type %s must be one token of [A-Za-z0-9_-]",
                        quoted);
    }
    if (event_type == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "event_type is required");
    }
    if (!obx_dotted_tokens_valid(event_type)) {
        obx_quote_for_message(event_type, quoted, sizeof(quoted));
        return obx_fail(err, OUTBOX_EINVAL,
                        "event_type %s must be tokens of [A-Za-z0-9_-] joined by dots", quoted);
    }
    route_len = agg_len + 1 + strlen(event_type);
    if (route_len > OUTBOX_MAX_ROUTE_BYTES) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "aggregate_type.event_type is %zu bytes, over the limit of %d", route_len,
                        OUTBOX_MAX_ROUTE_BYTES);
    }
    if (strncmp(event_type, aggregate_type, agg_len) == 0 && event_type[agg_len] == '.') {
        snprintf(prefix, sizeof(prefix), "%s.", aggregate_type);
        obx_quote_for_message(event_type, quoted, sizeof(quoted));
        obx_quote_for_message(prefix, quoted2, sizeof(quoted2));
        return obx_fail(err, OUTBOX_EINVAL, "event_type %s must not start with aggregate_type %s",
                        quoted, quoted2);
    }
    return OUTBOX_OK;
}

outbox_status
obx_subject_prefix_check(const char *prefix, outbox_error *err)
{
    char quoted[160];

    if (prefix == NULL || !obx_dotted_tokens_valid(prefix) ||
        strlen(prefix) > OUTBOX_MAX_PREFIX_BYTES) {
        /* Masked: a URL pasted here keeps its password to itself. */
        obx_mask_quote(prefix ? prefix : "", quoted, sizeof(quoted));
        return obx_fail(err, OUTBOX_EINVAL,
                        "subject prefix %s must be tokens of [A-Za-z0-9_-] joined by dots, "
                        "at most %d bytes",
                        quoted, OUTBOX_MAX_PREFIX_BYTES);
    }
    return OUTBOX_OK;
}

outbox_status
obx_subject_build(const char *prefix, const char *aggregate_type, const char *event_type, char *out,
                  outbox_error *err)
{
    outbox_status status = obx_subject_prefix_check(prefix, err);

    if (status == OUTBOX_OK) {
        status = obx_route_check(aggregate_type, event_type, err);
    }
    if (status == OUTBOX_OK) {
        /* Cannot be cut: 32 + 1 + 222 = 255 bytes at most. */
        snprintf(out, OBX_SUBJECT_CAP, "%s.%s.%s", prefix, aggregate_type, event_type);
    }
    return status;
}

/* Length of the token starting at `s` (up to '.' or the end). */
static size_t
token_len(const char *s)
{
    size_t n = 0;

    while (s[n] != '\0' && s[n] != '.') {
        n++;
    }
    return n;
}

int
obx_subject_matches(const char *filter, const char *subject)
{
    for (;;) {
        size_t flen = token_len(filter), slen = token_len(subject);

        if (flen == 1 && filter[0] == '>' && filter[1] == '\0') {
            return slen > 0; /* one or more tokens left */
        }
        if (slen == 0 || flen == 0) {
            return 0;
        }
        if (!(flen == 1 && filter[0] == '*') &&
            (flen != slen || strncmp(filter, subject, flen) != 0)) {
            return 0;
        }
        filter += flen;
        subject += slen;
        if (*filter == '\0' || *subject == '\0') {
            return *filter == '\0' && *subject == '\0';
        }
        filter++;
        subject++;
    }
}

int
obx_subject_filter_covers(const char *filter, const char *prefix, size_t prefix_len)
{
    const char *end = prefix + prefix_len;

    for (;;) {
        size_t flen = token_len(filter), plen = 0;

        if (flen == 1 && filter[0] == '>' && filter[1] == '\0') {
            return 1; /* whatever follows */
        }
        if (prefix >= end) {
            return 0; /* the filter names tokens past the prefix: some event types only */
        }
        while (prefix + plen < end && prefix[plen] != '.') {
            plen++;
        }
        if (flen == 0 || (!(flen == 1 && filter[0] == '*') &&
                          (flen != plen || strncmp(filter, prefix, flen) != 0))) {
            return 0;
        }
        filter += flen;
        prefix += plen;
        if (*filter == '\0') {
            return 0; /* the filter ends where the subject goes on */
        }
        filter++;
        prefix += prefix < end; /* the dot */
    }
}

outbox_status
obx_subject_filter_check(const char *filter, outbox_error *err)
{
    char quoted[160];
    const char *p = filter;
    int ok = filter != NULL && filter[0] != '\0' && strlen(filter) <= 255;

    while (ok && *p != '\0') {
        size_t n = token_len(p);
        int wildcard = n == 1 && (p[0] == '*' || (p[0] == '>' && p[1] == '\0'));

        ok = wildcard || obx_token_valid(p, n);
        p += n;
        if (ok && *p == '.') {
            p++;
            ok = *p != '\0'; /* a trailing dot leaves an empty token */
        }
    }
    if (!ok) {
        obx_mask_quote(filter ? filter : "", quoted, sizeof(quoted)); /* as the prefix's */
        return obx_fail(err, OUTBOX_EINVAL,
                        "subject filter %s must be tokens of [A-Za-z0-9_-], * or a final >, "
                        "joined by dots",
                        quoted);
    }
    return OUTBOX_OK;
}
