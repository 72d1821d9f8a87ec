/* SPDX-License-Identifier: MIT */
/*
 * url_list.c - splits and checks NATS server URL lists (see url_list.h).
 *
 * nats.c parses each URL again when it connects; the check here exists so
 * that a typo fails at start with the field's name instead of as endless
 * "No server available" reconnects.
 */
#include "url_list.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/*
 * Prints `entry` into the error with its user information (passwords)
 * replaced by ***@. The host starts after the last '@', as check_entry()
 * reads it: a password may hold an '@' of its own. The mask stays in the
 * text rather than leaving scheme and host joined: "nats://host" made of
 * two distant parts of the value could also be text inside a password,
 * which the setting's error then hides (obx_mask_echo) or not depending on
 * the password.
 */
static outbox_status
refuse(outbox_error *err, const char *field, const char *entry, const char *why)
{
    const char *scheme_end = strstr(entry, "://");
    const char *host = scheme_end != NULL ? scheme_end + 3 : entry;
    const char *at = strrchr(host, '@');
    int scheme_len = scheme_end != NULL ? (int)(scheme_end - entry) + 3 : 0;

    if (at != NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "%s: \"%.*s***@%.120s\" %s", field, scheme_len, entry,
                        at + 1, why);
    }
    return obx_fail(err, OUTBOX_EINVAL, "%s: \"%.*s%.120s\" %s", field, scheme_len, entry, host,
                    why);
}

/* 1 if `s[0..len)` is a port number 1..65535. */
static int
port_valid(const char *s, size_t len)
{
    long port = 0;

    if (len == 0 || len > 5) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i])) {
            return 0;
        }
        port = port * 10 + (s[i] - '0');
    }
    return port >= 1 && port <= 65535;
}

static outbox_status
check_entry(const char *field, const char *entry, outbox_error *err)
{
    const char *scheme_end = strstr(entry, "://");
    const char *host = entry, *at, *end, *colon;

    if (scheme_end != NULL) {
        size_t n = (size_t)(scheme_end - entry);

        if (!((n == 4 && strncmp(entry, "nats", 4) == 0) ||
              (n == 3 && strncmp(entry, "tls", 3) == 0))) {
            return refuse(err, field, entry, "has a scheme other than nats:// or tls://");
        }
        host = scheme_end + 3;
    }
    at = strrchr(host, '@');
    if (at != NULL) {
        host = at + 1;
    }
    end = host + strcspn(host, "/");
    if (*end == '/' && end[1] != '\0') {
        return refuse(err, field, entry, "has a path; a server URL is [nats://]host[:port]");
    }
    if (host[0] == '[') {
        const char *close = memchr(host, ']', (size_t)(end - host));

        if (close == NULL || close == host + 1) {
            return refuse(err, field, entry, "has a bad [IPv6] host");
        }
        colon = close[1] == ':' ? close + 1 : NULL;
        if (close + 1 != end && colon == NULL) {
            return refuse(err, field, entry, "has text after its [IPv6] host");
        }
    } else {
        colon = memchr(host, ':', (size_t)(end - host));
        if (colon == host || host == end) {
            return refuse(err, field, entry, "has no host");
        }
    }
    for (const char *p = host; p < (colon != NULL ? colon : end); p++) {
        if (isspace((unsigned char)*p) || *p == ',' || *p == '@') {
            return refuse(err, field, entry, "has a bad host");
        }
    }
    if (colon != NULL && !port_valid(colon + 1, (size_t)(end - colon - 1))) {
        return refuse(err, field, entry, "has a port that is not 1..65535");
    }
    return OUTBOX_OK;
}

static char *
trim(char *s)
{
    char *e;

    while (isspace((unsigned char)*s)) {
        s++;
    }
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) {
        *--e = '\0';
    }
    return s;
}

outbox_status
obx_url_list_parse(const char *field, const char *list, struct obx_url_list *out, outbox_error *err)
{
    char *p;

    memset(out, 0, sizeof(*out));
    if (list == NULL || list[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "%s must not be empty", field);
    }
    out->text = strdup(list);
    if (out->text == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "%s: out of memory", field);
    }
    p = out->text;
    for (;;) {
        char *comma = strchr(p, ',');
        char *entry;

        if (comma != NULL) {
            *comma = '\0';
        }
        entry = trim(p);
        if (entry[0] == '\0') {
            obx_url_list_free(out);
            return obx_fail(err, OUTBOX_EINVAL,
                            "%s has an empty entry (two commas, or a comma "
                            "at an end)",
                            field);
        }
        if (out->count == OBX_URL_LIST_MAX) {
            obx_url_list_free(out);
            return obx_fail(err, OUTBOX_EINVAL, "%s lists more than %d servers", field,
                            OBX_URL_LIST_MAX);
        }
        if (check_entry(field, entry, err) != OUTBOX_OK) {
            obx_url_list_free(out);
            return OUTBOX_EINVAL;
        }
        out->urls[out->count++] = entry;
        if (comma == NULL) {
            return OUTBOX_OK;
        }
        p = comma + 1;
    }
}

void
obx_url_list_free(struct obx_url_list *l)
{
    free(l->text);
    memset(l, 0, sizeof(*l));
}

outbox_status
obx_nats_url_check(const char *list, outbox_error *err)
{
    struct obx_url_list l;
    outbox_status st = obx_url_list_parse("nats_url", list, &l, err);

    if (st == OUTBOX_OK) {
        obx_url_list_free(&l);
    }
    return st;
}
