/* SPDX-License-Identifier: MIT */
/*
 * envelope.c - v1 envelope serialization and checks.
 *
 * Serialization writes the fields by hand around the payload text: the
 * writer keeps the payload as the caller's JSON text, so numbers keep
 * their exact digits (PostgreSQL stores them as numeric).
 */
#include "envelope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/text.h"
#include "envelope_scan.h"
#include "fields.h"
#include "payload.h"
#include "subject.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
append_string_field(struct obx_buf *out, const char *key, const char *value)
{
    if (value == NULL) {
        return;
    }
    obx_buf_appendf(out, ",\"%s\":", key);
    obx_json_quote(out, value, strlen(value));
}

void
obx_envelope_serialize(const struct obx_envelope_fields *f, struct obx_buf *out)
{
    /* id, types and ids are tokens or hex: nothing to escape. */
    obx_buf_appendf(out, "{\"id\":\"%s\",\"event_type\":\"%s\",\"aggregate_type\":\"%s\",",
                    f->head.id, f->head.event_type, f->head.aggregate_type);
    obx_buf_appendf(out, "\"aggregate_id\":\"%s\"", f->head.aggregate_id);
    append_string_field(out, "tenant_id", f->head.tenant_id);
    obx_buf_appendf(out, ",\"occurred_at\":\"%s\",\"schema_version\":1", f->head.occurred_at);
    append_string_field(out, "data_subject", f->head.data_subject);
    append_string_field(out, "traceparent", f->head.traceparent);
    obx_buf_append_str(out, ",\"payload\":");
    obx_buf_append(out, f->payload_json, f->payload_len);
    if (f->head.aggregate_seq > 0) {
        obx_buf_appendf(out, ",\"aggregate_seq\":%lld", f->head.aggregate_seq);
    }
    obx_buf_append_str(out, "}");
}

static const char *const required_keys[] = {
    "id",          "event_type",     "aggregate_type", "aggregate_id",
    "occurred_at", "schema_version", "payload",
};

static const char *const known_keys[] = {
    "id",          "event_type",  "aggregate_type", "aggregate_id",
    "tenant_id",   "occurred_at", "schema_version", "data_subject",
    "traceparent", "payload",     "aggregate_seq",
};

/* Reads an optional string member; a present non-string is an error. */
static outbox_status
string_member(json_t *doc, const char *key, int required, const char **out, size_t *len,
              outbox_error *err)
{
    json_t *v = json_object_get(doc, key);

    if (v == NULL) {
        *out = NULL;
        return required ? obx_fail(err, OUTBOX_EINVAL, "envelope has no %s", key) : OUTBOX_OK;
    }
    if (!json_is_string(v)) {
        return obx_fail(err, OUTBOX_EINVAL, "envelope %s must be a string", key);
    }
    *out = json_string_value(v);
    *len = json_string_length(v);
    if (strlen(*out) != *len) {
        return obx_fail(err, OUTBOX_EINVAL, "envelope %s contains a NUL character", key);
    }
    return OUTBOX_OK;
}

/* Skips one JSON value of valid text at `p`; returns the byte after it. */
static const char *
skip_value(const char *p, const char *end)
{
    int depth = 0;

    while (p < end) {
        char c = *p;

        if (c == '"') {
            for (p++; p < end && *p != '"'; p++) {
                p += *p == '\\';
            }
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0) {
                return p;
            }
            depth--;
        } else if (c == ',' && depth == 0) {
            return p;
        }
        p++;
    }
    return p;
}

static const char *
skip_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) {
        p++;
    }
    return p;
}

/* True if the quoted key at `p` (its opening quote) through `close` spells `name`. */
static int
key_is(const char *p, const char *close, const char *name)
{
    size_t n = (size_t)(close - p) - 1;
    json_t *key;
    int same;

    if (memchr(p, '\\', n + 1) == NULL) {
        return strlen(name) == n && memcmp(p + 1, name, n) == 0;
    }
    /* An escaped key ("schema\u005fversion") is the same key to jansson. */
    key = json_loadb(p, n + 2, JSON_DECODE_ANY, NULL);
    same = json_is_string(key) && strcmp(json_string_value(key), name) == 0;
    json_decref(key);
    return same;
}

/*
 * The text of the top-level member `name` in valid JSON object text; the
 * last one wins, as in jansson. Empty when absent.
 */
