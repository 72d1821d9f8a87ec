/* SPDX-License-Identifier: MIT */
/*
 * stream_nats.c - creates the relay's stream or reconciles an existing one
 * (the JetStream feed shares it with check_only: create, never update).
 *
 * An existing stream is read and updated as raw JSON through the JetStream
 * API ($JS.API.STREAM.INFO / UPDATE) rather than through jsStreamConfig:
 * the update sends back the server's own config object with one field
 * changed, so fields this nats.c does not know (newer servers add some)
 * survive the update unchanged.
 */
#include "stream.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>
#include <nats/nats.h>

#include "bus.h"
#include "bus_nats.h"
#include "common/error.h"
#include "envelope/subject.h"
#include "stream_nats.h"
#include "support/js_api_nats.h"
#include "support/log.h"
#include "support/nats_conn_nats.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define NANOS_PER_SECOND OBX_NANOS_PER_SECOND
#define ERR_NAME_IN_USE  10058
#define ERR_NOT_FOUND    10059

void
obx_stream_options_init(struct obx_stream_options *o)
{
    o->name = "EVENTS";
    o->subjects_prefix = "events";
    o->max_age_seconds = 7 * 24 * 3600;
    o->max_bytes = -1;
    o->duplicate_window_seconds = 3600;
    o->replicas = 1;
    o->check_only = 0;
}

static outbox_status
check_options(const struct obx_stream_options *o, outbox_error *err)
{
    if (o->name == NULL || !obx_token_valid(o->name, strlen(o->name))) {
        return obx_fail(err, OUTBOX_EINVAL, "stream name must be one token of [A-Za-z0-9_-]");
    }
    if (obx_subject_prefix_check(o->subjects_prefix, err) != OUTBOX_OK) {
        return OUTBOX_EINVAL;
    }
    if (o->max_age_seconds < 0 || o->max_age_seconds > INT64_MAX / NANOS_PER_SECOND) {
        return obx_fail(err, OUTBOX_EINVAL, "stream max_age_seconds %" PRId64 " is out of range",
                        o->max_age_seconds);
    }
    if (o->duplicate_window_seconds <= 0 ||
        o->duplicate_window_seconds > INT64_MAX / NANOS_PER_SECOND) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "stream duplicate_window_seconds %" PRId64 " must be positive",
                        o->duplicate_window_seconds);
    }
    if (o->max_bytes != -1 && o->max_bytes <= 0) {
        return obx_fail(err, OUTBOX_EINVAL, "stream max_bytes %" PRId64 " must be -1 or positive",
                        o->max_bytes);
    }
    if (o->replicas < 1 || o->replicas > 5) {
        return obx_fail(err, OUTBOX_EINVAL, "stream_replicas %d must be 1 to 5", o->replicas);
    }
    return OUTBOX_OK;
}

/* One JetStream API request about a stream; *reply is the parsed answer, owned by the caller. */
static outbox_status
api_request(natsConnection *nc, const char *verb, const char *stream, const char *body,
            json_t **reply, outbox_error *err)
{
    char subject[160];

    snprintf(subject, sizeof(subject), "$JS.API.STREAM.%s.%s", verb, stream);
    return obx_js_api_request(nc, subject, body,
                              strcmp(verb, "INFO") == 0 ? OBX_JS_API_INFO_TIMEOUT_MS
                                                        : OBX_JS_API_TIMEOUT_MS,
                              "asking jetstream about the stream", reply, err);
}

