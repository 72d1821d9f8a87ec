/* SPDX-License-Identifier: MIT */
/*
 * fleet_file.c - reading the fleet file.
 *
 * Every value is checked by its setting's own row (a scratch relay
 * configuration takes it), so a line is refused exactly as the same value
 * in OUTBOX_SCHEMA, OUTBOX_STREAM or OUTBOX_SUBJECT_PREFIX would be. A bad
 * file is refused whole: a reload never serves half of it.
 */
#include "fleet.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/conninfo.h"
#include "common/error.h"
#include "common/secret.h"
#include "common/text.h"
#include "config/config.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static const char *const fields[] = {"schema", "stream", "subject_prefix"};

static int
name_valid(const char *s, size_t len)
{
    if (len == 0 || len > OBX_FLEET_NAME_MAX) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        char c = s[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.')) {
            return 0;
        }
    }
    return 1;
}

static void
entry_fini(struct obx_fleet_entry *e)
{
    free(e->database_url);
    free(e->schema);
    free(e->stream);
    free(e->subject_prefix);
}

void
obx_fleet_list_fini(struct obx_fleet_list *list)
{
    for (size_t i = 0; i < list->count; i++) {
        entry_fini(&list->items[i]);
    }
    free(list->items);
    list->items = NULL;
    list->count = 0;
}

/* The next whitespace-separated word of `*p`, NUL-terminated in place; NULL at the end. */
static char *
next_word(char **p)
{
    char *s = *p, *start;

    while (*s == ' ' || *s == '\t' || *s == '\r') {
        s++;
    }
    if (*s == '\0' || *s == '#') {
        *p = s;
        return NULL;
    }
    start = s;
    while (*s != '\0' && *s != ' ' && *s != '\t' && *s != '\r') {
        s++;
    }
    if (*s != '\0') {
        *s++ = '\0';
    }
    *p = s;
    return start;
}

/*
 * `key=value` into the scratch configuration; the message names file, line,
 * field and value, masked: a libpq keyword (password=...) written after a
 * key=value DATABASE_URL lands here, secret and all.
 */
static outbox_status
set_field(struct obx_config *scratch, const char *path, int line, char *word, outbox_error *err)
{
    char *eq = strchr(word, '='), shown[200], field[100], masked[400];
    outbox_error why = {0};

    obx_mask_quote(word, shown, sizeof(shown));
    if (eq == NULL) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "%s line %d: %s is not field=value (fields: schema, stream, "
                        "subject_prefix)",
                        path, line, shown);
    }
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (strlen(fields[i]) == (size_t)(eq - word) &&
            strncmp(word, fields[i], strlen(fields[i])) == 0) {
            *eq = '\0';
            if (obx_config_set_key(scratch, word, eq + 1, &why) != OUTBOX_OK) {
                return obx_fail(err, OUTBOX_EINVAL, "%s line %d: field %s: %s", path, line, word,
                                why.message);
            }
            return OUTBOX_OK;
        }
    }
    /* Masked whole (password=*** keeps its key), then shown as field and value. */
    obx_mask_secrets(word, masked, sizeof(masked));
    eq = strchr(masked, '=');
    if (eq != NULL) {
        *eq = '\0';
    }
    obx_quote_for_message(masked, field, sizeof(field));
    obx_quote_for_message(eq != NULL ? eq + 1 : "", shown, sizeof(shown));
    return obx_fail(
        err, OUTBOX_EINVAL,
        "%s line %d: unknown field %s (value %s; fields: schema, stream, subject_prefix; a "
        "DATABASE_URL is one word: write libpq key=value words as a postgresql:// "
        "URL, postgresql://USER:PASSWORD@HOST:PORT/DBNAME?sslmode=...)",
        path, line, field, shown);
}

/* Checks a parsed entry against the ones before it. */
static outbox_status
check_against(const struct obx_fleet_list *list, const struct obx_fleet_entry *e, const char *path,
              outbox_error *err)
{
    for (size_t i = 0; i < list->count; i++) {
        const struct obx_fleet_entry *o = &list->items[i];

        if (strcmp(o->name, e->name) == 0) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "%s line %d: field name value \"%s\" repeats line %d", path, e->line,
                            e->name, o->line);
        }
        if (strcmp(o->stream, e->stream) == 0 &&
            strcmp(o->subject_prefix, e->subject_prefix) != 0) {
            return obx_fail(err, OUTBOX_EINVAL,
                            "%s line %d: field subject_prefix value \"%s\": stream %s already "
                            "captures \"%s.>\" for %s (line %d); give this database its own "
                            "stream or the same prefix",
                            path, e->line, e->subject_prefix, e->stream, o->subject_prefix, o->name,
                            o->line);
        }
    }
    return OUTBOX_OK;
}

