/* SPDX-License-Identifier: MIT */
/*
 * test_envelope_scan.c - the one-pass envelope reader may send an envelope
 * the slow way, but must never accept what the full jansson parse refuses,
 * and must read the same fields. Each input goes through obx_envelope_parse
 * (scanner first) and obx_envelope_parse_tree (always jansson); their
 * verdicts, messages and fields must agree. Hand-picked edge cases come
 * first, then thousands of seeded mutations of real stored envelopes.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope/envelope.h"
#include "envelope/envelope_scan.h"

/* As PostgreSQL's jsonb prints them: what the relay and the DB feed read. */
static const char stored_full[] =
    "{\"id\": \"01a227bb-6ce8-750d-b8b6-bd1e14027aa2\", \"payload\": {\"a\": 1}, \"tenant_id\": "
    "\"tenant-1\", \"event_type\": \"review.logged\", \"occurred_at\": "
    "\"2026-11-29T14:35:24.264Z\", \"traceparent\": "
    "\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\", \"aggregate_id\": "
    "\"a457edee-92bc-44eb-8894-07d2f796dd31\", \"data_subject\": \"user:42\", "
    "\"aggregate_type\": \"movie\", \"schema_version\": 1}";

static const char stored_review[] =
    "{\"id\": \"01a227b9-9d89-7296-b88e-383bb4082356\", \"payload\": {\"tags\": [\"comedy\", "
    "\"romance\", \"paris\"], \"stars\": 5, \"title\": \"Am\xc3\xa9lie\", \"review\": \"A "
    "whimsical, warm film \\u00e9 \\ud83c\\udfac \\\"quoted\\\"\\n\", \"ratio\": -0.25, "
    "\"none\": null, \"ok\": true, \"no\": false, \"reviewer\": {\"id\": 42, \"name\": "
    "\"Sam\", \"deep\": [[[], {}]]}}, \"event_type\": \"review.logged\", \"occurred_at\": "
    "\"2026-11-29T14:33:25.641Z\", \"aggregate_id\": \"d2cfbd33-5cfb-4767-b0b7-4ecde674e33d\", "
    "\"aggregate_type\": \"movie\", \"schema_version\": 1}";

static const char *
field_or_empty(const char *s)
{
    return s != NULL ? s : "(absent)";
}

/* Both paths on one input; returns 1 when the fast path accepted it. */
static int
agree(const char *json, size_t len)
{
    struct obx_envelope fast = {0}, slow = {0};
    struct obx_envelope_slices slices;
    outbox_error fast_err = {0}, slow_err = {0};
    outbox_status fs = obx_envelope_parse(json, len, 4096, &fast, &fast_err);
    outbox_status ss = obx_envelope_parse_tree(json, len, 4096, &slow, &slow_err);
    const char *fast_fields[] = {
        fast.head.id,           fast.head.event_type, fast.head.aggregate_type,
        fast.head.aggregate_id, fast.head.tenant_id,  fast.head.occurred_at,
        fast.head.data_subject, fast.head.traceparent};
    const char *slow_fields[] = {
        slow.head.id,           slow.head.event_type, slow.head.aggregate_type,
        slow.head.aggregate_id, slow.head.tenant_id,  slow.head.occurred_at,
        slow.head.data_subject, slow.head.traceparent};
    int scanned = obx_envelope_scan(json, len, &slices);

    cr_assert_eq(fs, ss, "verdicts differ (scanner %s) on %.*s: \"%s\" vs \"%s\"",
                 scanned ? "accepted" : "unsure", (int)len, json, fast_err.message,
                 slow_err.message);
    cr_assert_str_eq(fast_err.message, slow_err.message, "messages differ on %.*s", (int)len, json);
    for (size_t i = 0; i < sizeof(fast_fields) / sizeof(fast_fields[0]); i++) {
        cr_assert_str_eq(field_or_empty(fast_fields[i]), field_or_empty(slow_fields[i]),
                         "field %zu differs on %.*s", i, (int)len, json);
    }
    obx_envelope_fini(&fast);
    obx_envelope_fini(&slow);
    return scanned;
}

