/* SPDX-License-Identifier: MIT */
/*
 * test_uri_reference.c - RFC 3986's URI-reference grammar: what CloudEvents
 * SDKs take as a source is taken, what they refuse is refused with the
 * byte that breaks it.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "config/uri_reference.h"

static void
assert_taken(const char *text)
{
    outbox_error err = {0};

    cr_expect_eq(obx_uri_reference_check(text, &err), OUTBOX_OK, "\"%s\" refused: %s", text,
                 err.message);
}

static void
assert_refused(const char *text, const char *why)
{
    outbox_error err = {0};

    cr_expect_eq(obx_uri_reference_check(text, &err), OUTBOX_EINVAL, "\"%s\" taken", text);
    cr_expect(strstr(err.message, why) != NULL, "\"%s\": \"%s\" lacks \"%s\"", text, err.message,
              why);
}

Test(uri_reference, absolute_and_relative_references_are_taken)
{
    assert_taken("pgoutbox");
    assert_taken("");
    assert_taken("https://example.com/orders?x=1#top");
    assert_taken("https://user:pw@example.com:8443/a/b;c=d");
    assert_taken("https://example.com:/a");
    assert_taken("urn:example:orders");
    assert_taken("mailto:ops@example.com");
    assert_taken("//example.com/orders");
    assert_taken("/orders/eu-1");
    assert_taken("./a:b");
    assert_taken("orders/a:b");
    assert_taken("orders%20eu");
    assert_taken("http://[::1]:4222/x");
    assert_taken("http://[2001:db8::7]");
    assert_taken("http://[::ffff:192.0.2.1]/");
    assert_taken("http://[v7.fe80::a+b]/");
    assert_taken("?q=a/b?c");
    assert_taken("#frag/?x");
    assert_taken("a+b-c.d:rest");
    assert_taken("svc:!$&'()*+,;=~_");
}

Test(uri_reference, what_breaks_the_grammar_is_refused_naming_the_byte)
{
    assert_refused("not a uri", "byte 4 is a blank or control character");
    assert_refused("caf\xc3\xa9", "byte 4 (0xc3) is not ASCII; percent-encode it (%C3)");
    assert_refused("a\tb", "byte 2 is a blank or control character");
    assert_refused("orders{eu}", "byte 7 '{' is not allowed");
    assert_refused("a\"b", "byte 2 '\"' is not allowed");
    assert_refused("a\\b", "byte 2 '\\' is not allowed");
    assert_refused("a|b", "byte 2 '|' is not allowed");
    assert_refused("a^b", "byte 2 '^' is not allowed");
    assert_refused("a`b", "byte 2 '`' is not allowed");
    assert_refused("a<b>", "byte 2 '<' is not allowed");
    assert_refused("50%", "byte 3 '%' does not start a percent-encoding");
    assert_refused("a%zz", "byte 2 '%' does not start a percent-encoding");
    assert_refused("a%4", "byte 2 '%' does not start a percent-encoding");
    assert_refused("a:b:c[1]", "byte 6 '[' in the path");
    assert_refused("a/b]", "byte 4 ']' in the path");
    assert_refused("a?x=[1]", "byte 5 '[' in the query");
    assert_refused("a#x[1]", "in the fragment");
    assert_refused("a#b#c", "byte 4 '#': a fragment cannot hold another '#'");
    assert_refused("1orders:eu", "\"1orders\" is not a scheme");
    assert_refused("or_ders:eu", "\"or_ders\" is not a scheme");
    assert_refused(":orders", "is not a scheme");
    assert_refused("http://[::1/x", "is not an IPv6 address");
    assert_refused("http://[::g]/x", "is not an IPv6 address");
    assert_refused("http://[::1]x/", "only ':' and a port may follow ']'");
    assert_refused("http://[v7]/", "is not an IPv6 address");
    assert_refused("http://example.com:80a/", "byte 22 'a': a port is digits only");
    assert_refused("http://a:b:80/", "a port is digits only");
    assert_refused("http://ex[a]mple.com/", "in the host");
    assert_refused("http://u[1]@host/", "in the user information");
}
