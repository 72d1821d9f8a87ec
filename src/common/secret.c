/* SPDX-License-Identifier: MIT */
/*
 * secret.c - masking secrets in text we print (see secret.h).
 *
 * Masking errs on the side of hiding: a value is cut at the first blank,
 * and a URL's user information runs to its last '@', so a password with
 * an unescaped '@' is hidden whole rather than shown in part.
 */
#include "secret.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "text.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define MASK "***"

/* Keys whose value is a secret, in libpq's key=value words or a URL's query. */
static const char *const secret_keys[] = {"sslpassword", "password", "token", "secret"};

/* A bounded writer: keeps what fits, always terminated. */
struct sink {
    char *p;
    size_t cap, len;
};

static void
put(struct sink *o, const char *s, size_t n)
{
    while (n-- > 0 && o->len + 1 < o->cap) {
        o->p[o->len++] = *s++;
    }
    o->p[o->len] = '\0';
}

static void
put_str(struct sink *o, const char *s)
{
    put(o, s, strlen(s));
}

/* 1 if the scheme ending at `text + i` ("...://") is postgres or postgresql. */
static int
scheme_is_postgres(const char *text, size_t i)
{
    size_t start = i;

    while (start > 0 && (isalnum((unsigned char)text[start - 1]) || text[start - 1] == '+' ||
                         text[start - 1] == '-' || text[start - 1] == '.')) {
        start--;
    }
    return (i - start == 8 && strncasecmp(text + start, "postgres", 8) == 0) ||
           (i - start == 10 && strncasecmp(text + start, "postgresql", 10) == 0);
}

/* At "://": the user information masked; bytes of `text` used, 0 if there is none. */
static size_t
mask_userinfo(const char *text, size_t i, struct sink *o)
{
    const char *info = text + i + 3, *at = NULL, *colon;
    size_t j;

    for (j = 0; info[j] != '\0' && strchr("/ ,\"'?#\t\r\n", info[j]) == NULL; j++) {
        if (info[j] == '@') {
            at = info + j;
        }
    }
    if (at == NULL) {
        return 0;
    }
    put_str(o, "://");
    colon = memchr(info, ':', (size_t)(at - info));
    if (colon != NULL) {
        put(o, info, (size_t)(colon - info) + 1);
        put_str(o, MASK "@");
    } else if (scheme_is_postgres(text, i)) {
        put(o, info, (size_t)(at - info) + 1); /* a user name alone */
    } else {
        put_str(o, MASK "@"); /* nats://TOKEN@host */
    }
    return (size_t)(at + 1 - (text + i));
}

/* Length of a 'quoted' libpq value at `v` (backslash escapes), closing quote included. */
static size_t
quoted_len(const char *v)
{
    size_t j = 1;

    while (v[j] != '\0' && v[j] != '\'') {
        j += v[j] == '\\' && v[j + 1] != '\0' ? 2 : 1;
    }
    return v[j] == '\'' ? j + 1 : j;
}

/* At a key=value whose key names a secret: key=***; bytes used, 0 if none. */
static size_t
mask_keyword(const char *text, size_t i, struct sink *o)
{
    char before = i > 0 ? text[i - 1] : ' ';
    int query = before == '?' || before == '&';
    size_t key_len = 0, j;

    if (!(query || isspace((unsigned char)before) || strchr("\"',;({", before) != NULL)) {
        return 0;
    }
    for (size_t k = 0; k < sizeof(secret_keys) / sizeof(secret_keys[0]) && key_len == 0; k++) {
        if (strncasecmp(text + i, secret_keys[k], strlen(secret_keys[k])) == 0) {
            key_len = strlen(secret_keys[k]);
        }
    }
    j = i + key_len;
    while (key_len > 0 && (text[j] == ' ' || text[j] == '\t')) {
        j++;
    }
    if (key_len == 0 || text[j] != '=') {
        return 0;
    }
    for (j++; text[j] == ' ' || text[j] == '\t'; j++) {
    }
    put(o, text + i, key_len);
    put_str(o, "=" MASK);
    if (text[j] == '\'') {
        return j + quoted_len(text + j) - i;
    }
    while (text[j] != '\0' && !isspace((unsigned char)text[j]) &&
           !(query && (text[j] == '&' || text[j] == '#'))) {
        j++;
    }
    return j - i;
}

