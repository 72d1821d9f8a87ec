/* SPDX-License-Identifier: MIT */
/*
 * conninfo_pg.c - checking a connection string with libpq's own parser,
 * then the values libpq reads only when it connects (see conninfo.h).
 * Parses only: no connection is made.
 */
#include "conninfo.h"

#include <ctype.h>
#include <errno.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "secret.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* libpq's options read as whole numbers, and those read as one of a few words. */
static const char *const numbers[] = {"connect_timeout",  "keepalives",
                                      "keepalives_idle",  "keepalives_interval",
                                      "keepalives_count", "tcp_user_timeout"};
static const struct {
    const char *key, *words;
} choices[] = {
    {"sslmode", "disable|allow|prefer|require|verify-ca|verify-full"},
    {"gssencmode", "disable|prefer|require"},
    {"channel_binding", "disable|prefer|require"},
    {"target_session_attrs", "any|read-write|read-only|primary|standby|prefer-standby"},
};

/* 1 if `s` is a whole number, blanks around it allowed (libpq's parse_int_param). */
static int
whole_number(const char *s)
{
    char *end;

    errno = 0;
    (void)strtol(s, &end, 10);
    while (isspace((unsigned char)*end)) {
        end++;
    }
    return errno == 0 && end != s && *end == '\0';
}

static int
one_of(const char *value, const char *words)
{
    size_t len = strlen(value);

    for (const char *p = words; p != NULL; p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL) {
        if (strncmp(p, value, len) == 0 && (p[len] == '|' || p[len] == '\0')) {
            return 1;
        }
    }
    return 0;
}

/* Entries of a comma-separated list ("" is one). */
static size_t
entries(const char *list)
{
    size_t n = 1;

    for (; *list != '\0'; list++) {
        n += *list == ',';
    }
    return n;
}

/* Every port of a host list: empty (the default) or 1..65535. */
static outbox_status
check_ports(const char *ports, const char *hosts, outbox_error *err)
{
    char masked[200];

    for (const char *p = ports; p != NULL; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        size_t len = strcspn(p, ","), i;
        long port = 0;

        for (i = 0; i < len && isdigit((unsigned char)p[i]) && port <= 65535; i++) {
            port = port * 10 + (p[i] - '0');
        }
        if (len > 0 && (i != len || port < 1 || port > 65535)) {
            obx_mask_quote(ports, masked, sizeof(masked));
            return obx_fail(err, OUTBOX_EINVAL,
                            "port %s is not a port number 1..65535 (or a list "
                            "of them, one per host)",
                            masked);
        }
    }
    if (entries(ports) > 1 && entries(ports) != entries(hosts != NULL ? hosts : "")) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "%zu ports for %zu hosts: give one port, or one per host", entries(ports),
                        entries(hosts != NULL ? hosts : ""));
    }
    return OUTBOX_OK;
}

/* One parsed option against what libpq will take when it connects. */
static outbox_status
check_option(const PQconninfoOption *o, const char *hosts, outbox_error *err)
{
    char masked[200];

    if (strcmp(o->keyword, "port") == 0) {
        return check_ports(o->val, hosts, err);
    }
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
        if (strcmp(o->keyword, numbers[i]) == 0 && !whole_number(o->val)) {
            obx_mask_quote(o->val, masked, sizeof(masked));
            return obx_fail(err, OUTBOX_EINVAL, "%s %s is not a whole number", o->keyword, masked);
        }
    }
    for (size_t i = 0; i < sizeof(choices) / sizeof(choices[0]); i++) {
        if (strcmp(o->keyword, choices[i].key) == 0 && !one_of(o->val, choices[i].words)) {
            obx_mask_quote(o->val, masked, sizeof(masked));
            return obx_fail(err, OUTBOX_EINVAL, "%s %s is not one of %s", o->keyword, masked,
                            choices[i].words);
        }
    }
    return OUTBOX_OK;
}

outbox_status
obx_conninfo_check(const char *conninfo, outbox_error *err)
{
    char *why = NULL, clean[300];
    PQconninfoOption *opts = PQconninfoParse(conninfo, &why);
    const char *hosts = NULL;
    outbox_status st = OUTBOX_OK;

    if (opts == NULL) {
        /* libpq's message may quote part of the string, a password with it. */
        if (why != NULL) {
            why[strcspn(why, "\n")] = '\0';
        }
        obx_mask_echo(why != NULL ? why : "out of memory", conninfo, clean, sizeof(clean));
        PQfreemem(why);
        return obx_fail(err, OUTBOX_EINVAL, "not a libpq URL or key=value string: %s", clean);
    }
    for (const PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val != NULL && (strcmp(o->keyword, "host") == 0 ||
                               (hosts == NULL && strcmp(o->keyword, "hostaddr") == 0))) {
            hosts = o->val;
        }
    }
    for (const PQconninfoOption *o = opts; st == OUTBOX_OK && o->keyword != NULL; o++) {
        if (o->val != NULL) {
            st = check_option(o, hosts, err);
        }
    }
    PQconninfoFree(opts);
    return st;
}