static void
member_text(const char *json, size_t len, const char *name, const char **out, size_t *out_len)
{
    const char *p = json, *end = json + len;

    *out = NULL;
    *out_len = 0;
    p = skip_space(p, end);
    if (p >= end || *p != '{') {
        return;
    }
    for (p++; p < end;) {
        const char *key, *close, *value, *value_end;

        p = skip_space(p, end);
        if (p >= end || *p != '"') {
            return;
        }
        key = p;
        for (close = key + 1; close < end && *close != '"'; close++) {
            close += *close == '\\';
        }
        if (close >= end) {
            return;
        }
        value = skip_space(skip_space(close + 1, end) + 1, end); /* past the ':' */
        p = skip_value(value, end);
        if (key_is(key, close, name)) {
            value_end = p;
            while (value_end > value && value_end[-1] != '\0' &&
                   strchr(" \n\r\t", value_end[-1]) != NULL) {
                value_end--;
            }
            *out = value;
            *out_len = (size_t)(value_end - value);
        }
        if (p >= end || *p != ',') {
            return;
        }
        p++;
    }
}

/* The key of the quoted text at `p` through `close`, decoded; NULL if out of memory. */
static json_t *
key_string(const char *p, const char *close)
{
    size_t n = (size_t)(close - p) - 1;

    if (memchr(p, '\\', n + 1) == NULL) {
        return json_stringn(p + 1, n);
    }
    return json_loadb(p, n + 2, JSON_DECODE_ANY, NULL); /* "id" and "\u0069d" are one key */
}

/*
 * The first top-level key written twice in valid JSON object text, decoded,
 * into `dup` (quoted for a message); 0 when every key is written once.
 * jansson keeps the last value of a repeated key, as PostgreSQL's jsonb
 * does, while other JSON readers keep the first: a handler could then read
 * another id or route than the one we checked. Only the top level: the
 * one-pass scanner, which never reads a payload as a tree, gives the same
 * verdict, and a relay never sends a repeated key at any level (jsonb).
 */
static int
repeated_member(const char *json, size_t len, char *dup, size_t cap)
{
    const char *p = skip_space(json, json + len), *end = json + len;
    json_t *seen = json_object();
    int found = 0;

    if (seen == NULL || p >= end || *p != '{') {
        json_decref(seen);
        return 0;
    }
    for (p++; p < end && !found;) {
        const char *key, *close;
        json_t *name;

        p = skip_space(p, end);
        if (p >= end || *p != '"') {
            break;
        }
        key = p;
        for (close = key + 1; close < end && *close != '"'; close++) {
            close += *close == '\\';
        }
        if (close >= end) {
            break;
        }
        name = key_string(key, close);
        if (json_is_string(name) &&
            json_object_getn(seen, json_string_value(name), json_string_length(name)) != NULL) {
            obx_quote_for_message(json_string_value(name), dup, cap);
            found = 1;
        } else if (json_is_string(name)) {
            json_object_setn_new(seen, json_string_value(name), json_string_length(name),
                                 json_true());
        }
        json_decref(name);
        p = skip_value(skip_space(skip_space(close + 1, end) + 1, end), end); /* past the ':' */
        if (p >= end || *p != ',') {
            break;
        }
        p++;
    }
    json_decref(seen);
    return found;
}

/* True if schema_version is written exactly as the integer 1. */
static int
version_text_is_one(const char *json, size_t len)
{
    const char *text;
    size_t n;

    member_text(json, len, "schema_version", &text, &n);
    return n == 1 && text[0] == '1';
}

/* schema_version's text as the error shows it: a number as written, anything else quoted. */
static void
version_text(const char *json, size_t len, char *out, size_t cap)
{
    const char *text;
    size_t n;
    char raw[48];

    member_text(json, len, "schema_version", &text, &n);
    if (n > 0 && n < sizeof(raw) && strspn(text, "0123456789+-.eE") >= n) {
        snprintf(out, cap, "%.*s", (int)n, text);
        return;
    }
    snprintf(raw, sizeof(raw), "%.*s", (int)(n < sizeof(raw) ? n : sizeof(raw) - 1),
             text != NULL ? text : "");
    obx_quote_for_message(raw, out, cap);
}

static outbox_status
check_shape(json_t *doc, const char *json, size_t len, outbox_error *err)
{
    char repeated[160];
    const char *key;
    json_t *value;

    if (!json_is_object(doc)) {
        return obx_fail(err, OUTBOX_EINVAL, "envelope must be a JSON object");
    }
    if (repeated_member(json, len, repeated, sizeof(repeated))) {
        return obx_fail(err, OUTBOX_EINVAL, "envelope has the key %s twice", repeated);
    }
    /* Missing fields first: a bare business payload reads best as "has no id". */
    for (size_t i = 0; i < sizeof(required_keys) / sizeof(required_keys[0]); i++) {
        if (json_object_get(doc, required_keys[i]) == NULL) {
            return obx_fail(err, OUTBOX_EINVAL, "envelope has no %s", required_keys[i]);
        }
    }
    json_object_foreach(doc, key, value)
    {
        size_t i = 0;

        while (i < sizeof(known_keys) / sizeof(known_keys[0]) && strcmp(key, known_keys[i]) != 0) {
            i++;
        }
        if (i == sizeof(known_keys) / sizeof(known_keys[0])) {
            char quoted[160];

            obx_quote_for_message(key, quoted, sizeof(quoted));
            return obx_fail(err, OUTBOX_EINVAL, "envelope has an unknown key %s", quoted);
        }
    }
    /* Parsed with integers as reals (so huge payload numbers load), 1.0 and 1e0 read as 1:
     * the text decides, since a consumer decoding an integer fails on them. */
    value = json_object_get(doc, "schema_version");
    if (!json_is_number(value) || json_number_value(value) != 1.0 ||
        !version_text_is_one(json, len)) {
        char shown[64];

        version_text(json, len, shown, sizeof(shown));
        return obx_fail(err, OUTBOX_EINVAL,
                        "envelope schema_version must be 1 (the integer), not %s", shown);
    }
    return obx_payload_check(json_object_get(doc, "payload"), err);
}