/* At a word that is an nkey seed or a JWT: ***; bytes used, 0 if neither. */
static size_t
mask_credential(const char *text, size_t i, struct sink *o)
{
    const char *w = text + i;
    size_t j = 0, dots = 0;

    if (i > 0 && (isalnum((unsigned char)text[i - 1]) || text[i - 1] == '_')) {
        return 0;
    }
    if (w[0] == 'S' && w[1] != '\0' && strchr("UAONCPX", w[1]) != NULL) {
        for (j = 2; j < 58 && w[j] != '\0' &&
                    (isupper((unsigned char)w[j]) || (w[j] >= '2' && w[j] <= '7'));
             j++) {
        }
        if (j == 58 && !isalnum((unsigned char)w[j])) {
            put_str(o, MASK);
            return j;
        }
        return 0;
    }
    if (strncmp(w, "eyJ", 3) != 0) {
        return 0;
    }
    for (j = 0; isalnum((unsigned char)w[j]) || w[j] == '-' || w[j] == '_' || w[j] == '.'; j++) {
        dots += w[j] == '.';
    }
    if (dots < 2 || j < 20) {
        return 0;
    }
    put_str(o, MASK);
    return j;
}

void
obx_mask_secrets(const char *text, char *out, size_t cap)
{
    struct sink o = {.p = out, .cap = cap};
    size_t i = 0;

    if (cap == 0) {
        return;
    }
    out[0] = '\0';
    while (text != NULL && text[i] != '\0' && o.len + 1 < cap) {
        size_t used = strncmp(text + i, "://", 3) == 0 ? mask_userinfo(text, i, &o) : 0;

        if (used == 0) {
            used = mask_keyword(text, i, &o);
        }
        if (used == 0) {
            used = mask_credential(text, i, &o);
        }
        if (used == 0) {
            put(&o, text + i, 1);
            used = 1;
        }
        i += used;
    }
}

/* A copy of `text` masked, on the heap (masking grows a text by a few bytes at most). */
static char *
masked_copy(const char *text)
{
    size_t cap = strlen(text) * 2 + 16;
    char *copy = malloc(cap);

    if (copy != NULL) {
        obx_mask_secrets(text, copy, cap);
    }
    return copy;
}

/* 1 if `hay` holds the `len` bytes at `needle`. */
static int
holds(const char *hay, const char *needle, size_t len)
{
    for (; *hay != '\0'; hay++) {
        if (strncmp(hay, needle, len) == 0) {
            return 1;
        }
    }
    return len == 0;
}

static void
put_escaped(struct sink *o, const char *s, size_t n)
{
    char esc[8];

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c >= 0x20 && c != 0x7f) {
            put(o, s + i, 1);
            continue;
        }
        snprintf(esc, sizeof(esc),
                 c == '\n'   ? "\\n"
                 : c == '\r' ? "\\r"
                 : c == '\t' ? "\\t"
                             : "\\x%02x",
                 c);
        put_str(o, esc);
    }
}

void
obx_mask_echo(const char *message, const char *input, char *out, size_t cap)
{
    char *msg = masked_copy(message != NULL ? message : "");
    char *in = masked_copy(input != NULL ? input : "");
    struct sink o = {.p = out, .cap = cap};

    if (cap == 0) {
        free(msg);
        free(in);
        return;
    }
    out[0] = '\0';
    for (const char *p = msg; p != NULL && in != NULL && *p != '\0';) {
        const char *close = *p == '"' ? strchr(p + 1, '"') : NULL;
        size_t len = close != NULL ? (size_t)(close - p - 1) : 0;

        if (close == NULL) {
            put_escaped(&o, p++, 1);
            continue;
        }
        /* Shown by the input but not by the input masked: a secret, or part of one. */
        if (len > 0 && input != NULL && holds(input, p + 1, len) && !holds(in, p + 1, len)) {
            put_str(&o, "\"" MASK "\"");
        } else {
            put_escaped(&o, p, len + 2);
        }
        p = close + 1;
    }
    if (msg == NULL || in == NULL) {
        snprintf(out, cap, "(message hidden: out of memory)");
    }
    free(msg);
    free(in);
}

/*
 * 1 if `masked` still holds a secret key without key=*** after it:
 * "password s3cret", a conninfo libpq could not parse, where what follows
 * the key may well be the password.
 */
static int
names_a_secret(const char *masked)
{
    for (size_t i = 0; masked[i] != '\0'; i++) {
        char before = i > 0 ? masked[i - 1] : ' ';
        size_t j = i;

        if (!(isspace((unsigned char)before) || strchr("\"',;({?&", before) != NULL)) {
            continue;
        }
        for (size_t k = 0; k < sizeof(secret_keys) / sizeof(secret_keys[0]) && j == i; k++) {
            if (strncasecmp(masked + i, secret_keys[k], strlen(secret_keys[k])) == 0) {
                j = i + strlen(secret_keys[k]);
            }
        }
        while (j > i && (masked[j] == ' ' || masked[j] == '\t')) {
            j++;
        }
        if (j > i && strncmp(masked + j, "=" MASK, 4) != 0) {
            return 1;
        }
    }
    return 0;
}

void
obx_mask_quote(const char *value, char *out, size_t cap)
{
    char *masked = masked_copy(value != NULL ? value : "");

    obx_quote_for_message(masked == NULL || names_a_secret(masked) ? MASK : masked, out, cap);
    free(masked);
}
