/* SPDX-License-Identifier: MIT */
/*
 * envelope_scan.c - reads a stored envelope in one pass, building no tree.
 *
 * Every event is parsed again by the relay and by each consumer, and a
 * jansson tree per event (a dozen allocations, then a walk for the payload
 * rules) cost the relay about a third of a core. This scanner walks the
 * text once: it checks the JSON grammar and the payload rules, and slices
 * out the top-level members. It answers only "accepted" or "not sure".
 * Anything unusual (an escape in a top-level member, \u0000, an exponent,
 * a huge number, a duplicate or unknown key, nesting past the limit, bad
 * UTF-8) is "not sure", and the jansson path gives the verdict and its
 * message. So it may send valid envelopes the slow way, but must never
 * accept one the full parse refuses; tests/unit/test_envelope_scan.c holds
 * it to that.
 */
#include "envelope_scan.h"

#include <string.h>

#include "common/text.h"
#include "outbox/outbox.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/*
 * Past 300 digits a number could overflow a double, which the full parse
 * (integers read as reals) refuses; PostgreSQL never writes exponents.
 */
enum { MAX_NUMBER_CHARS = 300 };

struct scan {
    const char *p;
    const char *end;
};

static void
skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) {
        s->p++;
    }
}

/* Consumes `c` after optional whitespace. */
static int
expect(struct scan *s, char c)
{
    skip_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

static int
hex4(const char *p, unsigned *out)
{
    unsigned v = 0;

    for (int i = 0; i < 4; i++) {
        char c = p[i];

        v <<= 4;
        if (c >= '0' && c <= '9') {
            v |= (unsigned)(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            v |= (unsigned)(c - 'a' + 10);
        } else if (c >= 'A' && c <= 'F') {
            v |= (unsigned)(c - 'A' + 10);
        } else {
            return 0;
        }
    }
    *out = v;
    return 1;
}

/* A \u escape at `p` (after the backslash); returns its length, 0 if unsure. */
static size_t
unicode_escape(const char *p, const char *end)
{
    unsigned cp, low;

    if (end - p < 5 || !hex4(p + 1, &cp) || cp == 0 || (cp >= 0xdc00 && cp <= 0xdfff)) {
        return 0;
    }
    if (cp < 0xd800 || cp > 0xdbff) {
        return 5;
    }
    /* A high surrogate must be followed by its low half. */
    if (end - p < 11 || p[5] != '\\' || p[6] != 'u' || !hex4(p + 7, &low) || low < 0xdc00 ||
        low > 0xdfff) {
        return 0;
    }
    return 11;
}

/*
 * A string at s->p (its opening quote). `*start`/`*len` give the raw text
 * between the quotes; `*escaped` says whether it holds any escape.
 */
static int
scan_string(struct scan *s, const char **start, size_t *len, int *escaped)
{
    const char *p = s->p + 1;

    *start = p;
    *escaped = 0;
    while (p < s->end && *p != '"') {
        unsigned char c = (unsigned char)*p;

        if (c < 0x20) {
            return 0;
        }
        if (c != '\\') {
            p++;
            continue;
        }
        *escaped = 1;
        if (p + 1 >= s->end) {
            return 0;
        }
        if (p[1] == 'u') {
            size_t n = unicode_escape(p + 1, s->end);

            if (n == 0) {
                return 0;
            }
            p += 1 + n;
        } else if (p[1] != '\0' && strchr("\"\\/bfnrt", p[1]) != NULL) {
            p += 2;
        } else {
            return 0;
        }
    }
    if (p >= s->end) {
        return 0;
    }
    *len = (size_t)(p - *start);
    s->p = p + 1;
    /* Escapes are ASCII, so the raw bytes carry the string's UTF-8. */
    return obx_utf8_valid(*start, *len);
}

static int
digits(struct scan *s)
{
    const char *from = s->p;

    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        s->p++;
    }
    return s->p > from;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)? ; an exponent is left to the full parse. */
static int
scan_number(struct scan *s, const char **start, size_t *len)
{
    *start = s->p;
    if (s->p < s->end && *s->p == '-') {
        s->p++;
    }
    if (s->p < s->end && *s->p == '0') {
        s->p++;
    } else if (!digits(s)) {
        return 0;
    }
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!digits(s)) {
            return 0;
        }
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E' || (*s->p >= '0' && *s->p <= '9'))) {
        return 0;
    }
    *len = (size_t)(s->p - *start);
    return *len <= MAX_NUMBER_CHARS;
}

static int
scan_literal(struct scan *s, const char *word)
{
    size_t n = strlen(word);

    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) {
        return 0;
    }
    s->p += n;
    return 1;
}

static int scan_value(struct scan *s, int depth);