static int
agree_text(const char *json)
{
    return agree(json, strlen(json));
}

/* stored_full with `from` replaced by `to` once. */
static void
agree_edited(const char *from, const char *to)
{
    char buf[4096];
    const char *at = strstr(stored_full, from);

    cr_assert_not_null(at, "%s not in the sample", from);
    snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - stored_full), stored_full, to,
             at + strlen(from));
    agree_text(buf);
}

Test(envelope_scan, takes_the_fast_path_for_what_postgresql_stores)
{
    cr_assert(agree_text(stored_full), "the scanner sent a plain stored envelope the slow way");
    cr_assert(agree_text(stored_review), "the scanner sent escapes in the payload the slow way");
}

Test(envelope_scan, agrees_with_the_full_parse_on_edge_cases)
{
    static const char *const edits[][2] = {
        {"{\"a\": 1}", "{\"a\": 01}"},
        {"{\"a\": 1}", "{\"a\": 1e5}"},
        {"{\"a\": 1}", "{\"a\": 1E400}"},
        {"{\"a\": 1}", "{\"a\": -}"},
        {"{\"a\": 1}", "{\"a\": 1.}"},
        {"{\"a\": 1}", "{\"a\": .5}"},
        {"{\"a\": 1}", "{\"a\": \"\\u0000\"}"},
        {"{\"a\": 1}", "{\"\\u0000\": 1}"},
        {"{\"a\": 1}", "{\"a\": \"\\ud800\"}"},
        {"{\"a\": 1}", "{\"a\": \"\\udc00\"}"},
        {"{\"a\": 1}", "{\"a\": \"\\ud800\\u0041\"}"},
        {"{\"a\": 1}", "{\"a\": \"\\x\"}"},
        {"{\"a\": 1}", "{\"a\": \"\xc0\xaf\"}"},
        {"{\"a\": 1}", "{\"a\": \"\xed\xa0\x80\"}"},
        {"{\"a\": 1}", "{\"a\": \"\t\"}"},
        {"{\"a\": 1}", "{\"a\": tru}"},
        {"{\"a\": 1}", "{\"a\": nul}"},
        {"{\"a\": 1}", "{\"a\": truex}"},
        {"{\"a\": 1}", "{\"a\": [1,]}"},
        {"{\"a\": 1}", "{\"a\": 1,}"},
        {"{\"a\": 1}", "{\"a\" 1}"},
        {"{\"a\": 1}", "{}"},
        {"{\"a\": 1}", "[]"},
        {"{\"a\": 1}", "\"text\""},
        {"{\"a\": 1}", "{\"a\": 1, \"a\": 2}"},
        {"\"schema_version\": 1", "\"schema_version\": 1.0"},
        {"\"schema_version\": 1", "\"schema_version\": 2"},
        {"\"schema_version\": 1", "\"schema_version\": \"1\""},
        {"\"schema_version\": 1", "\"schema_version\": 10"},
        {"\"schema_version\": 1", "\"schema_version\": 1, \"schema_version\": 1"},
        {"\"schema_version\": 1", "\"schema_version\": 1, \"extra\": 1"},
        {"\"schema_version\": 1", "\"schema_version\": 1, \"id\": \"x\""},
        {"\"schema_version\": 1}", "\"schema_version\": 1} x"},
        {"\"schema_version\": 1}", "\"schema_version\": 1}\n\t "},
        {"\"tenant-1\"", "\"tenant\\u002d1\""},
        {"\"tenant-1\"", "\"tenant\\n1\""},
        {"\"tenant-1\"", "null"},
        {"\"tenant-1\"", "7"},
        {"\"tenant-1\"", "\"\""},
        {"\"movie\"", "\"Movie\""},
        {"\"movie\"", "\"mo vie\""},
        {"\"movie\"", "\"m\xc3\xa9\""},
        {"\"01a227bb-6ce8-750d-b8b6-bd1e14027aa2\"", "\"01A227BB-6CE8-750D-B8B6-BD1E14027AA2\""},
        {"\"01a227bb-6ce8-750d-b8b6-bd1e14027aa2\"", "\"not-a-uuid\""},
        {"\"2026-11-29T14:35:24.264Z\"", "\"yesterday\""},
        {"\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"", "\"00-00\""},
        {"\"aggregate_id\"", "\"aggregate\\u005fid\""},
        {"\"payload\": {\"a\": 1}, ", ""},
        {"\"payload\": {\"a\": 1}", "\"payload\": [1]"},
        {"\"payload\": {\"a\": 1}", "\"payload\": null"},
    };

    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        agree_edited(edits[i][0], edits[i][1]);
    }
}

