/* SPDX-License-Identifier: MIT */
/*
 * envelope_cases.c - the shared envelope test corpus.
 */
#include "envelope_cases.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *
read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *data = NULL;
    long size;

    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (data = malloc((size_t)size + 1)) != NULL) {
        size_t got = fread(data, 1, (size_t)size, f);

        data[got] = '\0';
        if (len != NULL) {
            *len = got;
        }
    }
    fclose(f);
    return data;
}

/* First line of a .error file, or NULL if there is none. */
static char *
read_first_line(const char *path)
{
    char *text = read_file(path, NULL);

    if (text != NULL) {
        text[strcspn(text, "\n")] = '\0';
    }
    return text;
}

static char *
string_or_null(json_t *doc, const char *key)
{
    json_t *v = json_object_get(doc, key);

    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

/* {"a":{"a":...{}}} `depth` levels deep, as text and (if shallow enough to free) in memory. */
static void
generate_deep(struct envelope_case *c, long depth)
{
    size_t len = (size_t)depth * 6 - 4;
    char *text = malloc(len + 1), *w = text;
    json_t *value = json_object();

    for (long i = 1; i < depth; i++) {
        memcpy(w, "{\"a\":", 5);
        w += 5;
    }
    *w++ = '{';
    *w++ = '}';
    for (long i = 1; i < depth; i++) {
        *w++ = '}';
    }
    *w = '\0';
    c->payload_text = text;
    c->payload_len = (size_t)(w - text);
    for (long i = 1; i < depth; i++) {
        json_t *outer = json_object();

        json_object_set_new(outer, "a", value);
        value = outer;
    }
    c->payload_value = value;
}

static void
generate_bytes(struct envelope_case *c, long bytes)
{
    json_t *value = json_object();
    char *blob = malloc((size_t)bytes + 1);

    memset(blob, 'x', (size_t)bytes);
    blob[bytes] = '\0';
    json_object_set_new(value, "blob", json_string(blob));
    free(blob);
    c->payload_value = value;
    c->payload_text = json_dumps(value, JSON_COMPACT);
    c->payload_len = strlen(c->payload_text);
}

static void
load_payload(struct envelope_case *c, json_t *doc)
{
    json_t *value = json_object_get(doc, "payload");
    json_t *gen = json_object_get(doc, "payload_generate");
    const char *hex = json_string_value(json_object_get(doc, "payload_hex"));

    if (value != NULL) {
        c->payload_value = json_incref(value);
        c->payload_text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
        c->payload_len = strlen(c->payload_text);
    } else if (json_object_get(doc, "payload_text") != NULL) {
        c->payload_text = string_or_null(doc, "payload_text");
        c->payload_len = strlen(c->payload_text);
    } else if (hex != NULL) {
        c->payload_len = strlen(hex) / 2;
        c->payload_text = calloc(1, c->payload_len + 1);
        for (size_t i = 0; i < c->payload_len; i++) {
            unsigned int byte;

            sscanf(hex + 2 * i, "%2x", &byte);
            c->payload_text[i] = (char)byte;
        }
    } else if (json_integer_value(json_object_get(gen, "depth")) > 0) {
        generate_deep(c, (long)json_integer_value(json_object_get(gen, "depth")));
    } else if (json_integer_value(json_object_get(gen, "bytes")) > 0) {
        generate_bytes(c, (long)json_integer_value(json_object_get(gen, "bytes")));
    }
}

static int
load_one(const char *dir, const char *file, struct envelope_case *c)
{
    char path[4096];
    json_error_t jerr;
    json_t *doc;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    doc = json_load_file(path, 0, &jerr);
    if (doc == NULL) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return -1;
    }
    memset(c, 0, sizeof(*c));
    c->name = strndup(file, strlen(file) - strlen(".json"));
    c->aggregate_type = string_or_null(doc, "aggregate_type");
    c->aggregate_id = string_or_null(doc, "aggregate_id");
    c->event_type = string_or_null(doc, "event_type");
    c->tenant_id = string_or_null(doc, "tenant_id");
    c->data_subject = string_or_null(doc, "data_subject");
    c->traceparent = string_or_null(doc, "traceparent");
    load_payload(c, doc);
    json_decref(doc);
    snprintf(path, sizeof(path), "%s/%s.error", dir, c->name);
    c->expected_error = read_first_line(path);
    snprintf(path, sizeof(path), "%s/%s.sql.error", dir, c->name);
    c->expected_sql_error = read_first_line(path);
    if (c->expected_sql_error == NULL && c->expected_error != NULL) {
        c->expected_sql_error = strdup(c->expected_error);
    }
    return 0;
}

static int
by_name(const void *a, const void *b)
{
    return strcmp(((const struct envelope_case *)a)->name, ((const struct envelope_case *)b)->name);
}

size_t
envelope_cases_load(const char *kind, struct envelope_case **out)
{
    char dir[2048];
    struct envelope_case *cases = NULL;
    size_t count = 0;
    struct dirent *entry;
    DIR *d;

    snprintf(dir, sizeof(dir), "%s/envelopes/%s", OBX_TEST_DATA_DIR, kind);
    d = opendir(dir);
    while (d != NULL && (entry = readdir(d)) != NULL) {
        size_t len = strlen(entry->d_name);

        if (len < 5 || strcmp(entry->d_name + len - 5, ".json") != 0) {
            continue;
        }
        cases = realloc(cases, (count + 1) * sizeof(*cases));
        if (load_one(dir, entry->d_name, &cases[count]) == 0) {
            count++;
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    qsort(cases, count, sizeof(*cases), by_name);
    *out = cases;
    return count;
}

void
envelope_cases_free(struct envelope_case *cases, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        struct envelope_case *c = &cases[i];

        free(c->name);
        free(c->aggregate_type);
        free(c->aggregate_id);
        free(c->event_type);
        free(c->tenant_id);
        free(c->data_subject);
        free(c->traceparent);
        free(c->payload_text);
        json_decref(c->payload_value);
        free(c->expected_error);
        free(c->expected_sql_error);
    }
    free(cases);
}

outbox_status
envelope_case_build(const struct envelope_case *c, int in_memory, outbox_event **out,
                    outbox_error *err)
{
    outbox_event *ev = outbox_event_new();
    outbox_status st = outbox_event_set_route(ev, c->aggregate_type, c->event_type, err);

    if (st == OUTBOX_OK && c->aggregate_id != NULL) {
        st = outbox_event_set_aggregate_id(ev, c->aggregate_id, err);
    }
    if (st == OUTBOX_OK && in_memory && c->payload_value != NULL) {
        st = outbox_event_set_payload(ev, c->payload_value, err);
    } else if (st == OUTBOX_OK && c->payload_text != NULL) {
        st = outbox_event_set_payload_json(ev, c->payload_text, c->payload_len, err);
    }
    if (st == OUTBOX_OK) {
        st = outbox_event_set_tenant_id(ev, c->tenant_id, err);
    }
    if (st == OUTBOX_OK) {
        st = outbox_event_set_data_subject(ev, c->data_subject, err);
    }
    if (st == OUTBOX_OK) {
        st = outbox_event_set_traceparent(ev, c->traceparent, err);
    }
    if (st != OUTBOX_OK) {
        outbox_event_free(ev);
        ev = NULL;
    }
    *out = ev;
    return st;
}
