/* SPDX-License-Identifier: MIT */
/*
 * test_relay_bad_input.c - FAULTS.md T28 (ii), shortened for CI: rows a
 * foreign or legacy writer commits with raw SQL, bypassing the writer and
 * (its trigger dropped in the test's own database) every rule the schema
 * enforces on write. Among good rows: CR/LF in each field that reaches a
 * subject or a header, subjects with wildcards, spaces, empty tokens or
 * over 255 bytes, an envelope id that is NULL, legacy or non-canonical, an
 * unknown envelope version, a NULL or missing payload, 10 000-deep nesting,
 * envelopes that are not objects.
 *
 * The relay talks to NATS through a proxy that captures every byte it
 * sends. Pass: each bad row quarantined with a reason naming the problem,
 * the relay never crashes, every good row published, no row deleted, and
 * no CR or LF from a row in the protocol (the injected header names never
 * appear in the capture at all, since no bad row is sent).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "chaos.h"
#include "conservation.h"
#include "harness.h"
#include "relay_check.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = chaos_begin(relay_test_prepare, 0);
}

static void
teardown(void)
{
    chaos_end(&conn);
}

TestSuite(relay_bad_input, .init = setup, .fini = teardown, .timeout = 180);

#define OCCURRED    "2026-11-29T09:41:56.123Z"
#define TRACEPARENT "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#define INJECT      "\r\nX-Injected: 1\r\n"

struct bad_case {
    const char *what;
    const char *aggregate_type, *event_type, *tenant_id, *data_subject;
    const char
        *envelope_patch;    /* SQL jsonb expression merged over the valid envelope; may use id */
    const char *patch_text; /* $5: text the patch may use (CR/LF-laden values) */
};

/*
 * Inserts one row with raw SQL: the row's fields as given, and an envelope
 * that matches them except for `envelope_patch`. Values travel as
 * parameters, so CR and LF reach the table as they are.
 */
static char *
insert_raw(const struct bad_case *b)
{
    const char *params[] = {b->aggregate_type, b->event_type, b->tenant_id, b->data_subject,
                            b->patch_text};
    const Oid text_types[] = {25, 25, 25, 25, 25}; /* text: $5 may go unused */
    char sql[2048];
    PGresult *res;
    char *id;

    snprintf(sql, sizeof(sql),
             "WITH v AS (SELECT outbox.uuid_v7() AS id, gen_random_uuid() AS agg), "
             "e AS (INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, "
             "tenant_id, data_subject, envelope) SELECT id, $1, agg, $2, $3, $4, "
             "jsonb_strip_nulls(jsonb_build_object('id', id, 'event_type', $2, "
             "'aggregate_type', $1, 'aggregate_id', agg, 'tenant_id', $3::text, "
             "'data_subject', $4::text, 'occurred_at', '" OCCURRED "', 'schema_version', 1, "
             "'payload', '{}'::jsonb)) || (%s) FROM v RETURNING id) "
             "INSERT INTO committed SELECT id FROM e RETURNING id::text",
             b->envelope_patch != NULL ? b->envelope_patch : "'{}'::jsonb");
    res = PQexecParams(conn, sql, 5, text_types, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", b->what, PQerrorMessage(conn));
    id = strdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    return id;
}

/* '{"payload": {"a": {"a": ... 1 ...}}}' nested `depth` deep; malloc'd. */
static char *
deep_payload(int depth)
{
    size_t cap = (size_t)depth * 7 + 32, at = 0;
    char *s = malloc(cap);

    cr_assert_not_null(s);
    at += (size_t)snprintf(s + at, cap - at, "{\"payload\": ");
    for (int i = 0; i < depth; i++) {
        at += (size_t)snprintf(s + at, cap - at, "{\"a\": ");
    }
    s[at++] = '1';
    for (int i = 0; i < depth; i++) {
        s[at++] = '}';
    }
    s[at++] = '}';
    s[at] = '\0';
    return s;
}

/* Occurrences of `needle` (`len` bytes) in the `len_hay` bytes of `hay`. */
static size_t
mem_count(const char *hay, size_t len_hay, const char *needle, size_t len)
{
    size_t n = 0;

    for (size_t i = 0; i + len <= len_hay; i++) {
        n += memcmp(hay + i, needle, len) == 0;
    }
    return n;
}

static char *
read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long size;

    cr_assert_not_null(f, "opening %s", path);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)size + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)size, f), (size_t)size);
    buf[size] = '\0';
    fclose(f);
    *len = (size_t)size;
    return buf;
}

