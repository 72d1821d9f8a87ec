/* SPDX-License-Identifier: MIT */
/*
 * text.c - UTF-8 checks and JSON string quoting.
 */
#include "text.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "banned.h" /* last: poisons unsafe functions */

/* Length of the sequence led by `c`, or 0 if `c` cannot lead one. */
static size_t
utf8_sequence_len(unsigned char c)
{
    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        return 2;
    }
    if (c >= 0xe0 && c <= 0xef) {
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        return 4;
    }
    return 0;
}

int
obx_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    while (i < len) {
        size_t n = utf8_sequence_len(p[i]);
        uint32_t cp;

        if (n == 0 || i + n > len) {
            return 0;
        }
        if (n == 1) {
            i++;
            continue;
        }
        cp = p[i] & (0xff >> (n + 1));
        for (size_t k = 1; k < n; k++) {
            if ((p[i + k] & 0xc0) != 0x80) {
                return 0;
            }
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        /* Overlong forms, surrogates and values past U+10FFFF. */
        if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff)) {
            return 0;
        }
        i += n;
    }
    return 1;
}

int
obx_has_control(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c < 0x20 || c == 0x7f) {
            return 1;
        }
    }
    return 0;
}

/* PostgreSQL's escape_json(): short escapes where JSON has them, else \u00xx. */
void
obx_json_quote(struct obx_buf *b, const char *s, size_t len)
{
    char esc[8];

    obx_buf_append(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *short_esc = NULL;

        switch (c) {
        case '\b':
            short_esc = "\\b";
            break;
        case '\f':
            short_esc = "\\f";
            break;
        case '\n':
            short_esc = "\\n";
            break;
        case '\r':
            short_esc = "\\r";
            break;
        case '\t':
            short_esc = "\\t";
            break;
        case '"':
            short_esc = "\\\"";
            break;
        case '\\':
            short_esc = "\\\\";
            break;
        default:
            break;
        }
        if (short_esc != NULL) {
            obx_buf_append(b, short_esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            obx_buf_append(b, esc, 6);
        } else {
            obx_buf_append(b, &s[i], 1);
        }
    }
    obx_buf_append(b, "\"", 1);
}

void
obx_quote_for_message(const char *s, char *out, size_t cap)
{
    enum { SHOWN_BYTES = 120 };
    struct obx_buf b;
    size_t len = strlen(s);
    int cut = len > SHOWN_BYTES;

    if (cut) {
        /* Back off to a character boundary so the quote stays valid UTF-8. */
        len = SHOWN_BYTES;
        while (len > 0 && ((unsigned char)s[len] & 0xc0) == 0x80) {
            len--;
        }
    }
    obx_buf_init(&b);
    obx_json_quote(&b, s, len);
    if (cut) {
        obx_buf_append_str(&b, "...");
    }
    snprintf(out, cap, "%s", obx_buf_failed(&b) || b.data == NULL ? "\"?\"" : b.data);
    obx_buf_fini(&b);
}
