/* SPDX-License-Identifier: MIT */
/*
 * handler_spec.c - parsing NAME[@FILTER]=sql:..., =exec[OPTIONS]:... and
 * =http[OPTIONS]:URL
 */
#include "handler_spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/secret.h"
#include "envelope/subject.h"
#include "handlers/http_handler.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static int
name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

/*
 * NAME[@FILTER] before the '='; writes the name and a malloc'd filter (or
 * NULL). A bad name is shown without the statement or command after the
 * '=' (it may hold credentials), and masked.
 */
static outbox_status
parse_head(const char *text, size_t head_len, struct obx_handler_spec *out, outbox_error *err)
{
    const char *at = memchr(text, '@', head_len);
    size_t name_len = at ? (size_t)(at - text) : head_len;
    char *head = strndup(text, head_len), shown[200];
    int bad_chars = 0;

    if (head == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    obx_mask_quote(head, shown, sizeof(shown));
    free(head);
    if (name_len == 0 || name_len > 64) {
        return obx_fail(err, OUTBOX_EINVAL, "handler %s: name must be 1 to 64 characters", shown);
    }
    for (size_t i = 0; i < name_len; i++) {
        bad_chars |= !name_char(text[i]);
    }
    if (bad_chars) {
        return obx_fail(err, OUTBOX_EINVAL, "handler %s: name must be made of [A-Za-z0-9_.-]",
                        shown);
    }
    memcpy(out->name, text, name_len);
    out->name[name_len] = '\0';
    if (at != NULL) {
        out->filter = strndup(at + 1, head_len - name_len - 1);
        if (out->filter == NULL) {
            return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
        }
        return obx_subject_filter_check(out->filter, err);
    }
    return OUTBOX_OK;
}

static const struct {
    const char *word;
    enum obx_handler_spec_kind kind;
    const char *body; /* what the part after the colon is called */
} kinds[] = {
    {"sql", OBX_SPEC_SQL, "statement"},
    {"exec", OBX_SPEC_EXEC, "command"},
    {"http", OBX_SPEC_HTTP, "URL"},
};

/* A whole decimal number in [min, max], or -1. */
static long
number_in(const char *text, long min, long max)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    return errno == 0 && end != text && *end == '\0' && text[0] != '-' && text[0] != '+' &&
                   v >= min && v <= max
               ? v
               : -1;
}

/* A header "Name: value": a token for a name, no control characters anywhere. */
static int
header_valid(const char *h)
{
    const char *colon = strchr(h, ':');

    if (colon == NULL || colon == h) {
        return 0;
    }
    for (const char *p = h; p < colon; p++) {
        if (!name_char(*p)) {
            return 0;
        }
    }
    for (const char *p = h; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            return 0;
        }
    }
    return 1;
}

static outbox_status
dup_into(char **slot, const char *value, outbox_error *err)
{
    free(*slot);
    *slot = strdup(value);
    return *slot != NULL ? OUTBOX_OK : obx_fail(err, OUTBOX_ENOMEM, "out of memory");
}

/* One KEY=VALUE option of exec or http. */
static outbox_status
apply_option(struct obx_handler_spec *spec, char *opt, outbox_error *err)
{
    char *eq = strchr(opt, '='), *value;
    int http = spec->kind == OBX_SPEC_HTTP;
    long v;

    if (eq == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "handler %s: option \"%.100s\" is not KEY=VALUE",
                        spec->name, opt);
    }
    *eq = '\0';
    value = eq + 1;
    if (strcmp(opt, "in_flight") == 0) {
        if ((v = number_in(value, 1, 256)) < 0) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "handler %s: in_flight=\"%.40s\" must be a number from 1 to 256",
                            spec->name, value);
        }
        spec->in_flight = (int)v;
    } else if (strcmp(opt, "timeout") == 0) {
        if ((v = number_in(value, 1, 86400)) < 0) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "handler %s: timeout=\"%.40s\" must be whole seconds from 1 to 86400",
                            spec->name, value);
        }
        spec->timeout_seconds = (int)v;
    } else if (http && strcmp(opt, "mode") == 0) {
        if (strcmp(value, "binary") != 0 && strcmp(value, "structured") != 0) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "handler %s: mode=\"%.40s\" must be binary or structured", spec->name,
                            value);
        }
        spec->structured = strcmp(value, "structured") == 0;
    } else if (http && (strcmp(opt, "token_file") == 0 || strcmp(opt, "ca_file") == 0)) {
        if (value[0] == '\0') {
            return obx_fail(err, OUTBOX_EINVAL, "handler %s: %s is empty", spec->name, opt);
        }
        return dup_into(opt[0] == 't' ? &spec->token_file : &spec->ca_file, value, err);
    } else if (http && strcmp(opt, "header") == 0) {
        if (!header_valid(value)) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "handler %s: header=\"%.100s\" must be \"Name: value\" (a name of "
                            "[A-Za-z0-9_.-], no control characters)",
                            spec->name, value);
        }
        if (spec->header_count == OBX_SPEC_MAX_HEADERS) {
            return obx_fail(err, OUTBOX_EINVAL, "handler %s: at most %d header options", spec->name,
                            OBX_SPEC_MAX_HEADERS);
        }
        return dup_into(&spec->headers[spec->header_count++], value, err);
    } else {
        return obx_fail(err, OUTBOX_EINVAL, "handler %s: unknown option \"%.40s\" for %s: (%s)",
                        spec->name, opt, http ? "http" : "exec",
                        http ? "in_flight, timeout, token_file, ca_file, header, mode"
                             : "in_flight, timeout");
    }
    return OUTBOX_OK;
}