/* The stream's config object (owned), or NULL in *config when there is no such stream. */
static outbox_status
fetch_config(natsConnection *nc, const char *name, json_t **config, outbox_error *err)
{
    json_t *reply = NULL;
    const char *text;
    int code;
    outbox_status st = api_request(nc, "INFO", name, "", &reply, err);

    if (st != OUTBOX_OK) {
        return st;
    }
    *config = NULL;
    if (obx_js_api_error(reply, &code, &text)) {
        if (code != ERR_NOT_FOUND) {
            st = obx_fail(err, OUTBOX_EUNAVAILABLE, "reading stream %s: %s (err_code=%d)", name,
                          text, code);
        }
    } else if (json_is_object(json_object_get(reply, "config"))) {
        *config = json_incref(json_object_get(reply, "config"));
    } else {
        st = obx_fail(err, OUTBOX_EUNAVAILABLE, "stream %s info has no config", name);
    }
    json_decref(reply);
    return st;
}

/* Refusals no retry will change: the configuration itself is the problem. */
static int
refusal_is_final(int code)
{
    return code == 10003 || code == 10027 || code == 10052 || code == 10065 || code == 10074;
}

/* OUTBOX_ECONFLICT when another replica created it first: reconcile instead. */
static outbox_status
create_stream(jsCtx *js, const struct obx_stream_options *o, outbox_error *err)
{
    char subject[OBX_SUBJECT_CAP];
    const char *subjects[1] = {subject};
    jsStreamConfig cfg;
    jsErrCode code = 0;
    natsStatus ns;

    snprintf(subject, sizeof(subject), "%s.>", o->subjects_prefix);
    jsStreamConfig_Init(&cfg);
    cfg.Name = o->name;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Retention = js_LimitsPolicy;
    cfg.Discard = js_DiscardOld;
    cfg.Replicas = o->replicas;
    cfg.MaxAge = o->max_age_seconds * NANOS_PER_SECOND;
    cfg.MaxBytes = o->max_bytes;
    cfg.Duplicates = o->duplicate_window_seconds * NANOS_PER_SECOND;
    cfg.DenyDelete = true;
    cfg.DenyPurge = true;
    ns = js_AddStream(NULL, js, &cfg, NULL, &code);
    if (ns == NATS_OK) {
        obx_log(OUTBOX_LOG_INFO, "stream created stream=%s subjects=%s replicas=%d", o->name,
                subject, o->replicas);
        return OUTBOX_OK;
    }
    if (code == ERR_NAME_IN_USE) {
        return OUTBOX_ECONFLICT;
    }
    if (ns == NATS_ERR && refusal_is_final((int)code)) {
        return obx_nats_fail(err, ns, OUTBOX_EINVAL, "creating the stream");
    }
    return obx_nats_fail(err, ns, OUTBOX_EUNAVAILABLE, "creating the stream");
}

/* True if the subject filter `have` matches every subject `want` ("events.>") does. */
static int
filter_covers(const char *have, const char *want)
{
    while (*have != '\0' && *want != '\0') {
        size_t hl = strcspn(have, "."), wl = strcspn(want, ".");

        if (hl == 1 && have[0] == '>') {
            return 1;
        }
        if (wl == 1 && want[0] == '>') {
            return 0; /* only '>' covers '>' */
        }
        if (!(hl == 1 && have[0] == '*') && (hl != wl || memcmp(have, want, hl) != 0)) {
            return 0;
        }
        have += hl + (have[hl] == '.');
        want += wl + (want[wl] == '.');
    }
    return *have == '\0' && *want == '\0';
}

static void
check_subjects(const struct obx_stream_options *o, json_t *config)
{
    json_t *subjects = json_object_get(config, "subjects"), *s;
    char want[OBX_SUBJECT_CAP], have[512] = "";
    size_t i, used = 0;

    snprintf(want, sizeof(want), "%s.>", o->subjects_prefix);
    json_array_foreach(subjects, i, s)
    {
        const char *f = json_string_value(s);

        if (f != NULL && filter_covers(f, want)) {
            return;
        }
        if (f != NULL && used < sizeof(have)) {
            used += (size_t)snprintf(have + used, sizeof(have) - used, "%s%s", used ? "," : "", f);
        }
    }
    obx_log(OUTBOX_LOG_WARN,
            "stream subjects do not capture the prefix stream=%s want=%s have=\"%s\" "
            "fix=\"nats stream edit %s --subjects '%s%s%s'\"",
            o->name, want, have, o->name, have, have[0] ? "," : "", want);
}

