/* SPDX-License-Identifier: MIT */
/*
 * logfmt.c - a printf for log lines that escapes every string it is given.
 *
 * The format is the code's own text and is copied as is; each %s argument
 * is escaped for where it lands (see logfmt.h). The other conversions are
 * numbers and go through snprintf one at a time.
 */
#include "logfmt.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/banned.h" /* last: poisons unsafe functions */

struct out {
    char *p;
    size_t cap;
    size_t len;
    int full;     /* something did not fit: write nothing more */
    int in_quote; /* inside a quoted value: keep a byte for its closing quote */
};

/* Appends `n` bytes whole or not at all, keeping room for a closing quote and the NUL. */
static int
put(struct out *o, const char *s, size_t n)
{
    size_t keep = o->in_quote ? 2 : 1;

    if (o->full || o->cap < keep || n > o->cap - keep - o->len) {
        o->full = 1;
        return 0;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
    o->p[o->len] = '\0';
    return 1;
}

static int
is_control(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

/* Appends byte `c` escaped as it is inside a quoted value. */
static void
put_escaped(struct out *o, unsigned char c)
{
    char esc[8];

    switch (c) {
    case '"':
        put(o, "\\\"", 2);
        return;
    case '\\':
        put(o, "\\\\", 2);
        return;
    case '\n':
        put(o, "\\n", 2);
        return;
    case '\r':
        put(o, "\\r", 2);
        return;
    case '\t':
        put(o, "\\t", 2);
        return;
    default:
        break;
    }
    if (is_control(c)) {
        snprintf(esc, sizeof(esc), "\\u%04x", c);
        put(o, esc, 6);
    } else {
        put(o, (const char *)&c, 1);
    }
}

/* True if `s[0..n)` must be quoted: in a value, also a space or nothing at all. */
static int
needs_quotes(const char *s, size_t n, int value)
{
    size_t i;

    if (value && n == 0) {
        return 1;
    }
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '=' || c == '"' || c == '\\' || is_control(c) || (value && c == ' ')) {
            return 1;
        }
    }
    return 0;
}

enum place { IN_MESSAGE, IN_VALUE, IN_QUOTES };

static void
put_string(struct out *o, const char *s, size_t n, enum place place)
{
    int quote = place != IN_QUOTES && needs_quotes(s, n, place == IN_VALUE);
    size_t i;

    if (!quote && place != IN_QUOTES) {
        put(o, s, n);
        return;
    }
    if (quote) {
        o->in_quote = 1; /* from the opening quote on, room is kept for the closing one */
        if (!put(o, "\"", 1)) {
            o->in_quote = 0;
            return;
        }
    }
    for (i = 0; i < n && !o->full; i++) {
        put_escaped(o, (unsigned char)s[i]);
    }
    if (quote) {
        int full = o->full;

        o->in_quote = 0;
        o->full = 0;
        put(o, "\"", 1); /* fits: put kept a byte for it */
        o->full = full;
    }
}

/* One parsed conversion: %[flags][width][.precision][length]conversion. */
struct spec {
    char flags[8];
    int width;     /* -1: none */
    int precision; /* -1: none */
    char length[3];
    char conv;
};

/* Parses the conversion after '%' at `f`; returns the text after it, or NULL. */
static const char *
parse_spec(const char *f, struct spec *sp, va_list *ap)
{
    size_t nf = 0;

    memset(sp, 0, sizeof(*sp));
    sp->width = -1;
    sp->precision = -1;
    while (*f != '\0' && strchr("-+ #0", *f) != NULL && nf + 1 < sizeof(sp->flags)) {
        sp->flags[nf++] = *f++;
    }
    if (*f == '*') {
        sp->width = va_arg(*ap, int);
        f++;
    } else {
        while (*f >= '0' && *f <= '9') {
            sp->width = (sp->width < 0 ? 0 : sp->width * 10) + (*f++ - '0');
        }
    }
    if (*f == '.') {
        f++;
        sp->precision = 0;
        if (*f == '*') {
            sp->precision = va_arg(*ap, int);
            f++;
        } else {
            while (*f >= '0' && *f <= '9') {
                sp->precision = sp->precision * 10 + (*f++ - '0');
            }
        }
    }
    if ((f[0] == 'h' && f[1] == 'h') || (f[0] == 'l' && f[1] == 'l')) {
        memcpy(sp->length, f, 2);
        f += 2;
    } else if (*f != '\0' && strchr("hlzjtL", *f) != NULL) {
        sp->length[0] = *f++;
    }
    if (*f == '\0') {
        return NULL;
    }
    sp->conv = *f++;
    return f;
}