Test(relay_bad_input, raw_sql_rows_are_quarantined_and_no_cr_or_lf_reaches_the_nats_socket)
{
    enum { GOOD_PER_GAP = 100 };
    char long_type[300];
    char *deep = deep_payload(10000);
    struct bad_case bad[] = {
        {"CR/LF in aggregate_type", "movie" INJECT, "review.logged", NULL, NULL, NULL, NULL},
        {"CR/LF in event_type", "movie", "review.logged" INJECT, NULL, NULL, NULL, NULL},
        {"CR/LF in tenant_id", "movie", "review.logged", "acme" INJECT, NULL, NULL, NULL},
        {"CR/LF in data_subject", "movie", "review.logged", NULL, "user-1" INJECT, NULL, NULL},
        {"CR/LF in traceparent", "movie", "review.logged", NULL, NULL,
         "jsonb_build_object('traceparent', $5)", TRACEPARENT INJECT},
        {"CR/LF in occurred_at", "movie", "review.logged", NULL, NULL,
         "jsonb_build_object('occurred_at', $5)", OCCURRED INJECT},
        {"NUL-free but control byte in event_type", "movie", "review\001logged", NULL, NULL, NULL,
         NULL},
        {"'*' in event_type", "movie", "review.*", NULL, NULL, NULL, NULL},
        {"'>' in aggregate_type", "mo>vie", "review.logged", NULL, NULL, NULL, NULL},
        {"space in event_type", "movie", "review logged", NULL, NULL, NULL, NULL},
        {"empty token in event_type", "movie", "review..logged", NULL, NULL, NULL, NULL},
        {"subject over 255 bytes", "movie", long_type, NULL, NULL, NULL, NULL},
        {"NULL envelope id (foreign writer)", "movie", "review.logged", NULL, NULL,
         "'{\"id\": null}'::jsonb", NULL},
        {"legacy envelope id", "movie", "review.logged", NULL, NULL,
         "'{\"id\": \"evt-42\"}'::jsonb", NULL},
        {"non-canonical (upper-case) envelope id", "movie", "review.logged", NULL, NULL,
         "jsonb_build_object('id', upper(id::text))", NULL},
        {"unknown envelope version", "movie", "review.logged", NULL, NULL,
         "'{\"schema_version\": 2}'::jsonb", NULL},
        {"NULL payload", "movie", "review.logged", NULL, NULL, "'{\"payload\": null}'::jsonb",
         NULL},
        {"10 000-deep payload", "movie", "review.logged", NULL, NULL, "$5::jsonb", deep},
        {"envelope is an array", "movie", "review.logged", NULL, NULL, "'[1]'::jsonb", NULL},
    };
    enum { BAD = sizeof(bad) / sizeof(bad[0]) };
    char *ids[BAD];
    char dump_path[] = "/tmp/obx-nats-capture-XXXXXX";
    struct harness_proxy px;
    struct harness_proc relay;
    struct relay_env env;
    struct conservation c;
    char nats_url[128], *capture, *log;
    size_t capture_len;
    int fd = mkstemp(dump_path);

    cr_assert_geq(fd, 0);
    close(fd);
    memset(long_type, 'x', sizeof(long_type) - 1);
    long_type[sizeof(long_type) - 1] = '\0';
    harness_exec(conn, "DROP TRIGGER events_row_valid ON outbox.events");
    for (int i = 0; i < BAD; i++) {
        relay_test_enqueue(conn, GOOD_PER_GAP);
        ids[i] = insert_raw(&bad[i]);
    }
    relay_test_enqueue(conn, GOOD_PER_GAP);

    harness_proxy_start_dumping(&px, harness_nats_port(), dump_path);
    snprintf(nats_url, sizeof(nats_url), "nats://relay:" RELAY_TEST_SECRET "@127.0.0.1:%d",
             px.port);
    relay_test_env(&env, "BAD_INPUT", "badinput");
    relay_env_set(&env, "OUTBOX_NATS_URL", nats_url);
    relay_env_set(&env, "OUTBOX_RELAY_MODE", "prune");
    relay_env_set(&env, "OUTBOX_BATCH_SIZE", "50");
    relay_test_start(&relay, &env, "bad-input");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 60000);
    relay_test_assert_running(&relay, "the relay (bad rows must not crash it)");
    relay_test_stop(&relay, 10000);
    harness_proxy_stop(&px);

    cr_assert_eq(relay_test_count(conn, "true"), BAD,
                 "prune mode deleted a row it never published");
    for (int i = 0; i < BAD; i++) {
        char sql[256];
        char *reason;

        snprintf(sql, sizeof(sql),
                 "SELECT coalesce(last_error, '') FROM outbox.events WHERE id = '%s' AND "
                 "status = 'invalid' AND attempts = 0 AND published_at IS NULL",
                 ids[i]);
        reason = harness_scalar_text(conn, sql);
        cr_assert_not_null(reason, "%s: not quarantined", bad[i].what);
        cr_log_info("%s: quarantined with \"%s\"", bad[i].what, reason);
        cr_assert_gt(strlen(reason), 0, "%s: quarantined without a reason", bad[i].what);
        free(reason);
        free(ids[i]);
    }
    log = harness_proc_log(&relay);
    cr_assert_eq(text_count(log, "row quarantined as invalid"), BAD, "%s", log);
    cr_assert_eq(text_count(log, "\nX-Injected"), 0, "a row's CR/LF reached the relay's log");
    free(log);
    c = conservation_expect_zero(conn, "BAD_INPUT", NULL);
    cr_assert_eq(c.base.stream, (size_t)((BAD + 1) * GOOD_PER_GAP), "every good row published");
    cr_assert_eq(c.base.quarantined, (size_t)BAD);

    capture = read_all(dump_path, &capture_len);
    cr_log_info("T28: %zu bytes captured on the way to NATS, %zu HPUB", capture_len,
                mem_count(capture, capture_len, "HPUB ", 5));
    cr_assert_geq(mem_count(capture, capture_len, "HPUB ", 5), (size_t)((BAD + 1) * GOOD_PER_GAP),
                  "the capture missed the publishes: it proves nothing");
    cr_assert_eq(mem_count(capture, capture_len, "\nX-Injected", 11), 0,
                 "a row's CR/LF reached the NATS socket");
    cr_assert_eq(mem_count(capture, capture_len, "X-Injected", 10), 0,
                 "a bad row's bytes reached the NATS socket");
    free(capture);
    free(deep);
    unlink(dump_path);
    relay_env_fini(&env);
}