/* One non-blank line into `e`. */
static outbox_status
parse_line(char *text, const char *path, int line, const struct obx_config *base,
           struct obx_fleet_entry *e, outbox_error *err)
{
    struct obx_config scratch;
    char *p = text, *name = next_word(&p), *url = next_word(&p), *word;
    outbox_status st;

    char shown[200];
    outbox_error why = {0};

    *e = (struct obx_fleet_entry){.line = line};
    if (!name_valid(name, strlen(name))) {
        obx_mask_quote(name, shown, sizeof(shown)); /* a URL written first, password and all */
        return obx_fail(err, OUTBOX_EINVAL,
                        "%s line %d: field name value %s must be 1 to %d of [A-Za-z0-9_.-]", path,
                        line, shown, OBX_FLEET_NAME_MAX);
    }
    if (url == NULL) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "%s line %d: field database_url missing after name \"%s\" (a line is "
                        "NAME DATABASE_URL [schema=S] [stream=X] [subject_prefix=P])",
                        path, line, name);
    }
    /* Checked now, as OUTBOX_DATABASE_URL is: a bad one would be retried as an outage. */
    if (obx_conninfo_check(url, &why) != OUTBOX_OK) {
        obx_mask_quote(url, shown, sizeof(shown));
        return obx_fail(err, OUTBOX_EINVAL, "%s line %d: field database_url value %s: %s", path,
                        line, shown, why.message);
    }
    if (obx_config_init(&scratch, OBX_FOR_RELAY, err) != OUTBOX_OK) {
        return OUTBOX_ENOMEM;
    }
    st = obx_config_copy(&scratch, base, err);
    while (st == OUTBOX_OK && (word = next_word(&p)) != NULL) {
        st = set_field(&scratch, path, line, word, err);
    }
    if (st == OUTBOX_OK) {
        memcpy(e->name, name, strlen(name) + 1);
        e->database_url = strdup(url);
        e->schema = strdup(scratch.schema);
        e->stream = strdup(scratch.stream);
        e->subject_prefix = strdup(scratch.subject_prefix);
        if (!e->database_url || !e->schema || !e->stream || !e->subject_prefix) {
            st = obx_fail(err, OUTBOX_ENOMEM, "out of memory");
        }
    }
    obx_config_fini(&scratch);
    return st;
}

static outbox_status
parse_stream(FILE *f, const char *path, const struct obx_config *base, struct obx_fleet_list *out,
             outbox_error *err)
{
    char text[4096];
    int line = 0;

    while (fgets(text, sizeof(text), f) != NULL) {
        size_t len = strlen(text);
        char *p = text;
        struct obx_fleet_entry e, *grown;
        outbox_status st;

        line++;
        if (len > 0 && text[len - 1] != '\n' && !feof(f)) {
            return obx_fail(err, OUTBOX_EINVAL, "%s line %d: longer than %zu bytes", path, line,
                            sizeof(text) - 2);
        }
        text[strcspn(text, "\n")] = '\0';
        p += strspn(p, " \t\r");
        if (*p == '\0' || *p == '#') {
            continue; /* blank or a comment */
        }
        st = parse_line(p, path, line, base, &e, err);
        if (st == OUTBOX_OK) {
            st = check_against(out, &e, path, err);
        }
        grown = st == OUTBOX_OK ? realloc(out->items, (out->count + 1) * sizeof(*grown)) : NULL;
        if (grown == NULL) {
            if (st == OUTBOX_OK) {
                st = obx_fail(err, OUTBOX_ENOMEM, "out of memory");
            }
            entry_fini(&e);
            return st;
        }
        out->items = grown;
        out->items[out->count++] = e;
    }
    return OUTBOX_OK;
}

outbox_status
obx_fleet_file_load(const char *path, const struct obx_config *base, struct obx_fleet_list *out,
                    outbox_error *err)
{
    FILE *f;
    outbox_status st;

    *out = (struct obx_fleet_list){0};
    if (path == NULL || path[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "fleet_file is required (OUTBOX_FLEET_FILE)");
    }
    f = fopen(path, "r");
    if (f == NULL) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "fleet_file %s: %s", path, strerror(errno));
    }
    st = parse_stream(f, path, base, out, err);
    fclose(f);
    if (st == OUTBOX_OK && out->count == 0) {
        st = obx_fail(err, OUTBOX_EINVAL, "fleet_file %s lists no database", path);
    }
    if (st != OUTBOX_OK) {
        obx_fleet_list_fini(out);
    }
    return st;
}
