/* SPDX-License-Identifier: MIT */
/*
 * fields.c - checks for the envelope's scalar fields.
 */
#include "fields.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/text.h"

#include "common/banned.h" /* last: poisons unsafe functions */

outbox_status
obx_check_uuid_field(const char *field, const char *value, char *out, outbox_error *err)
{
    char quoted[160];
    uint8_t bytes[16];

    if (value == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "%s is required", field);
    }
    if (obx_uuid_parse(value, bytes) != 0) {
        obx_quote_for_message(value, quoted, sizeof(quoted));
        return obx_fail(err, OUTBOX_EINVAL, "%s %s is not a UUID (8-4-4-4-12 hex digits)", field,
                        quoted);
    }
    obx_uuid_format(bytes, out);
    return OUTBOX_OK;
}

outbox_status
obx_check_label_field(const char *field, const char *value, size_t max_bytes, outbox_error *err)
{
    char quoted[160];
    size_t len;

    if (value == NULL) {
        return OUTBOX_OK;
    }
    len = strlen(value);
    if (!obx_utf8_valid(value, len)) {
        return obx_fail(err, OUTBOX_EINVAL, "%s is not valid UTF-8", field);
    }
    if (len == 0 || len > max_bytes || obx_has_control(value)) {
        obx_quote_for_message(value, quoted, sizeof(quoted));
        return obx_fail(err, OUTBOX_EINVAL,
                        "%s %s must be 1 to %zu bytes without control characters", field, quoted,
                        max_bytes);
    }
    return OUTBOX_OK;
}

/* True if `s[0..len)` is lower-case hex and not all zeros. */
static int
nonzero_lower_hex(const char *s, size_t len)
{
    int nonzero = 0;

    for (size_t i = 0; i < len; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
            return 0;
        }
        nonzero |= s[i] != '0';
    }
    return nonzero;
}

outbox_status
obx_check_traceparent(const char *value, outbox_error *err)
{
    char quoted[160];

    if (value == NULL) {
        return OUTBOX_OK;
    }
    /* 00-<trace-id 32>-<parent-id 16>-<flags 2>: 55 bytes. */
    if (strlen(value) != 55 || strncmp(value, "00-", 3) != 0 || value[35] != '-' ||
        value[52] != '-' || !nonzero_lower_hex(value + 3, 32) ||
        !nonzero_lower_hex(value + 36, 16) ||
        !(nonzero_lower_hex(value + 53, 2) || strcmp(value + 53, "00") == 0)) {
        obx_quote_for_message(value, quoted, sizeof(quoted));
        return obx_fail(err, OUTBOX_EINVAL,
                        "traceparent %s must be 00-<32 hex>-<16 hex>-<2 hex> with non-zero ids",
                        quoted);
    }
    return OUTBOX_OK;
}

/* Matches `s` against a pattern where 'd' is a digit and anything else is itself. */
static const char *
match_digits(const char *s, const char *pattern)
{
    for (; *pattern; pattern++, s++) {
        if (*pattern == 'd' ? !isdigit((unsigned char)*s) : *s != *pattern) {
            return NULL;
        }
    }
    return s;
}

/* The pattern only: date, 'T', time, an optional fraction of 1 to 9 digits, Z or an offset. */
static int
timestamp_shaped(const char *value)
{
    const char *s = value ? match_digits(value, "dddd-dd-ddTdd:dd:dd") : NULL;
    int fraction = 0;

    if (s == NULL) {
        return 0;
    }
    if (*s == '.') {
        for (s++; isdigit((unsigned char)*s); s++) {
            fraction++;
        }
        if (fraction < 1 || fraction > 9) {
            return 0;
        }
    }
    if (*s == 'Z') {
        return s[1] == '\0';
    }
    if (*s == '+' || *s == '-') {
        s = match_digits(s + 1, "dd:dd");
        return s != NULL && *s == '\0';
    }
    return 0;
}

/* The two digits at `s` as a number. */
static int
two_digits(const char *s)
{
    return (s[0] - '0') * 10 + (s[1] - '0');
}

/* Days in `month` (1-12) of `year`, by the proleptic Gregorian calendar RFC 3339 uses. */
static int
days_in_month(int year, int month)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;

    return month == 2 ? 28 + leap : days[month - 1];
}

/*
 * Why a timestamp of the right shape names no instant, or NULL. A leap
 * second (60) is refused too: PostgreSQL moves it to the next minute and
 * JavaScript's Date refuses it, so no two readers would agree on it.
 */
static const char *
timestamp_unreal(const char *value)
{
    int year = two_digits(value) * 100 + two_digits(value + 2);
    int month = two_digits(value + 5);
    const char *zone = value + 19;

    if (month < 1 || month > 12) {
        return "month must be 01 to 12";
    }
    if (two_digits(value + 8) < 1 || two_digits(value + 8) > days_in_month(year, month)) {
        return "day is not a day of that month";
    }
    if (two_digits(value + 11) > 23) {
        return "hour must be 00 to 23";
    }
    if (two_digits(value + 14) > 59 || two_digits(value + 17) > 59) {
        return "minute and second must be 00 to 59";
    }
    while (*zone != 'Z' && *zone != '+' && *zone != '-') {
        zone++;
    }
    if (*zone != 'Z' && (two_digits(zone + 1) > 23 || two_digits(zone + 4) > 59)) {
        return "offset must be -23:59 to +23:59";
    }
    return NULL;
}

outbox_status
obx_check_timestamp_field(const char *field, const char *value, outbox_error *err)
{
    char quoted[160];
    const char *why;

    if (value == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "%s is required", field);
    }
    obx_quote_for_message(value, quoted, sizeof(quoted));
    if (!timestamp_shaped(value)) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "%s %s is not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS, an optional "
                        "fraction, then Z or +HH:MM)",
                        field, quoted);
    }
    why = timestamp_unreal(value);
    if (why != NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "%s %s is not a real date and time: %s", field, quoted,
                        why);
    }
    return OUTBOX_OK;
}

outbox_status
obx_format_timestamp_ms(int64_t unix_ms, char *out, outbox_error *err)
{
    time_t secs = (time_t)(unix_ms / 1000);
    struct tm tm;

    /* Year 10000 would break the fixed four-digit form. */
    if (unix_ms < 0 || unix_ms >= INT64_C(253402300800000) || gmtime_r(&secs, &tm) == NULL) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "occurred_at %lld ms is outside 1970-01-01 to 9999-12-31",
                        (long long)unix_ms);
    }
    /* The modulos cannot change in-range values; they let the compiler see the widths. */
    snprintf(out, 32, "%04u-%02u-%02uT%02u:%02u:%02u.%03uZ", (unsigned)(tm.tm_year + 1900) % 10000u,
             (unsigned)(tm.tm_mon + 1) % 100u, (unsigned)tm.tm_mday % 100u,
             (unsigned)tm.tm_hour % 100u, (unsigned)tm.tm_min % 100u, (unsigned)tm.tm_sec % 100u,
             (unsigned)(unix_ms % 1000));
    return OUTBOX_OK;
}
