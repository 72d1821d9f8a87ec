/* SPDX-License-Identifier: MIT */
/*
 * sql.c - schema name checks and the one text substitution we allow.
 *
 * A hostile OUTBOX_SCHEMA (`x"; DROP TABLE ...`) never reaches the server:
 * the name must match [a-z_][a-z0-9_]{0,62} before it is quoted, so the
 * quoting never has anything to escape.
 */
#include "sql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "secret.h"

#include "banned.h" /* last: poisons unsafe functions */

static const char schema_marker[] = "/*schema*/";

static int
schema_char_ok(char c, int first)
{
    if (c == '_' || (c >= 'a' && c <= 'z')) {
        return 1;
    }
    return !first && c >= '0' && c <= '9';
}

outbox_status
outbox_schema_name_check(const char *schema, outbox_error *err)
{
    size_t len;
    char shown[200]; /* masked: a URL pasted here keeps its password to itself */

    obx_error_reset(err);
    if (schema == NULL || schema[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "schema must not be empty");
    }
    len = strlen(schema);
    obx_mask_quote(schema, shown, sizeof(shown));
    for (size_t i = 0; i < len; i++) {
        if (!schema_char_ok(schema[i], i == 0) || i >= OBX_SCHEMA_MAX_LEN) {
            return obx_fail(err, OUTBOX_EINVAL, "schema %s must match [a-z_][a-z0-9_]{0,62}",
                            shown);
        }
    }
    if (strncmp(schema, "pg_", 3) == 0) {
        return obx_fail(err, OUTBOX_EINVAL, "schema %s must not start with pg_ (reserved)", shown);
    }
    return OUTBOX_OK;
}

outbox_status
obx_sql_quote_schema(const char *schema, char *out, outbox_error *err)
{
    outbox_status status = outbox_schema_name_check(schema, err);

    if (status != OUTBOX_OK) {
        return status;
    }
    snprintf(out, OBX_SCHEMA_QUOTED_CAP, "\"%s\".", schema);
    return OUTBOX_OK;
}

char *
obx_sql_render(const char *sql_template, const char *quoted_schema)
{
    size_t marker_len = sizeof(schema_marker) - 1;
    size_t schema_len = strlen(quoted_schema);
    size_t count = 0;
    const char *p;
    char *out, *w;

    for (p = strstr(sql_template, schema_marker); p; p = strstr(p + marker_len, schema_marker)) {
        count++;
    }
    out = malloc(strlen(sql_template) + count * schema_len + 1);
    if (out == NULL) {
        return NULL;
    }
    w = out;
    for (p = sql_template;;) {
        const char *hit = strstr(p, schema_marker);
        size_t chunk = hit ? (size_t)(hit - p) : strlen(p);

        memcpy(w, p, chunk);
        w += chunk;
        if (hit == NULL) {
            break;
        }
        memcpy(w, quoted_schema, schema_len);
        w += schema_len;
        p = hit + marker_len;
    }
    *w = '\0';
    return out;
}

outbox_status
obx_sql_render_set(const char *schema, const char *const *templates, size_t count, char **out,
                   outbox_error *err)
{
    char quoted[OBX_SCHEMA_QUOTED_CAP];
    outbox_status st = obx_sql_quote_schema(schema, quoted, err);

    for (size_t i = 0; st == OUTBOX_OK && i < count; i++) {
        out[i] = obx_sql_render(templates[i], quoted);
        if (out[i] == NULL) {
            obx_sql_free_set(out, i);
            st = obx_fail(err, OUTBOX_ENOMEM, "out of memory rendering SQL");
        }
    }
    return st;
}

void
obx_sql_free_set(char **set, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(set[i]);
        set[i] = NULL;
    }
}
