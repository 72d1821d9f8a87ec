/* SPDX-License-Identifier: MIT */
/*
 * handler_spec.c - parsing NAME[@FILTER]=sql:... and NAME[@FILTER]=exec:...
 */
#include "handler_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/secret.h"
#include "envelope/subject.h"

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

outbox_status
obx_handler_spec_parse(const char *text, struct obx_handler_spec *out, outbox_error *err)
{
    struct obx_handler_spec spec = {0};
    const char *eq = text ? strchr(text, '=') : NULL;
    const char *body;
    outbox_status st;
    char shown[200];

    obx_error_reset(err);
    if (eq == NULL) {
        obx_mask_quote(text, shown, sizeof(shown));
        return obx_fail(err, OUTBOX_EINVAL,
                        "handler %s: expected NAME[@SUBJECT_FILTER]=sql:STATEMENT or "
                        "NAME[@SUBJECT_FILTER]=exec:COMMAND",
                        shown);
    }
    st = parse_head(text, (size_t)(eq - text), &spec, err);
    body = eq + 1;
    if (st == OUTBOX_OK && strncmp(body, "sql:", 4) == 0) {
        spec.kind = OBX_SPEC_SQL;
        body += 4;
    } else if (st == OUTBOX_OK && strncmp(body, "exec:", 5) == 0) {
        spec.kind = OBX_SPEC_EXEC;
        body += 5;
    } else if (st == OUTBOX_OK) {
        st = obx_fail(err, OUTBOX_EINVAL,
                      "handler %s: the part after '=' must start with sql: "
                      "or exec:",
                      spec.name);
    }
    if (st == OUTBOX_OK && body[strspn(body, " \t\r\n")] == '\0') {
        st = obx_fail(err, OUTBOX_EINVAL, "handler %s: the %s is empty", spec.name,
                      spec.kind == OBX_SPEC_SQL ? "statement" : "command");
    }
    if (st == OUTBOX_OK && (spec.body = strdup(body)) == NULL) {
        st = obx_fail(err, OUTBOX_ENOMEM, "out of memory");
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
    spec->filter = NULL;
    spec->body = NULL;
}
