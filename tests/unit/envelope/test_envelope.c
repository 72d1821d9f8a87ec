/* SPDX-License-Identifier: MIT */
/*
 * test_envelope.c - what the writer serializes, the relay parses back and
 * accepts; what breaks a rule, the relay refuses with a reason.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "envelope/envelope.h"
#include "outbox/outbox.h"

static char *
sample_envelope(void)
{
    outbox_event *ev = outbox_event_new();
    const char *json;
    size_t len;
    char *copy;

    cr_assert_eq(outbox_event_set_route(ev, "movie", "review.logged", NULL), OUTBOX_OK);
    cr_assert_eq(outbox_event_set_aggregate_id(ev, "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b", NULL),
                 OUTBOX_OK);
    cr_assert_eq(outbox_event_set_payload_json(ev, "{\"stars\": 5}", 12, NULL), OUTBOX_OK);
    cr_assert_eq(outbox_event_set_tenant_id(ev, "acme \"eu\"", NULL), OUTBOX_OK);
    cr_assert_eq(outbox_event_envelope_json(ev, &json, &len, NULL), OUTBOX_OK);
    copy = strndup(json, len);
    outbox_event_free(ev);
    return copy;
}

Test(envelope, what_the_writer_serializes_the_relay_accepts)
{
    char *json = sample_envelope();
    struct obx_envelope env;
    outbox_error err = {0};

    cr_assert_eq(obx_envelope_parse(json, strlen(json), 524288, &env, &err), OUTBOX_OK, "%s",
                 err.message);
    cr_assert_str_eq(env.head.aggregate_type, "movie");
    cr_assert_str_eq(env.head.event_type, "review.logged");
    cr_assert_str_eq(env.head.tenant_id, "acme \"eu\"");
    cr_assert_null(env.head.traceparent);
    cr_assert_eq(strlen(env.head.id), 36);
    obx_envelope_fini(&env);
    free(json);
}

Test(envelope, the_event_id_is_the_envelope_id)
{
    outbox_event *ev = outbox_event_new();
    const char *json;
    size_t len;
    char needle[64];

    outbox_event_set_route(ev, "movie", "x", NULL);
    outbox_event_set_aggregate_id(ev, "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b", NULL);
    outbox_event_set_payload_json(ev, "{}", 2, NULL);
    cr_assert_eq(outbox_event_envelope_json(ev, &json, &len, NULL), OUTBOX_OK);
    snprintf(needle, sizeof(needle), "{\"id\":\"%s\"", outbox_event_id(ev));
    cr_assert(strncmp(json, needle, strlen(needle)) == 0, "%s", json);
    cr_assert(strstr(json, "\"schema_version\":1") != NULL);
    outbox_event_free(ev);
}

static void
assert_refused(const char *json, const char *reason)
{
    struct obx_envelope env = {0};
    outbox_error err = {0};

    cr_assert_eq(obx_envelope_parse(json, strlen(json), 524288, &env, &err), OUTBOX_EINVAL,
                 "accepted %s", json);
    cr_assert(strstr(err.message, reason) != NULL, "reason \"%s\" lacks \"%s\"", err.message,
              reason);
    cr_assert_null(env.store, "out-parameter written on failure");
}

#define ENV_HEAD                                                                                   \
    "{\"id\":\"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b\",\"aggregate_id\":\"0190a3b2-1c2d-7e3f-8a9b-" \
    "0c1d2e3f4a5b\","

Test(envelope, the_relay_refuses_what_no_writer_may_write)
{
    assert_refused("{\"stars\":5}", "envelope has no id");
    assert_refused("[1]", "envelope must be a JSON object");
    assert_refused("{", "envelope is not valid JSON");
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":2,"
                            "\"payload\":{}}",
                   "schema_version must be 1");
    assert_refused(ENV_HEAD "\"event_type\":\"movie.x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
                            "\"payload\":{}}",
                   "must not start with aggregate_type");
    assert_refused(ENV_HEAD "\"event_type\":\"x y\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
                            "\"payload\":{}}",
                   "event_type \"x y\"");
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
                            "\"payload\":[]}",
                   "payload must be a JSON object, not array");
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"yesterday\",\"schema_version\":1,\"payload\":{}}",
                   "occurred_at");
    /* The digits' pattern, but no such day, hour or offset: a reader would move the event. */
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-02-30T10:00:00Z\",\"schema_version\":1,"
                            "\"payload\":{}}",
                   "occurred_at \"2026-02-30T10:00:00Z\" is not a real date and time");
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-02-10T24:00:00Z\",\"schema_version\":1,"
                            "\"payload\":{}}",
                   "occurred_at \"2026-02-10T24:00:00Z\" is not a real date and time");
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-13-10T10:00:00Z\",\"schema_version\":1,"
                            "\"payload\":{}}",
                   "occurred_at \"2026-13-10T10:00:00Z\" is not a real date and time");
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-02-10T10:00:00+99:99\",\"schema_version\":1,"
                            "\"payload\":{}}",
                   "occurred_at \"2026-02-10T10:00:00+99:99\" is not a real date and time");
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\",\"extra\":1,"
                            "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
                            "\"payload\":{}}",
                   "unknown key \"extra\"");
    assert_refused("{\"id\":\"0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B\",\"aggregate_id\":"
                   "\"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b\",\"event_type\":\"x\","
                   "\"aggregate_type\":\"movie\",\"occurred_at\":\"2026-11-29T09:41:56.123Z\","
                   "\"schema_version\":1,\"payload\":{}}",
                   "is not lower-case");
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
                            "\"payload\":{\"a\":\"x\\u0000y\"}}",
                   "NUL character");
}

