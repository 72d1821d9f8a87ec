/* SPDX-License-Identifier: MIT */
/*
 * test_logfmt.c - log values cannot forge fields or lines: every %s is
 * escaped for its place, numbers are formatted as printf would, and a cut
 * line still closes its quotes.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "support/logfmt.h"

TestSuite(logfmt, .timeout = 10);

#define HOSTILE "bad\" level=error relay=forged\nsecond line database=evil \\ end"

Test(logfmt, plain_words_are_written_as_they_are)
{
    char line[256];

    obx_logfmt_format(line, sizeof(line), "relay starting relay=%s schema=%s", "r1", "outbox");
    cr_assert_str_eq(line, "relay starting relay=r1 schema=outbox");
}

Test(logfmt, a_bare_value_with_a_space_or_equals_is_quoted)
{
    char line[256];

    obx_logfmt_format(line, sizeof(line), "x a=%s b=%s c=%s d=%s", "two words", "k=v", "",
                      "caf\xc3\xa9");
    cr_assert_str_eq(line, "x a=\"two words\" b=\"k=v\" c=\"\" d=caf\xc3\xa9");
}

Test(logfmt, quotes_backslashes_and_control_bytes_are_escaped)
{
    char line[256];

    obx_logfmt_format(line, sizeof(line), "x v=%s", "a\"b\\c\nd\re\tf\x01g\x7f");
    cr_assert_str_eq(line, "x v=\"a\\\"b\\\\c\\nd\\re\\tf\\u0001g\\u007f\"");
}

Test(logfmt, a_hostile_value_in_a_quoted_slot_stays_inside_its_quotes)
{
    char line[256];

    obx_logfmt_format(line, sizeof(line), "row quarantined relay=%s reason=\"%s\"", "r1", HOSTILE);
    cr_assert_str_eq(line,
                     "row quarantined relay=r1 reason=\"bad\\\" level=error relay=forged\\nsecond "
                     "line database=evil \\\\ end\"");
    cr_assert_null(strchr(line, '\n'));
    cr_assert(obx_logfmt_has_key(line, "relay"));
    cr_assert(obx_logfmt_has_key(line, "reason"));
    cr_assert_not(obx_logfmt_has_key(line, "level"));
    cr_assert_not(obx_logfmt_has_key(line, "database"));
}

Test(logfmt, a_hostile_bare_value_is_quoted)
{
    char line[256];

    obx_logfmt_format(line, sizeof(line), "x error=%s sqlstate=%s", HOSTILE, "22023");
    cr_assert_str_eq(line, "x error=\"bad\\\" level=error relay=forged\\nsecond line "
                           "database=evil \\\\ end\" sqlstate=22023");
    cr_assert_not(obx_logfmt_has_key(line, "level"));
    cr_assert_not(obx_logfmt_has_key(line, "relay"));
    cr_assert(obx_logfmt_has_key(line, "sqlstate"));
}

Test(logfmt, a_value_inside_a_quoted_part_of_the_format_is_escaped_without_quotes)
{
    char line[256];

    obx_logfmt_format(line, sizeof(line), "x fix=\"nats stream edit %s --subjects '%s'\"", "S",
                      "a\"b");
    cr_assert_str_eq(line, "x fix=\"nats stream edit S --subjects 'a\\\"b'\"");
}

Test(logfmt, message_words_keep_their_spaces_but_not_an_equals_sign)
{
    char line[256];

    obx_logfmt_format(line, sizeof(line), "%s url=%s", "nats connection closed, will reopen",
                      "nats://h:4222");
    cr_assert_str_eq(line, "nats connection closed, will reopen url=nats://h:4222");
    obx_logfmt_format(line, sizeof(line), "%s url=%s", "x relay=forged", "u");
    cr_assert_str_eq(line, "\"x relay=forged\" url=u");
    cr_assert_not(obx_logfmt_has_key(line, "relay"));
}

Test(logfmt, numbers_are_formatted_as_printf_formats_them)
{
    char line[256];

    obx_logfmt_format(line, sizeof(line),
                      "n a=%d b=%lld c=%zu d=%llu e=%.2f f=%ld g=%x h=%% i=%.*s", -3, -9000000000LL,
                      (size_t)7, 18446744073709551615ULL, 1.5, -4L, 255u, 3, "abcdef");
    cr_assert_str_eq(line,
                     "n a=-3 b=-9000000000 c=7 d=18446744073709551615 e=1.50 f=-4 g=ff h=% i=abc");
}

Test(logfmt, a_null_string_is_an_empty_value)
{
    char line[64];
    const char *volatile nothing = NULL; /* hidden from the compiler's format check */

    obx_logfmt_format(line, sizeof(line), "x v=%s", nothing);
    cr_assert_str_eq(line, "x v=\"\"");
}

Test(logfmt, a_cut_line_still_closes_its_quoted_value)
{
    char line[24];
    size_t n;

    n = obx_logfmt_format(line, sizeof(line), "x v=%s w=1", "a b c d e f g h i j k l m n");
    cr_assert_eq(n, strlen(line));
    cr_assert_lt(n, sizeof(line));
    cr_assert_eq(line[n - 1], '"', "cut line: %s", line);
    cr_assert_str_eq(line, "x v=\"a b c d e f g h i\"");

    /* Not inside an escape either: \" is written whole or not at all. */
    n = obx_logfmt_format(line, sizeof(line), "x v=\"%s\"", "\"\"\"\"\"\"\"\"\"\"\"\"\"");
    cr_assert_eq(line[n - 1], '"');
    cr_assert_neq(line[n - 2], '\\', "cut line: %s", line);
}

Test(logfmt, a_value_alone)
{
    char v[64];

    cr_assert_eq(obx_logfmt_value(v, sizeof(v), "plain"), 5);
    cr_assert_str_eq(v, "plain");
    obx_logfmt_value(v, sizeof(v), "two\nlines");
    cr_assert_str_eq(v, "\"two\\nlines\"");
}

Test(logfmt, a_key_is_found_only_outside_quoted_values)
{
    cr_assert(obx_logfmt_has_key("fleet relay failed database=d1 error=x", "database"));
    cr_assert(obx_logfmt_has_key("database=d1", "database"));
    cr_assert_not(obx_logfmt_has_key("relay failed error=\"a database=evil\"", "database"));
    cr_assert_not(obx_logfmt_has_key("relay failed error=\"a \\\" database=evil\"", "database"));
    cr_assert_not(obx_logfmt_has_key("relay failed mydatabase=x", "database"));
    cr_assert_not(obx_logfmt_has_key("relay failed database", "database"));
}