/* An object or array at s->p, `depth` deep (the payload object is 1). */
static int
scan_container(struct scan *s, int depth)
{
    char close = *s->p == '{' ? '}' : ']';
    int object = close == '}';

    if (depth > OUTBOX_MAX_PAYLOAD_DEPTH) {
        return 0;
    }
    s->p++;
    if (expect(s, close)) {
        return 1;
    }
    do {
        if (object) {
            const char *key;
            size_t key_len;
            int escaped;

            skip_ws(s);
            if (s->p >= s->end || *s->p != '"' || !scan_string(s, &key, &key_len, &escaped) ||
                !expect(s, ':')) {
                return 0;
            }
        }
        if (!scan_value(s, depth + 1)) {
            return 0;
        }
    } while (expect(s, ','));
    return expect(s, close);
}

/* Skips white space; 1 when a value can start here. */
static int
at_value(struct scan *s)
{
    skip_ws(s);
    return s->p < s->end;
}

static int
scan_value(struct scan *s, int depth)
{
    const char *start;
    size_t len;
    int escaped;

    if (!at_value(s)) {
        return 0;
    }
    switch (*s->p) {
    case '{':
    case '[':
        return scan_container(s, depth);
    case '"':
        return scan_string(s, &start, &len, &escaped);
    case 't':
        return scan_literal(s, "true");
    case 'f':
        return scan_literal(s, "false");
    case 'n':
        return scan_literal(s, "null");
    default:
        return scan_number(s, &start, &len);
    }
}

static const char *const member_names[OBX_ENVELOPE_MEMBERS] = {
    "id",           "event_type",  "aggregate_type", "aggregate_id", "tenant_id",     "occurred_at",
    "data_subject", "traceparent", "schema_version", "payload",      "aggregate_seq",
};

int
obx_envelope_seq_parse(const char *text, size_t len, long long *out)
{
    static const char max[] = "9223372036854775807";
    long long v = 0;

    if (text == NULL || len == 0 || len > sizeof(max) - 1 || text[0] == '0') {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9') {
            return 0;
        }
    }
    /* As many digits as the maximum: compare as text, so nothing overflows. */
    if (len == sizeof(max) - 1 && memcmp(text, max, len) > 0) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        v = v * 10 + (text[i] - '0');
    }
    *out = v;
    return 1;
}

static int
member_index(const char *key, size_t len)
{
    for (int i = 0; i < OBX_ENVELOPE_MEMBERS; i++) {
        if (strlen(member_names[i]) == len && memcmp(member_names[i], key, len) == 0) {
            return i;
        }
    }
    return -1;
}

/* One top-level member's value, at s->p. */
static int
scan_member(struct scan *s, int which, struct obx_envelope_slices *out)
{
    const char *start;
    size_t len;
    int escaped;

    if (!at_value(s)) {
        return 0;
    }
    switch (which) {
    case OBX_MEMBER_SCHEMA_VERSION:
        return scan_number(s, &start, &len) && len == 1 && *start == '1';
    case OBX_MEMBER_PAYLOAD:
        return *s->p == '{' && scan_container(s, 1);
    case OBX_MEMBER_AGGREGATE_SEQ: {
        long long seq;

        if (!scan_number(s, &start, &len) || !obx_envelope_seq_parse(start, len, &seq)) {
            return 0;
        }
        out->seq_text = start;
        out->seq_len = len;
        return 1;
    }
    default:
        if (*s->p != '"' || !scan_string(s, &start, &len, &escaped) || escaped) {
            return 0;
        }
        out->text[which] = start;
        out->len[which] = len;
        return 1;
    }
}

int
obx_envelope_scan(const char *json, size_t len, struct obx_envelope_slices *out)
{
    struct scan s = {json, json + len};
    unsigned seen = 0;
    const unsigned required = 1u << OBX_MEMBER_ID | 1u << OBX_MEMBER_EVENT_TYPE |
                              1u << OBX_MEMBER_AGGREGATE_TYPE | 1u << OBX_MEMBER_AGGREGATE_ID |
                              1u << OBX_MEMBER_OCCURRED_AT | 1u << OBX_MEMBER_SCHEMA_VERSION |
                              1u << OBX_MEMBER_PAYLOAD;

    memset(out, 0, sizeof(*out));
    if (!expect(&s, '{')) {
        return 0;
    }
    do {
        const char *key;
        size_t key_len;
        int escaped, which;

        skip_ws(&s);
        if (s.p >= s.end || *s.p != '"' || !scan_string(&s, &key, &key_len, &escaped) || escaped ||
            !expect(&s, ':')) {
            return 0;
        }
        which = member_index(key, key_len);
        if (which < 0 || (seen & 1u << which) != 0 || !scan_member(&s, which, out)) {
            return 0;
        }
        seen |= 1u << which;
    } while (expect(&s, ','));
    if (!expect(&s, '}')) {
        return 0;
    }
    skip_ws(&s);
    return s.p == s.end && (seen & required) == required;
}