/*
 * aggregate_seq, when present, as its text says (numbers load as doubles,
 * which would round a large one): a whole number from 1.
 */
static outbox_status
tree_seq(json_t *doc, const char *json, size_t len, struct obx_envelope_slices *f,
         outbox_error *err)
{
    const char *text;
    size_t n;
    long long seq;
    char raw[48], shown[64];

    if (json_object_get(doc, "aggregate_seq") == NULL) {
        return OUTBOX_OK;
    }
    member_text(json, len, "aggregate_seq", &text, &n);
    if (json_is_number(json_object_get(doc, "aggregate_seq")) &&
        obx_envelope_seq_parse(text, n, &seq)) {
        f->seq_text = text;
        f->seq_len = n;
        return OUTBOX_OK;
    }
    snprintf(raw, sizeof(raw), "%.*s", (int)(n < sizeof(raw) ? n : sizeof(raw) - 1),
             text != NULL ? text : "");
    /* A number as written, anything else quoted, as schema_version's message. */
    if (json_is_number(json_object_get(doc, "aggregate_seq"))) {
        snprintf(shown, sizeof(shown), "%s", raw);
    } else {
        obx_quote_for_message(raw, shown, sizeof(shown));
    }
    return obx_fail(err, OUTBOX_EINVAL,
                    "envelope aggregate_seq must be a whole number from 1 to "
                    "9223372036854775807, not %s",
                    shown);
}

/* The envelope's string fields, in envelope_scan.h's member order. */
static const char **
field_slot(struct obx_envelope *env, int member)
{
    const char **slots[OBX_ENVELOPE_STRING_MEMBERS] = {
        [OBX_MEMBER_ID] = &env->head.id,
        [OBX_MEMBER_EVENT_TYPE] = &env->head.event_type,
        [OBX_MEMBER_AGGREGATE_TYPE] = &env->head.aggregate_type,
        [OBX_MEMBER_AGGREGATE_ID] = &env->head.aggregate_id,
        [OBX_MEMBER_TENANT_ID] = &env->head.tenant_id,
        [OBX_MEMBER_OCCURRED_AT] = &env->head.occurred_at,
        [OBX_MEMBER_DATA_SUBJECT] = &env->head.data_subject,
        [OBX_MEMBER_TRACEPARENT] = &env->head.traceparent,
    };

    return slots[member];
}

/* Copies the present string fields into one block the envelope owns. */
static outbox_status
keep_fields(struct obx_envelope *env, const struct obx_envelope_slices *f, outbox_error *err)
{
    size_t total = 0;
    char *at;

    for (int i = 0; i < OBX_ENVELOPE_STRING_MEMBERS; i++) {
        total += f->text[i] != NULL ? f->len[i] + 1 : 0;
    }
    env->store = malloc(total > 0 ? total : 1);
    if (env->store == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "envelope: out of memory");
    }
    at = env->store;
    env->head.aggregate_seq = 0;
    if (f->seq_text != NULL) {
        (void)obx_envelope_seq_parse(f->seq_text, f->seq_len, &env->head.aggregate_seq);
    }
    for (int i = 0; i < OBX_ENVELOPE_STRING_MEMBERS; i++) {
        *field_slot(env, i) = NULL;
        if (f->text[i] != NULL) {
            memcpy(at, f->text[i], f->len[i]);
            at[f->len[i]] = '\0';
            *field_slot(env, i) = at;
            at += f->len[i] + 1;
        }
    }
    return OUTBOX_OK;
}