/* A payload nested `depth` levels (the payload object is level 1). */
static void
agree_nested(int depth)
{
    char payload[512], buf[4096];
    size_t n = 0;

    for (int i = 1; i < depth; i++) {
        n += (size_t)snprintf(payload + n, sizeof(payload) - n, "{\"k\": ");
    }
    n += (size_t)snprintf(payload + n, sizeof(payload) - n, "[]");
    for (int i = 1; i < depth; i++) {
        n += (size_t)snprintf(payload + n, sizeof(payload) - n, "}");
    }
    cr_assert_lt(n, sizeof(payload) - 1);
    /* stored_full up to its payload, the nested one, then the rest of stored_full. */
    snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(strstr(stored_full, "{\"a\"") - stored_full),
             stored_full, payload, strstr(stored_full, ", \"tenant_id\""));
    agree_text(buf);
}

Test(envelope_scan, agrees_on_the_depth_limit)
{
    for (int depth = OUTBOX_MAX_PAYLOAD_DEPTH - 2; depth <= OUTBOX_MAX_PAYLOAD_DEPTH + 2; depth++) {
        agree_nested(depth);
    }
}

Test(envelope_scan, agrees_on_numbers_around_double_overflow)
{
    char number[400], buf[4096];

    for (size_t digits = 295; digits <= 315; digits++) {
        memset(number, '9', digits);
        number[digits] = '\0';
        snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(strstr(stored_full, "1}") - stored_full),
                 stored_full, number, strstr(stored_full, "}, \"tenant_id\""));
        agree_text(buf);
    }
}

/* A small deterministic generator, so a failure replays. */
static unsigned
next_random(unsigned *state)
{
    *state = *state * 1103515245u + 12345u;
    return (*state >> 16) & 0x7fff;
}

static void
mutate_and_compare(const char *sample, unsigned seed, int rounds)
{
    static const char alphabet[] = "{}[]\":,\\ u0123456789abcdefABCDEF-+.eEtrunlsx\t\n\x01\x7f"
                                   "\xc3\xa9\xed\xa0\xf0\x9f";
    size_t sample_len = strlen(sample);
    unsigned state = seed;
    int accepted = 0;

    for (int r = 0; r < rounds; r++) {
        char buf[2048];
        size_t len = sample_len;
        int edits = 1 + (int)(next_random(&state) % 3);

        memcpy(buf, sample, len);
        for (int e = 0; e < edits; e++) {
            size_t at = next_random(&state) % len;
            char c = alphabet[next_random(&state) % (sizeof(alphabet) - 1)];

            switch (next_random(&state) % 3) {
            case 0: /* replace */
                buf[at] = c;
                break;
            case 1: /* delete */
                memmove(buf + at, buf + at + 1, len - at - 1);
                len--;
                break;
            default: /* insert */
                if (len + 1 < sizeof(buf)) {
                    memmove(buf + at + 1, buf + at, len - at);
                    buf[at] = c;
                    len++;
                }
                break;
            }
        }
        accepted += agree(buf, len);
    }
    /* Most single edits land in the payload's text and stay valid. */
    cr_assert_gt(accepted, rounds / 20, "the scanner accepted only %d of %d mutations", accepted,
                 rounds);
}

Test(envelope_scan, agrees_with_the_full_parse_on_mutated_envelopes, .timeout = 60)
{
    mutate_and_compare(stored_full, 1u, 20000);
    mutate_and_compare(stored_review, 2u, 20000);
}
