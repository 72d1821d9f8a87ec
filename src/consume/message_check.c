/* SPDX-License-Identifier: MIT */
/*
 * message_check.c - the checks a received message passes before any
 * handler may see it (message_check.h), cheapest first: the header block's
 * size is known before the body is read, and the id and subject checks
 * need the parsed envelope.
 */
#include "message_check.h"

#include <stdint.h>
#include <string.h>

#include "bus/bus.h"
#include "common/error.h"
#include "common/text.h"
#include "common/uuid7.h"
#include "envelope/subject.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define REQUEUE_TAG        ":requeue:"
#define REQUEUE_MAX_DIGITS 10 /* an integer column's count */

const char *
obx_refusal_name(enum obx_refusal r)
{
    switch (r) {
    case OBX_REFUSED_HEADERS:
        return "headers";
    case OBX_REFUSED_ENVELOPE:
        return "envelope";
    case OBX_REFUSED_MSG_ID:
        return "msg_id";
    case OBX_REFUSED_SUBJECT:
        return "subject";
    case OBX_ACCEPTED:
        break;
    }
    return "";
}

/* True for ":requeue:" and 1..REQUEUE_MAX_DIGITS digits, nothing after. */
static int
is_requeue_suffix(const char *s)
{
    size_t digits = 0;

    if (strncmp(s, REQUEUE_TAG, strlen(REQUEUE_TAG)) != 0) {
        return 0;
    }
    for (s += strlen(REQUEUE_TAG); *s >= '0' && *s <= '9'; s++) {
        digits++;
    }
    return *s == '\0' && digits > 0 && digits <= REQUEUE_MAX_DIGITS;
}

/* True if `id` starts with a UUID (either case), whatever follows it. */
static int
starts_with_uuid(const char *id)
{
    char head[OBX_UUID_TEXT_LEN + 1];
    uint8_t bytes[16];

    if (strlen(id) < OBX_UUID_TEXT_LEN) {
        return 0;
    }
    memcpy(head, id, OBX_UUID_TEXT_LEN);
    head[OBX_UUID_TEXT_LEN] = '\0';
    return obx_uuid_parse(head, bytes) == 0;
}

/*
 * JetStream deduplicates by Nats-Msg-Id, and the ledger keys by the
 * envelope's id: the two must name the same event, spelled the way the
 * relay spells it (the envelope's id is canonical lower case), or a
 * message could take another event's place in the duplicate window.
 */
static enum obx_refusal
check_msg_id(const char *msg_id, const char *env_id, outbox_error *why)
{
    size_t len = strlen(env_id);
    char quoted[160];

    if (msg_id == NULL || msg_id[0] == '\0') {
        obx_fail(why, OUTBOX_EINVAL, "the message has no Nats-Msg-Id; the envelope's id is %s",
                 env_id);
        return OBX_REFUSED_MSG_ID;
    }
    if (strncmp(msg_id, env_id, len) == 0 &&
        (msg_id[len] == '\0' || is_requeue_suffix(msg_id + len))) {
        return OBX_ACCEPTED;
    }
    obx_quote_for_message(msg_id, quoted, sizeof(quoted));
    if (!starts_with_uuid(msg_id)) {
        obx_fail(why, OUTBOX_EINVAL,
                 "Nats-Msg-Id %s is not an event id (a UUID, or <id>" REQUEUE_TAG "<n>)", quoted);
    } else {
        obx_fail(why, OUTBOX_EINVAL, "Nats-Msg-Id %s differs from the envelope's id %s", quoted,
                 env_id);
    }
    return OBX_REFUSED_MSG_ID;
}

/* The subject must be the envelope's route: handlers are bound by subject filters. */
static enum obx_refusal
check_subject(const char *subject, const char *prefix, const struct obx_envelope_head *head,
              outbox_error *why)
{
    char route[OBX_SUBJECT_CAP], quoted[160];
    outbox_error e = {0};

    if (obx_subject_build(prefix, head->aggregate_type, head->event_type, route, &e) != OUTBOX_OK) {
        obx_fail(why, OUTBOX_EINVAL, "the envelope has no subject under prefix %s: %s", prefix,
                 e.message);
        return OBX_REFUSED_SUBJECT;
    }
    if (subject != NULL && strcmp(subject, route) == 0) {
        return OBX_ACCEPTED;
    }
    obx_quote_for_message(subject != NULL ? subject : "", quoted, sizeof(quoted));
    obx_fail(why, OUTBOX_EINVAL,
             "subject %s is not the envelope's subject %s "
             "({prefix}.{aggregate_type}.{event_type})",
             quoted, route);
    return OBX_REFUSED_SUBJECT;
}

enum obx_refusal
obx_message_check(const struct obx_feed_msg *m, const char *prefix, struct obx_envelope *env,
                  outbox_error *why)
{
    enum obx_refusal r;

    obx_error_reset(why);
    memset(env, 0, sizeof(*env));
    if (m->header_bytes > OBX_BUS_HEADER_BUDGET) {
        obx_fail(why, OUTBOX_EINVAL, "headers of %zu bytes, more than the %d a relay sends",
                 m->header_bytes, OBX_BUS_HEADER_BUDGET);
        return OBX_REFUSED_HEADERS;
    }
    if (m->envelope == NULL || m->envelope_len == 0) {
        obx_fail(why, OUTBOX_EINVAL, "the message has no body, so no envelope");
        return OBX_REFUSED_ENVELOPE;
    }
    if (obx_envelope_parse(m->envelope, m->envelope_len, SIZE_MAX, env, why) != OUTBOX_OK) {
        return OBX_REFUSED_ENVELOPE;
    }
    r = check_msg_id(m->event_id, env->head.id, why);
    if (r == OBX_ACCEPTED) {
        r = check_subject(m->subject, prefix, &env->head, why);
    }
    if (r != OBX_ACCEPTED) {
        obx_envelope_fini(env);
        memset(env, 0, sizeof(*env));
    }
    return r;
}