/* Sends the server's config back with only duplicate_window changed. */
static outbox_status
update_duplicate_window(natsConnection *nc, const struct obx_stream_options *o, json_t *config,
                        int64_t have_ns, outbox_error *err)
{
    int64_t want_ns = o->duplicate_window_seconds * NANOS_PER_SECOND;
    char want[32], have[32], *body;
    json_t *reply = NULL;
    const char *text;
    int code;
    outbox_status st;

    obx_js_format_duration(want_ns, want, sizeof(want));
    obx_js_format_duration(have_ns, have, sizeof(have));
    json_object_set_new(config, "duplicate_window", json_integer(want_ns));
    body = json_dumps(config, JSON_COMPACT);
    if (body == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory for the stream update");
    }
    st = api_request(nc, "UPDATE", o->name, body, &reply, err);
    free(body);
    if (st != OUTBOX_OK) {
        return st;
    }
    if (obx_js_api_error(reply, &code, &text)) {
        obx_log(OUTBOX_LOG_WARN,
                "stream settings differ and could not be updated stream=%s "
                "field=duplicate_window want=%s have=%s reason=\"%s (err_code=%d)\" "
                "fix=\"nats stream edit %s --dupe-window %s\"",
                o->name, want, have, text, code, o->name, want);
    } else {
        obx_log(OUTBOX_LOG_INFO, "stream updated stream=%s field=duplicate_window from=%s to=%s",
                o->name, have, want);
    }
    json_decref(reply);
    return OUTBOX_OK;
}

static outbox_status
reconcile(natsConnection *nc, const struct obx_stream_options *o, json_t *config, outbox_error *err)
{
    json_t *dw = json_object_get(config, "duplicate_window");
    int64_t have_ns = json_is_integer(dw) ? (int64_t)json_integer_value(dw) : -1;

    check_subjects(o, config);
    if (o->check_only || have_ns == o->duplicate_window_seconds * NANOS_PER_SECOND) {
        return OUTBOX_OK;
    }
    return update_duplicate_window(nc, o, config, have_ns, err);
}

outbox_status
obx_stream_ensure_nats(natsConnection *nc, jsCtx *js, const struct obx_stream_options *o,
                       outbox_error *err)
{
    json_t *config = NULL;
    outbox_status st = check_options(o, err);

    if (st != OUTBOX_OK) {
        return st;
    }
    if (nc == NULL || js == NULL || natsConnection_Status(nc) != NATS_CONN_STATUS_CONNECTED) {
        return obx_fail(err, OUTBOX_EUNAVAILABLE, "nats is not connected");
    }
    st = fetch_config(nc, o->name, &config, err);
    if (st == OUTBOX_OK && config == NULL) {
        st = create_stream(js, o, err);
        if (st != OUTBOX_ECONFLICT) {
            return st;
        }
        st = fetch_config(nc, o->name, &config, err);
        if (st == OUTBOX_OK && config == NULL) {
            st = obx_fail(err, OUTBOX_EUNAVAILABLE, "stream %s vanished while created", o->name);
        }
    }
    if (st == OUTBOX_OK) {
        st = reconcile(nc, o, config, err);
    }
    json_decref(config);
    return st;
}

outbox_status
obx_stream_ensure(struct obx_bus *bus, const struct obx_stream_options *o, outbox_error *err)
{
    /* Asked first: it may replace a connection nats.c closed for good. */
    if (!obx_bus_is_connected(bus)) {
        outbox_status st = check_options(o, err);

        return st != OUTBOX_OK ? st : obx_fail(err, OUTBOX_EUNAVAILABLE, "nats is not connected");
    }
    return obx_stream_ensure_nats(obx_bus_conn(bus), obx_bus_js(bus), o, err);
}
