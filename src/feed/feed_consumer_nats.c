/* SPDX-License-Identifier: MIT */
/*
 * feed_consumer_nats.c - creates the feed's durable pull consumer, or
 * reconciles an existing one.
 *
 * Like the stream (stream_nats.c), an existing consumer is read and
 * updated as raw JSON: the update sends the server's own config back with
 * one field changed, so every other field (a description, a hand-sized
 * max_ack_pending, fields this nats.c does not know) survives. One field
 * per update, and the answer is checked, so a refusal - or a server that
 * quietly keeps its value, as 2.9 does for ack_wait under a backoff
 * list - is logged for the field that caused it, with the command that
 * would change it.
 *
 * Only ack_wait and max_deliver are ours to change (DESIGN.md "Broker").
 * max_ack_pending is flow control an operator may have sized for the
 * whole group, so a lower value is reported, not overwritten.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>
#include <nats/nats.h>

#include "common/error.h"
#include "feed_nats_int.h"
#include "support/js_api_nats.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define ERR_CONSUMER_NOT_FOUND  10014
#define ERR_STREAM_NOT_FOUND    10059
#define DEFAULT_MAX_ACK_PENDING 1000 /* what the server sets when none is given */

/* INFO, or CREATE with a body; *reply owned by the caller. */
static outbox_status
consumer_request(natsConnection *nc, const struct obx_consumer_spec *spec, const char *verb,
                 const char *body, json_t **reply, outbox_error *err)
{
    char subject[300];

    snprintf(subject, sizeof(subject), "$JS.API.CONSUMER.%s.%s.%s", verb, spec->stream,
             spec->consumer);
    return obx_js_api_request(nc, subject, body,
                              strcmp(verb, "INFO") == 0 ? OBX_JS_API_INFO_TIMEOUT_MS
                                                        : OBX_JS_API_TIMEOUT_MS,
                              "asking jetstream about the consumer", reply, err);
}

/* The consumer's config (owned), or NULL in *config when it (or its stream) is missing. */
static outbox_status
fetch_config(natsConnection *nc, const struct obx_consumer_spec *spec, json_t **config,
             outbox_error *err)
{
    json_t *reply = NULL;
    const char *text;
    int code;
    outbox_status st = consumer_request(nc, spec, "INFO", "", &reply, err);

    *config = NULL;
    if (st != OUTBOX_OK) {
        return st;
    }
    if (obx_js_api_error(reply, &code, &text)) {
        if (code != ERR_CONSUMER_NOT_FOUND && code != ERR_STREAM_NOT_FOUND) {
            st = obx_fail(err, OUTBOX_EUNAVAILABLE, "reading consumer %s: %s (err_code=%d)",
                          spec->consumer, text, code);
        }
    } else if (json_is_object(json_object_get(reply, "config"))) {
        *config = json_incref(json_object_get(reply, "config"));
    } else {
        st = obx_fail(err, OUTBOX_EUNAVAILABLE, "consumer %s info has no config", spec->consumer);
    }
    json_decref(reply);
    return st;
}

/* Sends {"stream_name", "config"}; *answer is the server's resulting config, or an error. */
static outbox_status
send_config(natsConnection *nc, const struct obx_consumer_spec *spec, json_t *config,
            json_t **reply, outbox_error *err)
{
    json_t *req = json_pack("{s:s, s:O}", "stream_name", spec->stream, "config", config);
    char *body = req != NULL ? json_dumps(req, JSON_COMPACT) : NULL;
    outbox_status st;

    json_decref(req);
    if (body == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory for the consumer request");
    }
    st = consumer_request(nc, spec, "DURABLE.CREATE", body, reply, err);
    free(body);
    return st;
}

