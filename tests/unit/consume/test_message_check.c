/* SPDX-License-Identifier: MIT */
/*
 * test_message_check.c - the verdict on each received message before any
 * handler sees it: what a relay sends (and outboxctl's requeue) passes;
 * oversized headers, no envelope, a forged or missing Nats-Msg-Id and a
 * subject that is not the envelope's are refused, each with its check's
 * name and a reason that names the value at fault.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "consume/message_check.h"

#define ID    "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b"
#define OTHER "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5c"
#define ENVELOPE                                                                        \
    "{\"id\":\"" ID "\",\"event_type\":\"review.logged\",\"aggregate_type\":\"movie\"," \
    "\"aggregate_id\":\"0b0e3c3e-8c1e-4d6a-9a51-5c1f0b9d2a11\","                        \
    "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,\"payload\":{}}"

static struct obx_feed_msg
relay_msg(void)
{
    return (struct obx_feed_msg){.event_id = ID,
                                 .subject = "events.movie.review.logged",
                                 .envelope = ENVELOPE,
                                 .envelope_len = strlen(ENVELOPE),
                                 .deliveries = 1,
                                 .header_bytes = 300};
}

/* Checks `m`; expects refusal `want` (OBX_ACCEPTED: accepted) with `reason` in the message. */
static void
expect(const struct obx_feed_msg *m, enum obx_refusal want, const char *reason)
{
    struct obx_envelope env;
    outbox_error why = {0};
    enum obx_refusal got = obx_message_check(m, "events", &env, &why);

    cr_assert_eq(got, want, "got %s (%s), wanted %s", obx_refusal_name(got), why.message,
                 obx_refusal_name(want));
    if (want == OBX_ACCEPTED) {
        cr_assert_str_eq(env.head.id, ID);
        obx_envelope_fini(&env);
        return;
    }
    cr_assert_null(env.store, "a refused message keeps no envelope");
    cr_assert(strstr(why.message, reason) != NULL, "reason \"%s\" does not say \"%s\"", why.message,
              reason);
}

Test(message_check, what_a_relay_sends_and_a_requeue_pass)
{
    struct obx_feed_msg m = relay_msg();

    expect(&m, OBX_ACCEPTED, NULL);
    m.event_id = ID ":requeue:1";
    expect(&m, OBX_ACCEPTED, NULL);
    m.event_id = ID ":requeue:4294967295";
    expect(&m, OBX_ACCEPTED, NULL);
    m.header_bytes = 4096;
    expect(&m, OBX_ACCEPTED, NULL);
}

Test(message_check, headers_larger_than_a_relay_sends_are_refused_before_the_body_is_read)
{
    struct obx_feed_msg m = relay_msg();

    m.header_bytes = 4097;
    m.envelope = "not even json";
    m.envelope_len = strlen(m.envelope);
    expect(&m, OBX_REFUSED_HEADERS, "headers of 4097 bytes, more than the 4096 a relay sends");
}

Test(message_check, a_body_that_is_no_envelope_is_refused)
{
    struct obx_feed_msg m = relay_msg();

    m.envelope = "";
    m.envelope_len = 0;
    expect(&m, OBX_REFUSED_ENVELOPE, "no body");
    m.envelope = NULL;
    expect(&m, OBX_REFUSED_ENVELOPE, "no body");
    m.envelope = "{\"id\":";
    m.envelope_len = strlen(m.envelope);
    expect(&m, OBX_REFUSED_ENVELOPE, "not valid JSON");
    m.envelope = "{\"id\":\"" ID "\"}";
    m.envelope_len = strlen(m.envelope);
    expect(&m, OBX_REFUSED_ENVELOPE, "envelope has no event_type");
}

/*
 * {"id":OTHER,...,"id":ID}: the checks would pass on the last id, a
 * first-wins reader in a handler would see OTHER. Refused, naming the key.
 */
Test(message_check, an_envelope_with_a_key_twice_is_refused)
{
    static const char twice[] = "{\"id\":\"" OTHER "\",\"id\":\"" ID "\","
                                "\"event_type\":\"review.logged\",\"aggregate_type\":\"movie\","
                                "\"aggregate_id\":\"0b0e3c3e-8c1e-4d6a-9a51-5c1f0b9d2a11\","
                                "\"occurred_at\":\"2026-11-29T09:41:56.123Z\","
                                "\"schema_version\":1,\"payload\":{}}";
    struct obx_feed_msg m = relay_msg();

    m.envelope = twice;
    m.envelope_len = strlen(twice);
    expect(&m, OBX_REFUSED_ENVELOPE, "envelope has the key \"id\" twice");
}

Test(message_check, a_missing_or_forged_nats_msg_id_is_refused)
{
    struct obx_feed_msg m = relay_msg();
    const char *differs[] = {OTHER,
                             "0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B",
                             ID ":requeue:",
                             ID ":requeue:x",
                             ID ":requeue:12345678901",
                             ID ".again",
                             ID " "};

    m.event_id = "";
    expect(&m, OBX_REFUSED_MSG_ID, "has no Nats-Msg-Id");
    m.event_id = NULL;
    expect(&m, OBX_REFUSED_MSG_ID, "has no Nats-Msg-Id");
    m.event_id = "forged-1";
    expect(&m, OBX_REFUSED_MSG_ID, "Nats-Msg-Id \"forged-1\" is not an event id");
    m.event_id = "0190a3b2-1c2d";
    expect(&m, OBX_REFUSED_MSG_ID, "is not an event id");
    for (size_t i = 0; i < sizeof(differs) / sizeof(differs[0]); i++) {
        m.event_id = differs[i];
        expect(&m, OBX_REFUSED_MSG_ID, "differs from the envelope's id " ID);
    }
}

Test(message_check, a_subject_that_is_not_the_envelopes_is_refused)
{
    struct obx_feed_msg m = relay_msg();
    const char *subjects[] = {"events.movie",
                              "events.account.deleted",
                              "events.movie.review",
                              "events.movie.review.logged.x",
                              "other.movie.review.logged",
                              "events.Movie.review.logged",
                              ""};

    for (size_t i = 0; i < sizeof(subjects) / sizeof(subjects[0]); i++) {
        char want[160];

        m.subject = subjects[i];
        snprintf(want, sizeof(want),
                 "subject \"%s\" is not the envelope's subject events.movie.review.logged",
                 subjects[i]);
        expect(&m, OBX_REFUSED_SUBJECT, want);
    }
    m.subject = NULL;
    expect(&m, OBX_REFUSED_SUBJECT, "events.movie.review.logged");
}