Test(envelope, the_relay_refuses_an_envelope_over_its_size_limit)
{
    char *json = sample_envelope();
    struct obx_envelope env = {0};
    outbox_error err = {0};

    cr_assert_eq(obx_envelope_parse(json, strlen(json), 100, &env, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "over the limit of 100") != NULL, "%s", err.message);
    free(json);
}

#define ENV_BODY(version)                                                               \
    ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","                       \
             "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":" version \
             ",\"payload\":{}}"

static void
assert_accepted(const char *json)
{
    struct obx_envelope env = {0};
    outbox_error err = {0};

    cr_assert_eq(obx_envelope_parse(json, strlen(json), 524288, &env, &err), OUTBOX_OK,
                 "refused %s: %s", json, err.message);
    obx_envelope_fini(&env);
}

/*
 * Only the integer 1 is version 1: a consumer decoding an integer fails on
 * 1.0 or 1e0, which read as 1 once integers are parsed as reals.
 */
Test(envelope, schema_version_is_the_integer_1_as_written)
{
    assert_accepted(ENV_BODY("1"));
    assert_accepted(ENV_BODY(" 1 "));
    assert_refused(ENV_BODY("1.0"), "schema_version must be 1 (the integer), not 1.0");
    assert_refused(ENV_BODY("1e0"), "schema_version must be 1 (the integer), not 1e0");
    assert_refused(ENV_BODY("1.00000000000000000001"), "not 1.00000000000000000001");
    assert_refused(ENV_BODY("\"1\""), "schema_version must be 1 (the integer), not \"\\\"1\\\"\"");
    assert_refused(ENV_BODY("9223372036854775808"), "not 9223372036854775808");
    assert_refused(ENV_BODY("-1"), "not -1");
    assert_refused(ENV_BODY("true"), "schema_version must be 1");
    /* The same key spelled with an escape, after a good one: jansson would keep the last;
     * a key written twice is refused before its values are read. */
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
                            "\"payload\":{\"schema_version\":1},\"schema\\u005fversion\":1.0}",
                   "envelope has the key \"schema_version\" twice");
}

Test(envelope, the_relay_refuses_an_aggregate_id_that_is_not_lower_case)
{
    assert_refused("{\"id\":\"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b\",\"aggregate_id\":"
                   "\"0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B\",\"event_type\":\"x\","
                   "\"aggregate_type\":\"movie\",\"occurred_at\":\"2026-11-29T09:41:56.123Z\","
                   "\"schema_version\":1,\"payload\":{}}",
                   "aggregate_id \"0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B\" is not lower-case");
}

Test(envelope, an_envelope_must_repeat_its_rows_columns)
{
    struct obx_envelope_head env = {.id = "i",
                                    .event_type = "review.logged",
                                    .aggregate_type = "movie",
                                    .aggregate_id = "a",
                                    .tenant_id = "t1"};
    struct obx_envelope_row row = {.head = env,
                                   .known = OBX_ROW_EVENT_TYPE | OBX_ROW_AGGREGATE_TYPE |
                                            OBX_ROW_AGGREGATE_ID | OBX_ROW_TENANT_ID |
                                            OBX_ROW_DATA_SUBJECT};
    outbox_error err = {0};

    cr_assert_eq(obx_envelope_match_row(&env, &row, &err), OUTBOX_OK);
    row.head.aggregate_type = "book";
    cr_assert_eq(obx_envelope_match_row(&env, &row, &err), OUTBOX_EINVAL);
    cr_assert_str_eq(err.message, "envelope aggregate_type differs from the row aggregate_type: "
                                  "\"movie\" in the envelope, \"book\" in the row");
    row.head.aggregate_type = "movie";
    row.head.tenant_id = NULL;
    err = (outbox_error){0}; /* the first error wins */
    cr_assert_eq(obx_envelope_match_row(&env, &row, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "tenant_id differs from the row tenant_id: \"t1\" in the "
                                  "envelope, (absent) in the row") != NULL,
              "%s", err.message);
    row.head.tenant_id = "t1";
    row.head.data_subject = "s";
    err = (outbox_error){0};
    cr_assert_eq(obx_envelope_match_row(&env, &row, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "data_subject") != NULL, "%s", err.message);
    /* A column the reader did not fetch (a dead letter's) is not compared. */
    row.known &= ~(unsigned)OBX_ROW_DATA_SUBJECT;
    cr_assert_eq(obx_envelope_match_row(&env, &row, &err), OUTBOX_OK);
}