/* The rules on the string fields, the same whichever way they were read. */
static outbox_status
check_fields(const struct obx_envelope *env, outbox_error *err)
{
    char canonical[OBX_UUID_TEXT_LEN + 1];
    outbox_status st = obx_check_uuid_field("id", env->head.id, canonical, err);

    /* Nats-Msg-Id is the id: a second spelling would escape deduplication. */
    if (st == OUTBOX_OK && strcmp(canonical, env->head.id) != 0) {
        st = obx_fail(err, OUTBOX_EINVAL, "envelope id \"%s\" is not lower-case", env->head.id);
    }
    if (st == OUTBOX_OK) {
        st = obx_route_check(env->head.aggregate_type, env->head.event_type, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_check_uuid_field("aggregate_id", env->head.aggregate_id, canonical, err);
    }
    /* The writers store it canonical; the column is a uuid, so no other spelling matches it,
     * and consumers compare it as text. */
    if (st == OUTBOX_OK && strcmp(canonical, env->head.aggregate_id) != 0) {
        st = obx_fail(err, OUTBOX_EINVAL, "envelope aggregate_id \"%s\" is not lower-case",
                      env->head.aggregate_id);
    }
    if (st == OUTBOX_OK) {
        st = obx_check_label_field("tenant_id", env->head.tenant_id, OUTBOX_MAX_TENANT_BYTES, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_check_label_field("data_subject", env->head.data_subject,
                                   OUTBOX_MAX_DATA_SUBJECT_BYTES, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_check_traceparent(env->head.traceparent, err);
    }
    /* Published as ce-time: a CloudEvents reader would move an impossible day or hour. */
    if (st == OUTBOX_OK) {
        st = obx_check_timestamp_field("envelope occurred_at", env->head.occurred_at, err);
    }
    return st;
}

/* The string members of a parsed tree, borrowed from it. */
static outbox_status
tree_fields(json_t *doc, struct obx_envelope_slices *f, outbox_error *err)
{
    static const int required[OBX_ENVELOPE_STRING_MEMBERS] = {
        [OBX_MEMBER_ID] = 1,
        [OBX_MEMBER_EVENT_TYPE] = 1,
        [OBX_MEMBER_AGGREGATE_TYPE] = 1,
        [OBX_MEMBER_AGGREGATE_ID] = 1,
        [OBX_MEMBER_OCCURRED_AT] = 1,
    };
    static const char *const names[OBX_ENVELOPE_STRING_MEMBERS] = {
        "id",        "event_type",  "aggregate_type", "aggregate_id",
        "tenant_id", "occurred_at", "data_subject",   "traceparent",
    };
    outbox_status st = OUTBOX_OK;

    memset(f, 0, sizeof(*f));
    for (int i = 0; i < OBX_ENVELOPE_STRING_MEMBERS && st == OUTBOX_OK; i++) {
        st = string_member(doc, names[i], required[i], &f->text[i], &f->len[i], err);
    }
    return st;
}

/* Copies the fields out and checks them; `*out` is written only on success. */
static outbox_status
take_fields(const struct obx_envelope_slices *fields, struct obx_envelope *out, outbox_error *err)
{
    struct obx_envelope env = {0};
    outbox_status status = keep_fields(&env, fields, err);

    if (status == OUTBOX_OK) {
        status = check_fields(&env, err);
    }
    if (status != OUTBOX_OK) {
        obx_envelope_fini(&env);
        return status;
    }
    *out = env;
    return OUTBOX_OK;
}

outbox_status
obx_envelope_parse_tree(const char *json, size_t len, size_t max_bytes, struct obx_envelope *out,
                        outbox_error *err)
{
    struct obx_envelope_slices fields;
    json_error_t jerr;
    json_t *doc;
    outbox_status status;

    if (len > max_bytes) {
        return obx_fail(err, OUTBOX_EINVAL, "envelope is %zu bytes, over the limit of %zu", len,
                        max_bytes);
    }
    doc = json_loadb(json, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &jerr);
    if (doc == NULL) {
        if (json_error_code(&jerr) == json_error_out_of_memory) {
            return obx_fail(err, OUTBOX_ENOMEM, "envelope: out of memory");
        }
        return obx_fail(err, OUTBOX_EINVAL, "envelope is not valid JSON: %s", jerr.text);
    }
    status = check_shape(doc, json, len, err);
    if (status == OUTBOX_OK) {
        status = tree_fields(doc, &fields, err);
    }
    if (status == OUTBOX_OK) {
        status = tree_seq(doc, json, len, &fields, err);
    }
    if (status == OUTBOX_OK) {
        status = take_fields(&fields, out, err);
    }
    json_decref(doc);
    return status;
}

outbox_status
obx_envelope_parse(const char *json, size_t len, size_t max_bytes, struct obx_envelope *out,
                   outbox_error *err)
{
    struct obx_envelope_slices fields;

    if (len > max_bytes || !obx_envelope_scan(json, len, &fields)) {
        return obx_envelope_parse_tree(json, len, max_bytes, out, err);
    }
    return take_fields(&fields, out, err);
}

void
obx_envelope_fini(struct obx_envelope *env)
{
    free(env->store);
    memset(env, 0, sizeof(*env));
}