static outbox_status
create_consumer(natsConnection *nc, const struct obx_consumer_spec *spec, outbox_error *err)
{
    json_t *config =
        json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:I}", "durable_name", spec->consumer,
                  "deliver_policy", "all", "ack_policy", "explicit", "ack_wait",
                  (json_int_t)spec->ack_wait_ns, "max_deliver", (json_int_t)spec->max_deliver,
                  "filter_subject", spec->filter, "replay_policy", "instant", "max_ack_pending",
                  (json_int_t)spec->max_ack_pending);
    json_t *reply = NULL;
    const char *text;
    int code;
    outbox_status st;

    if (config == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory for the consumer config");
    }
    st = send_config(nc, spec, config, &reply, err);
    json_decref(config);
    if (st == OUTBOX_OK && obx_js_api_error(reply, &code, &text)) {
        st = obx_fail(err, code == 10003 || code == 10025 ? OUTBOX_EINVAL : OUTBOX_EUNAVAILABLE,
                      "creating consumer %s on stream %s: %s (err_code=%d)", spec->consumer,
                      spec->stream, text, code);
    } else if (st == OUTBOX_OK) {
        char wait[32];

        obx_js_format_duration(spec->ack_wait_ns, wait, sizeof(wait));
        obx_log(OUTBOX_LOG_INFO,
                "consumer created stream=%s consumer=%s filter=%s ack_wait=%s max_deliver=%lld "
                "max_ack_pending=%lld",
                spec->stream, spec->consumer, spec->filter, wait, spec->max_deliver,
                spec->max_ack_pending);
    }
    json_decref(reply);
    return st;
}

/* One field the feed owns: its JSON name, how it reads and how the nats CLI sets it. */
struct field {
    const char *name;
    json_int_t want;
    int is_duration;
    const char *flag; /* "--wait " or "--max-deliver=" */
};

static void
field_text(const struct field *fd, json_int_t v, char *out, size_t cap)
{
    if (fd->is_duration) {
        obx_js_format_duration((int64_t)v, out, cap);
    } else {
        snprintf(out, cap, "%" JSON_INTEGER_FORMAT, v);
    }
}

/* max_deliver: the server writes unlimited as -1 or leaves it out (0). */
static json_int_t
field_value(const struct field *fd, json_t *config)
{
    json_int_t v = json_integer_value(json_object_get(config, fd->name));

    return !fd->is_duration && v <= 0 ? -1 : v;
}

static void
warn_refused(const struct obx_consumer_spec *spec, const struct field *fd, json_int_t have,
             const char *reason)
{
    char want_text[32], have_text[32];

    field_text(fd, fd->want, want_text, sizeof(want_text));
    field_text(fd, have, have_text, sizeof(have_text));
    obx_log(OUTBOX_LOG_WARN,
            "consumer settings differ and could not be updated consumer=%s field=%s want=%s "
            "have=%s reason=\"%s\" fix=\"nats consumer edit %s %s %s%s\"",
            spec->consumer, fd->name, want_text, have_text, reason, spec->stream, spec->consumer,
            fd->flag, want_text);
}

/* Judges the update's answer; *config becomes the server's current config when it has one. */
static void
judge_update(const struct obx_consumer_spec *spec, const struct field *fd, json_int_t have,
             json_t *reply, json_t **config)
{
    json_t *now = json_object_get(reply, "config");
    const char *text;
    char reason[300], from[32], to[32];
    int code;

    if (obx_js_api_error(reply, &code, &text)) {
        snprintf(reason, sizeof(reason), "%s (err_code=%d)", text, code);
        warn_refused(spec, fd, have, reason);
        return;
    }
    if (json_is_object(now)) {
        json_decref(*config);
        *config = json_incref(now);
    }
    if (field_value(fd, *config) != fd->want) {
        warn_refused(spec, fd, field_value(fd, *config), "the server kept its value");
        return;
    }
    field_text(fd, have, from, sizeof(from));
    field_text(fd, fd->want, to, sizeof(to));
    obx_log(OUTBOX_LOG_INFO, "consumer updated stream=%s consumer=%s field=%s from=%s to=%s",
            spec->stream, spec->consumer, fd->name, from, to);
}