/*
 * A top-level key written twice is refused, naming it: jansson (and jsonb)
 * keep the last value, other readers the first, so a handler could read
 * another id or route than the one checked. A repeated key inside the
 * payload is the payload's business (a relay never sends one: jsonb).
 */
Test(envelope, a_top_level_key_written_twice_is_refused_naming_it)
{
    assert_refused(ENV_HEAD "\"id\":\"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5c\",\"event_type\":\"x\","
                            "\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
                            "\"payload\":{}}",
                   "envelope has the key \"id\" twice");
    /* The same key spelled with an escape. */
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"aggregate_typ\\u0065\":\"account\","
                            "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
                            "\"payload\":{}}",
                   "envelope has the key \"aggregate_type\" twice");
    assert_refused(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                            "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
                            "\"payload\":{},\"payload\":{\"stars\":1}}",
                   "envelope has the key \"payload\" twice");
    assert_accepted(ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","
                             "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1,"
                             "\"payload\":{\"a\":{\"b\":1},\"c\":{\"b\":2}}}");
}

#define ENV_SEQ(seq)                                                              \
    ENV_HEAD "\"event_type\":\"x\",\"aggregate_type\":\"movie\","                 \
             "\"occurred_at\":\"2026-11-29T09:41:56.123Z\",\"schema_version\":1," \
             "\"payload\":{\"aggregate_seq\":\"inner\"},\"aggregate_seq\":" seq "}"

/* The sequence of the envelope's text, read by both parsers (the scanner and the tree). */
static long long
parsed_seq(const char *json, int tree)
{
    struct obx_envelope env = {0};
    outbox_error err = {0};
    long long seq;

    cr_assert_eq(tree ? obx_envelope_parse_tree(json, strlen(json), 524288, &env, &err)
                      : obx_envelope_parse(json, strlen(json), 524288, &env, &err),
                 OUTBOX_OK, "refused %s: %s", json, err.message);
    seq = env.head.aggregate_seq;
    obx_envelope_fini(&env);
    return seq;
}

Test(envelope, an_ordered_events_aggregate_seq_is_read_whole_by_both_parsers)
{
    cr_expect_eq(parsed_seq(ENV_SEQ("1"), 0), 1);
    cr_expect_eq(parsed_seq(ENV_SEQ("1"), 1), 1);
    cr_expect_eq(parsed_seq(ENV_SEQ(" 42 "), 0), 42);
    /* Past 2^53 a double would round it: the text decides. */
    cr_expect_eq(parsed_seq(ENV_SEQ("9007199254740993"), 0), 9007199254740993LL);
    cr_expect_eq(parsed_seq(ENV_SEQ("9007199254740993"), 1), 9007199254740993LL);
    cr_expect_eq(parsed_seq(ENV_SEQ("9223372036854775807"), 1), 9223372036854775807LL);
    /* An unordered event has none. */
    cr_expect_eq(parsed_seq(ENV_BODY("1"), 0), 0);
    cr_expect_eq(parsed_seq(ENV_BODY("1"), 1), 0);
}

Test(envelope, an_aggregate_seq_that_is_not_a_whole_number_from_1_is_refused)
{
    const char *why = "envelope aggregate_seq must be a whole number from 1 to "
                      "9223372036854775807, not ";

    assert_refused(ENV_SEQ("0"), why);
    assert_refused(ENV_SEQ("-3"), "not -3");
    assert_refused(ENV_SEQ("2.0"), "not 2.0");
    assert_refused(ENV_SEQ("2e0"), "not 2e0");
    assert_refused(ENV_SEQ("007"), "envelope is not valid JSON");
    assert_refused(ENV_SEQ("\"5\""), "not \"\\\"5\\\"\"");
    assert_refused(ENV_SEQ("9223372036854775808"), "not 9223372036854775808");
    assert_refused(ENV_SEQ("null"), "not \"null\"");
}

Test(envelope, the_serializer_writes_a_sequence_the_parser_reads_back)
{
    struct obx_envelope_fields f = {
        .head = {.id = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b",
                 .event_type = "x",
                 .aggregate_type = "movie",
                 .aggregate_id = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b",
                 .occurred_at = "2026-11-29T09:41:56.123Z",
                 .aggregate_seq = 77},
        .payload_json = "{}",
        .payload_len = 2,
    };
    struct obx_buf out;

    obx_buf_init(&out);
    obx_envelope_serialize(&f, &out);
    cr_assert(!obx_buf_failed(&out));
    cr_expect_eq(parsed_seq(out.data, 0), 77, "%s", out.data);
    obx_buf_fini(&out);
}
