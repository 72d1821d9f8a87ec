/* SPDX-License-Identifier: MIT */
/*
 * test_fields.c - scalar envelope fields, text helpers and timestamps.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "common/buf.h"
#include "common/text.h"
#include "envelope/fields.h"

Test(fields, lower_cases_a_canonical_uuid)
{
    char out[OBX_UUID_TEXT_LEN + 1];

    cr_assert_eq(
        obx_check_uuid_field("aggregate_id", "0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B", out, NULL),
        OUTBOX_OK);
    cr_assert_str_eq(out, "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b");
}

Test(fields, traceparent_needs_version_00_lower_hex_and_non_zero_ids)
{
    cr_assert_eq(
        obx_check_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", NULL),
        OUTBOX_OK);
    cr_assert_eq(obx_check_traceparent(NULL, NULL), OUTBOX_OK);
    cr_assert_eq(
        obx_check_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g", NULL),
        OUTBOX_EINVAL);
    cr_assert_eq(
        obx_check_traceparent("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", NULL),
        OUTBOX_EINVAL);
    cr_assert_eq(
        obx_check_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x", NULL),
        OUTBOX_EINVAL);
}

Test(fields, labels_refuse_invalid_utf8)
{
    outbox_error err = {0};

    cr_assert_eq(obx_check_label_field("tenant_id", "ac\xffme", 128, &err), OUTBOX_EINVAL);
    cr_assert_str_eq(err.message, "tenant_id is not valid UTF-8");
}

Test(fields, timestamps_format_as_rfc3339_utc_with_milliseconds)
{
    char out[32];

    cr_assert_eq(obx_format_timestamp_ms(INT64_C(1795340516123), out, NULL), OUTBOX_OK);
    cr_assert_str_eq(out, "2026-11-22T09:41:56.123Z");
    cr_assert_eq(obx_check_timestamp_field("t", out, NULL), OUTBOX_OK);
    cr_assert_eq(obx_check_timestamp_field("t", "2026-11-29T09:41:56+02:00", NULL), OUTBOX_OK);
    cr_assert_eq(obx_check_timestamp_field("t", "2026-11-29T09:41:56Z", NULL), OUTBOX_OK);
    cr_assert_eq(obx_check_timestamp_field("t", "2026-11-29 09:41:56Z", NULL), OUTBOX_EINVAL);
    cr_assert_eq(obx_check_timestamp_field("t", "2026-11-29T09:41:56.Z", NULL), OUTBOX_EINVAL);
    cr_assert_eq(obx_check_timestamp_field("t", "2026-11-29T09:41:56", NULL), OUTBOX_EINVAL);
    cr_assert_eq(obx_format_timestamp_ms(-1, out, NULL), OUTBOX_EINVAL);
}

/* Each `bad` has the digits' pattern but names no instant; `why` is in the message. */
static void
assert_unreal(const char *bad, const char *why)
{
    outbox_error err = {0};

    cr_assert_eq(obx_check_timestamp_field("occurred_at", bad, &err), OUTBOX_EINVAL, "took %s",
                 bad);
    cr_assert(strstr(err.message, "occurred_at \"") == err.message, "%s", err.message);
    cr_assert(strstr(err.message, bad) != NULL, "value not named: %s", err.message);
    cr_assert(strstr(err.message, why) != NULL, "%s lacks %s", err.message, why);
}

Test(fields, timestamps_must_name_a_real_day_hour_and_offset)
{
    assert_unreal("2026-02-30T10:00:00Z", "day is not a day of that month");
    assert_unreal("2026-02-29T10:00:00Z", "day is not a day of that month");
    assert_unreal("1900-02-29T10:00:00Z", "day is not a day of that month");
    assert_unreal("2026-04-31T10:00:00Z", "day is not a day of that month");
    assert_unreal("2026-01-00T10:00:00Z", "day is not a day of that month");
    assert_unreal("2026-13-10T10:00:00Z", "month must be 01 to 12");
    assert_unreal("2026-00-10T10:00:00Z", "month must be 01 to 12");
    assert_unreal("2026-02-10T24:00:00Z", "hour must be 00 to 23");
    assert_unreal("2026-02-10T10:60:00Z", "minute and second must be 00 to 59");
    assert_unreal("2016-12-31T23:59:60Z", "minute and second must be 00 to 59");
    assert_unreal("2026-02-10T10:00:00+99:99", "offset must be -23:59 to +23:59");
    assert_unreal("2026-02-10T10:00:00.5-24:00", "offset must be -23:59 to +23:59");
    assert_unreal("2026-02-10T10:00:00+01:60", "offset must be -23:59 to +23:59");

    cr_assert_eq(obx_check_timestamp_field("t", "2024-02-29T23:59:59.999999999-23:59", NULL),
                 OUTBOX_OK);
    cr_assert_eq(obx_check_timestamp_field("t", "2000-02-29T00:00:00+23:59", NULL), OUTBOX_OK);
    cr_assert_eq(obx_check_timestamp_field("t", "2026-12-31T00:00:00Z", NULL), OUTBOX_OK);
    cr_assert_eq(obx_check_timestamp_field("t", "0001-01-01T00:00:00Z", NULL), OUTBOX_OK);
}

Test(text, utf8_check_refuses_overlongs_surrogates_and_truncation)
{
    cr_assert(obx_utf8_valid("Amélie 🎬", strlen("Amélie 🎬")));
    cr_assert(!obx_utf8_valid("\xc0\xaf", 2));         /* overlong '/' */
    cr_assert(!obx_utf8_valid("\xed\xa0\x80", 3));     /* surrogate D800 */
    cr_assert(!obx_utf8_valid("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
    cr_assert(!obx_utf8_valid("\xe2\x82", 2));         /* cut short */
}

Test(text, json_quote_escapes_like_postgresql)
{
    struct obx_buf b;

    obx_buf_init(&b);
    obx_json_quote(&b, "a\"b\\c\n\x01/é", strlen("a\"b\\c\n\x01/é"));
    cr_assert_str_eq(b.data, "\"a\\\"b\\\\c\\n\\u0001/é\"");
    obx_buf_fini(&b);
}

Test(text, message_quotes_cut_long_values_on_a_character_boundary)
{
    char value[300], out[200];

    memset(value, 'x', sizeof(value) - 1);
    value[sizeof(value) - 1] = '\0';
    memcpy(value + 119, "é", 2);
    obx_quote_for_message(value, out, sizeof(out));
    cr_assert(obx_utf8_valid(out, strlen(out)), "%s", out);
    cr_assert(strstr(out, "...") != NULL);
}
