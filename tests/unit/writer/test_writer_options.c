/* SPDX-License-Identifier: MIT */
/*
 * test_writer_options.c - writer configuration and the checks that need
 * no server: transaction state and batch validation.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/outbox.h"

Test(writer_options, defaults_are_schema_outbox_and_512_kib)
{
    outbox_config *cfg = outbox_config_new(OUTBOX_CONFIG_WRITER);
    char value[64];

    cr_assert_not_null(cfg);
    cr_assert_eq(outbox_config_get(cfg, "schema", value, sizeof(value), NULL), OUTBOX_OK);
    cr_assert_str_eq(value, "outbox");
    cr_assert_eq(outbox_config_get(cfg, "max_envelope_bytes", value, sizeof(value), NULL),
                 OUTBOX_OK);
    cr_assert_eq(atoll(value), OUTBOX_DEFAULT_MAX_ENVELOPE_BYTES, "%s", value);
    cr_assert_eq(atoll(value), 512 * 1024);
    outbox_config_free(cfg);
}

Test(writer_options, refuses_a_hostile_schema_and_an_absurd_limit)
{
    outbox_config *cfg = outbox_config_new(OUTBOX_CONFIG_WRITER);
    char value[64];
    outbox_error err;

    cr_assert_eq(outbox_config_set(cfg, "schema", "x\"; DROP SCHEMA outbox CASCADE; --", &err),
                 OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "schema") != NULL, "%s", err.message);
    cr_assert_eq(outbox_config_set_int(cfg, "max_envelope_bytes", 10, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "max_envelope_bytes=\"10\"") != NULL, "%s", err.message);
    cr_assert(strstr(err.message, "from 1024 to 67108864") != NULL, "%s", err.message);

    /* A refused value changes nothing. */
    cr_assert_eq(outbox_config_get(cfg, "schema", value, sizeof(value), NULL), OUTBOX_OK);
    cr_assert_str_eq(value, "outbox");
    cr_assert_eq(outbox_config_get(cfg, "max_envelope_bytes", value, sizeof(value), NULL),
                 OUTBOX_OK);
    cr_assert_str_eq(value, "524288");
    outbox_config_free(cfg);
}

Test(writer_options, a_writer_refuses_a_configuration_of_another_kind)
{
    outbox_config *relay = outbox_config_new(OUTBOX_CONFIG_RELAY);
    outbox_writer *w = NULL;
    outbox_error err;

    cr_assert_eq(outbox_writer_new(relay, &w, &err), OUTBOX_EINVAL);
    cr_assert_null(w);
    cr_assert(strstr(err.message, "writer configuration") != NULL, "%s", err.message);
    outbox_config_free(relay);
}

Test(writer_options, a_smaller_limit_refuses_a_larger_envelope)
{
    outbox_config *cfg = outbox_config_new(OUTBOX_CONFIG_WRITER);
    outbox_writer *w = NULL;
    outbox_event *ev = outbox_event_new();
    char payload[2100];
    outbox_error err;

    memset(payload, 'x', sizeof(payload));
    memcpy(payload, "{\"a\":\"", 6);
    memcpy(payload + sizeof(payload) - 3, "\"}", 3);
    cr_assert_eq(outbox_config_set_int(cfg, "max_envelope_bytes", 2048, NULL), OUTBOX_OK);
    cr_assert_eq(outbox_writer_new(cfg, &w, NULL), OUTBOX_OK);
    outbox_config_free(cfg);
    outbox_event_set_route(ev, "movie", "x", NULL);
    outbox_event_set_aggregate_id(ev, "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b", NULL);
    cr_assert_eq(outbox_event_set_payload_json(ev, payload, strlen(payload), &err), OUTBOX_OK, "%s",
                 err.message);
    cr_assert_eq(outbox_writer_enqueue(w, NULL, ev, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "over the limit of 2048") != NULL, "%s", err.message);
    outbox_event_free(ev);
    outbox_writer_free(w);
}

Test(writer_options, a_batch_names_its_first_invalid_event)
{
    outbox_event *events[3];
    outbox_error err;

    for (int i = 0; i < 3; i++) {
        events[i] = outbox_event_new();
        outbox_event_set_route(events[i], "movie", "x", NULL);
        outbox_event_set_payload_json(events[i], "{}", 2, NULL);
        if (i != 1) {
            outbox_event_set_aggregate_id(events[i], "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b", NULL);
        }
    }
    cr_assert_eq(outbox_enqueue_batch(NULL, events, 3, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "event 1") != NULL, "%s", err.message);
    cr_assert(strstr(err.message, "aggregate_id is required") != NULL, "%s", err.message);
    for (int i = 0; i < 3; i++) {
        outbox_event_free(events[i]);
    }
}

Test(writer_options, setters_leave_the_event_unchanged_on_failure)
{
    outbox_event *ev = outbox_event_new();
    const char *json;
    size_t len;

    outbox_event_set_route(ev, "movie", "x", NULL);
    outbox_event_set_aggregate_id(ev, "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b", NULL);
    outbox_event_set_payload_json(ev, "{\"keep\":1}", 10, NULL);
    cr_assert_eq(outbox_event_set_route(ev, "movie", "movie.bad", NULL), OUTBOX_EINVAL);
    cr_assert_eq(outbox_event_set_payload_json(ev, "[]", 2, NULL), OUTBOX_EINVAL);
    cr_assert_eq(outbox_event_envelope_json(ev, &json, &len, NULL), OUTBOX_OK);
    cr_assert(strstr(json, "\"event_type\":\"x\"") != NULL, "%s", json);
    cr_assert(strstr(json, "\"payload\":{\"keep\":1}") != NULL, "%s", json);
    outbox_event_free(ev);
}
