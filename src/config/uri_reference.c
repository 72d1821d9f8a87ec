/* SPDX-License-Identifier: MIT */
/*
 * uri_reference.c - RFC 3986's URI-reference grammar, checked without I/O.
 *
 * Two passes. The first looks at each byte alone: only the ASCII letters,
 * digits and the 18 delimiters and 4 unreserved marks RFC 3986 names may
 * appear, and a '%' must start a percent-encoding. The second splits the
 * reference as section 3 does (scheme, authority, path, query, fragment)
 * and checks what each part may hold beyond those bytes: where '[' and ']'
 * may stand, that a port is digits, that a relative path does not begin
 * with a segment holding ':' (it would read as a scheme).
 */
#include "uri_reference.h"

#include <arpa/inet.h>
#include <stddef.h>
#include <string.h>

#include "common/error.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static int
is_alpha(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static int
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int
is_hex(char c)
{
    return is_digit(c) || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
}

/* unreserved (RFC 3986 2.3) or sub-delims (2.2). */
static int
is_unreserved_or_sub_delim(char c)
{
    return is_alpha(c) || is_digit(c) || (c != '\0' && strchr("-._~!$&'()*+,;=", c) != NULL);
}

/* Every byte RFC 3986 allows anywhere: unreserved, sub-delims, gen-delims, '%'. */
static int
is_uri_byte(char c)
{
    return is_unreserved_or_sub_delim(c) || (c != '\0' && strchr(":/?#[]@%", c) != NULL);
}

/* The first pass: bytes and percent-encodings. */
static outbox_status
check_bytes(const char *text, outbox_error *err)
{
    for (size_t i = 0; text[i] != '\0'; i++) {
        unsigned char c = (unsigned char)text[i];

        if (c >= 0x80) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "byte %zu (0x%02x) is not ASCII; percent-encode it (%%%02X)", i + 1, c,
                            c);
        }
        if (c <= ' ' || c == 0x7f) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "byte %zu is a blank or control character; percent-encode it "
                            "(%%%02X)",
                            i + 1, c);
        }
        if (!is_uri_byte((char)c)) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "byte %zu '%c' is not allowed in a URI; percent-encode it (%%%02X)",
                            i + 1, c, c);
        }
        if (c == '%' && !(is_hex(text[i + 1]) && is_hex(text[i + 2]))) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "byte %zu '%%' does not start a percent-encoding (%% and two hex "
                            "digits)",
                            i + 1);
        }
    }
    return OUTBOX_OK;
}

/* The offset of the first '[' or ']' in text[from, to), or `to`. */
static size_t
find_bracket(const char *text, size_t from, size_t to)
{
    while (from < to && text[from] != '[' && text[from] != ']') {
        from++;
    }
    return from;
}

/* No '[' or ']' in text[from, to): they only enclose an IP literal host. */
static outbox_status
check_no_brackets(const char *text, size_t from, size_t to, const char *part, outbox_error *err)
{
    size_t at = find_bracket(text, from, to);

    if (at < to) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "byte %zu '%c' in the %s: '[' and ']' may only enclose an IPv6 host",
                        at + 1, text[at], part);
    }
    return OUTBOX_OK;
}

/* An IP-literal's inside, text[from, to): an IPv6 address or "v" 1*HEX "." 1*(...). */
static int
ip_literal_valid(const char *text, size_t from, size_t to)
{
    char address[64];
    unsigned char bytes[16];
    size_t i = from + 1;

    if (from < to && (text[from] == 'v' || text[from] == 'V')) {
        while (i < to && is_hex(text[i])) {
            i++;
        }
        if (i == from + 1 || i >= to || text[i] != '.' || i + 1 == to) {
            return 0;
        }
        for (i++; i < to; i++) {
            if (!is_unreserved_or_sub_delim(text[i]) && text[i] != ':') {
                return 0;
            }
        }
        return 1;
    }
    if (to - from >= sizeof(address)) {
        return 0;
    }
    memcpy(address, text + from, to - from);
    address[to - from] = '\0';
    return inet_pton(AF_INET6, address, bytes) == 1;
}