/* Sends the server's config back with only `fd` changed, if it differs. */
static outbox_status
update_field(natsConnection *nc, const struct obx_consumer_spec *spec, const struct field *fd,
             json_t **config, outbox_error *err)
{
    json_int_t have = field_value(fd, *config);
    json_t *changed, *reply = NULL;
    outbox_status st;

    if (have == fd->want) {
        return OUTBOX_OK;
    }
    changed = json_deep_copy(*config);
    if (changed == NULL || json_object_set_new(changed, fd->name, json_integer(fd->want)) != 0) {
        json_decref(changed);
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory for the consumer update");
    }
    st = send_config(nc, spec, changed, &reply, err);
    json_decref(changed);
    if (st == OUTBOX_OK) {
        judge_update(spec, fd, have, reply, config);
    }
    json_decref(reply);
    return st;
}

/* What the feed needs but must not change: logged for the operator. */
static void
check_fixed_fields(const struct obx_consumer_spec *spec, json_t *config)
{
    const char *filter = json_string_value(json_object_get(config, "filter_subject"));
    json_t *backoff = json_object_get(config, "backoff");
    json_int_t pending = json_integer_value(json_object_get(config, "max_ack_pending"));

    if (filter != NULL && filter[0] != '\0' && strcmp(filter, spec->filter) != 0) {
        obx_log(OUTBOX_LOG_WARN, "consumer filter differs consumer=%s want=%s have=%s",
                spec->consumer, spec->filter, filter);
    }
    if (json_array_size(backoff) > 0) {
        obx_log(OUTBOX_LOG_WARN,
                "consumer has a backoff list, which overrides ack_wait consumer=%s "
                "fix=\"recreate the consumer without backoff\"",
                spec->consumer);
    }
    pending = pending == 0 ? DEFAULT_MAX_ACK_PENDING : pending;
    if (pending != -1 && (spec->max_ack_pending == -1 || pending < spec->max_ack_pending)) {
        obx_log(OUTBOX_LOG_WARN,
                "consumer max_ack_pending is below the configured value consumer=%s want=%lld "
                "have=%" JSON_INTEGER_FORMAT " fix=\"nats consumer edit %s %s --max-pending=%lld\"",
                spec->consumer, spec->max_ack_pending, pending, spec->stream, spec->consumer,
                spec->max_ack_pending);
    }
}

static outbox_status
reconcile(natsConnection *nc, const struct obx_consumer_spec *spec, json_t **config,
          outbox_error *err)
{
    const char *deliver = json_string_value(json_object_get(*config, "deliver_subject"));
    const struct field fields[] = {
        {"ack_wait", (json_int_t)spec->ack_wait_ns, 1, "--wait "},
        {"max_deliver", (json_int_t)spec->max_deliver, 0, "--max-deliver="},
    };
    outbox_status st = OUTBOX_OK;

    if (deliver != NULL && deliver[0] != '\0') {
        return obx_fail(err, OUTBOX_EINVAL,
                        "consumer %s on stream %s is a push consumer; a pull consumer is needed "
                        "(nats consumer rm %s %s)",
                        spec->consumer, spec->stream, spec->stream, spec->consumer);
    }
    check_fixed_fields(spec, *config);
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]) && st == OUTBOX_OK; i++) {
        st = update_field(nc, spec, &fields[i], config, err);
    }
    return st;
}

outbox_status
obx_consumer_ensure(natsConnection *nc, const struct obx_consumer_spec *spec, outbox_error *err)
{
    json_t *config = NULL;
    outbox_status st = fetch_config(nc, spec, &config, err);

    if (st == OUTBOX_OK && config == NULL) {
        st = create_consumer(nc, spec, err);
        if (st == OUTBOX_OK) {
            st = fetch_config(nc, spec, &config, err); /* another replica may have won */
        }
        if (st == OUTBOX_OK && config == NULL) {
            st = obx_fail(err, OUTBOX_EUNAVAILABLE, "consumer %s vanished while created",
                          spec->consumer);
        }
    }
    if (st == OUTBOX_OK) {
        st = reconcile(nc, spec, &config, err);
    }
    json_decref(config);
    return st;
}

outbox_status
obx_consumer_exists(natsConnection *nc, const struct obx_consumer_spec *spec, int *exists,
                    outbox_error *err)
{
    json_t *config = NULL;
    outbox_status st = fetch_config(nc, spec, &config, err);

    if (st == OUTBOX_OK) {
        *exists = config != NULL;
    }
    json_decref(config);
    return st;
}