/*
 * The kind and its [OPTIONS] at the start of `text` (after the '=');
 * `*body` is set to what follows the colon.
 */
static outbox_status
parse_kind(const char *text, struct obx_handler_spec *spec, const char **body, outbox_error *err)
{
    const char *after = NULL, *close;
    outbox_status st = OUTBOX_OK;
    char *opts, *save = NULL;

    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]) && after == NULL; i++) {
        size_t n = strlen(kinds[i].word);

        if (strncmp(text, kinds[i].word, n) == 0 && (text[n] == ':' || text[n] == '[')) {
            spec->kind = kinds[i].kind;
            after = text + n;
        }
    }
    if (after == NULL) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "handler %s: the part after '=' must start with sql: or exec: or http: "
                        "(exec and http take options: exec[in_flight=4]:COMMAND)",
                        spec->name);
    }
    spec->in_flight =
        spec->kind == OBX_SPEC_HTTP ? OBX_HTTP_DEFAULT_IN_FLIGHT : OBX_SPEC_DEFAULT_IN_FLIGHT;
    if (*after == ':') {
        *body = after + 1;
        return OUTBOX_OK;
    }
    close = strchr(after, ']');
    if (spec->kind == OBX_SPEC_SQL) {
        return obx_fail(err, OUTBOX_EINVAL, "handler %s: sql: takes no options", spec->name);
    }
    if (close == NULL || close[1] != ':') {
        return obx_fail(err, OUTBOX_EINVAL,
                        "handler %s: options must be [KEY=VALUE,...] followed by ':'", spec->name);
    }
    opts = strndup(after + 1, (size_t)(close - after - 1));
    if (opts == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    for (char *opt = strtok_r(opts, ",", &save); opt != NULL && st == OUTBOX_OK;
         opt = strtok_r(NULL, ",", &save)) {
        st = apply_option(spec, opt, err);
    }
    free(opts);
    *body = close + 2;
    return st;
}

static const char *
body_word(enum obx_handler_spec_kind kind)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (kinds[i].kind == kind) {
            return kinds[i].body;
        }
    }
    return "body";
}

/* http: an absolute http or https URL, no blanks; ca_file only with https. */
static outbox_status
check_http(const struct obx_handler_spec *spec, outbox_error *err)
{
    int https = strncmp(spec->body, "https://", 8) == 0;
    char shown[200];

    obx_mask_quote(spec->body, shown, sizeof(shown));
    if ((!https && strncmp(spec->body, "http://", 7) != 0) ||
        spec->body[strcspn(spec->body, " \t\r\n")] != '\0' || spec->body[https ? 8 : 7] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL,
                        "handler %s: URL %s must be http://HOST... or https://HOST..., without "
                        "blanks",
                        spec->name, shown);
    }
    if (spec->ca_file != NULL && !https) {
        return obx_fail(err, OUTBOX_EINVAL, "handler %s: ca_file needs an https:// URL",
                        spec->name);
    }
    return OUTBOX_OK;
}

outbox_status
obx_handler_spec_parse(const char *text, struct obx_handler_spec *out, outbox_error *err)
{
    struct obx_handler_spec spec = {0};
    const char *eq = text ? strchr(text, '=') : NULL;
    const char *body = NULL;
    outbox_status st;
    char shown[200];

    obx_error_reset(err);
    if (eq == NULL) {
        obx_mask_quote(text, shown, sizeof(shown));
        return obx_fail(err, OUTBOX_EINVAL,
                        "handler %s: expected NAME[@SUBJECT_FILTER]=sql:STATEMENT, "
                        "NAME[@SUBJECT_FILTER]=exec:COMMAND or NAME[@SUBJECT_FILTER]=http:URL",
                        shown);
    }
    st = parse_head(text, (size_t)(eq - text), &spec, err);
    if (st == OUTBOX_OK) {
        st = parse_kind(eq + 1, &spec, &body, err);
    }
    if (st == OUTBOX_OK && body[strspn(body, " \t\r\n")] == '\0') {
        st = obx_fail(err, OUTBOX_EINVAL, "handler %s: the %s is empty", spec.name,
                      body_word(spec.kind));
    }
    if (st == OUTBOX_OK && (spec.body = strdup(body)) == NULL) {
        st = obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    if (st == OUTBOX_OK && spec.kind == OBX_SPEC_HTTP) {
        st = check_http(&spec, err);
    }
    if (st != OUTBOX_OK) {
        obx_handler_spec_fini(&spec);
        return st;
    }
    *out = spec;
    return OUTBOX_OK;
}

void
obx_handler_spec_fini(struct obx_handler_spec *spec)
{
    free(spec->filter);
    free(spec->body);
    free(spec->token_file);
    free(spec->ca_file);
    for (size_t i = 0; i < spec->header_count; i++) {
        free(spec->headers[i]);
    }
    spec->filter = NULL;
    spec->body = NULL;
    spec->token_file = NULL;
    spec->ca_file = NULL;
    spec->header_count = 0;
}