/* The conversion again as a printf format of its own, with '*' resolved. */
static void
spec_format(const struct spec *sp, char *fmt, size_t cap)
{
    char width[16] = "", precision[16] = "";

    if (sp->width >= 0) {
        snprintf(width, sizeof(width), "%d", sp->width);
    }
    if (sp->precision >= 0) {
        snprintf(precision, sizeof(precision), ".%d", sp->precision);
    }
    snprintf(fmt, cap, "%%%s%s%s%s%c", sp->flags, width, precision, sp->length, sp->conv);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
/* Formats one number conversion, taking its argument by the type its length names. */
static void
put_number(struct out *o, const struct spec *sp, va_list *ap)
{
    char fmt[48], text[128];
    const char *l = sp->length;
    int is_signed = sp->conv == 'd' || sp->conv == 'i';

    spec_format(sp, fmt, sizeof(fmt));
    text[0] = '\0';
    if (strchr("eEfFgGaA", sp->conv) != NULL) {
        if (l[0] == 'L') {
            snprintf(text, sizeof(text), fmt, va_arg(*ap, long double));
        } else {
            snprintf(text, sizeof(text), fmt, va_arg(*ap, double));
        }
    } else if (sp->conv == 'p') {
        snprintf(text, sizeof(text), fmt, va_arg(*ap, void *));
    } else if (strcmp(l, "ll") == 0) {
        if (is_signed) {
            snprintf(text, sizeof(text), fmt, va_arg(*ap, long long));
        } else {
            snprintf(text, sizeof(text), fmt, va_arg(*ap, unsigned long long));
        }
    } else if (strcmp(l, "l") == 0) {
        if (is_signed) {
            snprintf(text, sizeof(text), fmt, va_arg(*ap, long));
        } else {
            snprintf(text, sizeof(text), fmt, va_arg(*ap, unsigned long));
        }
    } else if (strcmp(l, "z") == 0) {
        snprintf(text, sizeof(text), fmt, va_arg(*ap, size_t));
    } else if (strcmp(l, "j") == 0) {
        if (is_signed) {
            snprintf(text, sizeof(text), fmt, va_arg(*ap, intmax_t));
        } else {
            snprintf(text, sizeof(text), fmt, va_arg(*ap, uintmax_t));
        }
    } else if (strcmp(l, "t") == 0) {
        snprintf(text, sizeof(text), fmt, va_arg(*ap, ptrdiff_t));
    } else if (is_signed) {
        snprintf(text, sizeof(text), fmt, va_arg(*ap, int));
    } else {
        snprintf(text, sizeof(text), fmt, va_arg(*ap, unsigned int));
    }
    put(o, text, strlen(text));
}
#pragma GCC diagnostic pop

size_t
obx_logfmt_vformat(char *out, size_t cap, const char *fmt, va_list ap)
{
    struct out o = {out, cap, 0, 0, 0};
    int quoted = 0; /* inside a quoted part of the format itself */
    char prev = '\0';
    va_list args;

    if (cap == 0) {
        return 0;
    }
    out[0] = '\0';
    va_copy(args, ap);
    while (*fmt != '\0' && !o.full) {
        struct spec sp;
        const char *next;

        if (*fmt != '%' || fmt[1] == '%') {
            if (*fmt == '"') {
                quoted = !quoted;
                o.in_quote = quoted;
            }
            put(&o, fmt, 1);
            prev = *fmt;
            fmt += *fmt == '%' ? 2 : 1;
            continue;
        }
        next = parse_spec(fmt + 1, &sp, &args);
        if (next == NULL) {
            break;
        }
        if (sp.conv == 's' || sp.conv == 'c') {
            char c[1];
            const char *s;
            size_t n;

            if (sp.conv == 'c') {
                c[0] = (char)va_arg(args, int);
                s = c;
                n = 1;
            } else {
                s = va_arg(args, const char *);
                s = s != NULL ? s : "";
                n = sp.precision >= 0 ? strnlen(s, (size_t)sp.precision) : strlen(s);
            }
            put_string(&o, s, n, quoted ? IN_QUOTES : prev == '=' ? IN_VALUE : IN_MESSAGE);
        } else if (sp.conv == 'n') {
            break; /* never written through */
        } else {
            put_number(&o, &sp, &args);
        }
        prev = sp.conv;
        fmt = next;
    }
    va_end(args);
    if (o.in_quote) {
        /* Cut inside a quoted part of the format: close it with the byte kept for that. */
        o.in_quote = 0;
        o.full = 0;
        put(&o, "\"", 1);
    }
    return o.len;
}

size_t
obx_logfmt_format(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    size_t n;

    va_start(ap, fmt);
    n = obx_logfmt_vformat(out, cap, fmt, ap);
    va_end(ap);
    return n;
}

size_t
obx_logfmt_value(char *out, size_t cap, const char *value)
{
    struct out o = {out, cap, 0, 0, 0};

    if (cap == 0) {
        return 0;
    }
    out[0] = '\0';
    put_string(&o, value, strlen(value), IN_VALUE);
    return o.len;
}

int
obx_logfmt_has_key(const char *line, const char *key)
{
    size_t klen = strlen(key);
    const char *p = line;

    while (*p != '\0') {
        const char *start;

        while (*p == ' ') {
            p++;
        }
        start = p;
        /* A word: up to a space, or an '=' then its value. */
        while (*p != '\0' && *p != ' ' && *p != '=' && *p != '"') {
            p++;
        }
        if (*p == '=' && (size_t)(p - start) == klen && memcmp(start, key, klen) == 0) {
            return 1;
        }
        if (*p == '=') {
            p++;
        }
        if (*p == '"') {
            /* A quoted value (or message words): skip to its closing quote. */
            for (p++; *p != '\0' && *p != '"'; p++) {
                if (*p == '\\' && p[1] != '\0') {
                    p++;
                }
            }
            if (*p == '"') {
                p++;
            }
        }
        while (*p != '\0' && *p != ' ') {
            p++;
        }
    }
    return 0;
}