/* The authority, text[from, to): [ userinfo "@" ] host [ ":" port ]. */
static outbox_status
check_authority(const char *text, size_t from, size_t to, outbox_error *err)
{
    size_t host = from, colon;
    outbox_status st;

    for (size_t i = from; i < to; i++) {
        if (text[i] == '@') {
            host = i + 1;
        }
    }
    st = check_no_brackets(text, from, host, "user information", err);
    if (st != OUTBOX_OK) {
        return st;
    }
    if (host < to && text[host] == '[') {
        size_t close = host;

        while (close < to && text[close] != ']') {
            close++;
        }
        if (close == to || !ip_literal_valid(text, host + 1, close)) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "the host at byte %zu is not an IPv6 address in '[' and ']'", host + 1);
        }
        colon = close + 1;
        if (colon < to && text[colon] != ':') {
            return obx_fail(err, OUTBOX_EINVAL, "byte %zu: only ':' and a port may follow ']'",
                            colon + 1);
        }
    } else {
        colon = host;
        while (colon < to && text[colon] != ':') {
            colon++;
        }
        st = check_no_brackets(text, host, colon, "host", err);
        if (st != OUTBOX_OK) {
            return st;
        }
    }
    for (size_t i = colon + 1; i < to; i++) {
        if (!is_digit(text[i])) {
            return obx_fail(err, OUTBOX_EINVAL, "byte %zu '%c': a port is digits only", i + 1,
                            text[i]);
        }
    }
    return OUTBOX_OK;
}

/* The length of a scheme ending in ':' at the start of text[0, to), or 0 when there is none. */
static size_t
scheme_length(const char *text, size_t to)
{
    size_t i = 1;

    if (to == 0 || !is_alpha(text[0])) {
        return 0;
    }
    while (i < to && (is_alpha(text[i]) || is_digit(text[i]) || text[i] == '+' || text[i] == '-' ||
                      text[i] == '.')) {
        i++;
    }
    return i < to && text[i] == ':' ? i : 0;
}

/* The second pass, on text whose bytes passed the first: the parts of section 3. */
static outbox_status
check_parts(const char *text, outbox_error *err)
{
    size_t len = strlen(text);
    size_t fragment = strcspn(text, "#");
    size_t query = strcspn(text, "?#");
    size_t start = scheme_length(text, query), path;
    size_t first_segment;
    outbox_status st;

    st = check_no_brackets(text, fragment, len, "fragment", err);
    if (st == OUTBOX_OK && fragment < len && strchr(text + fragment + 1, '#') != NULL) {
        st = obx_fail(err, OUTBOX_EINVAL, "byte %zu '#': a fragment cannot hold another '#'",
                      (size_t)(strchr(text + fragment + 1, '#') - text) + 1);
    }
    if (st == OUTBOX_OK) {
        st = check_no_brackets(text, query, fragment, "query", err);
    }
    if (st != OUTBOX_OK) {
        return st;
    }
    if (start > 0) {
        start++; /* past the scheme's ':' */
    }
    path = start;
    if (query - start >= 2 && text[start] == '/' && text[start + 1] == '/') {
        path = start + 2 + strcspn(text + start + 2, "/?#");
        st = check_authority(text, start + 2, path, err);
        if (st != OUTBOX_OK) {
            return st;
        }
    }
    first_segment = path + strcspn(text + path, "/?#");
    if (start == 0 && path == 0 && memchr(text, ':', first_segment) != NULL) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "\"%.*s\" is not a scheme (a letter, then letters, digits, '+', '-' or "
                        "'.'), and a relative path cannot begin with a segment that holds ':'",
                        (int)(strcspn(text, ":") > 60 ? 60 : strcspn(text, ":")), text);
    }
    return check_no_brackets(text, path, query, "path", err);
}

outbox_status
obx_uri_reference_check(const char *text, outbox_error *err)
{
    outbox_status st = check_bytes(text, err);

    return st == OUTBOX_OK ? check_parts(text, err) : st;
}
