/* SPDX-License-Identifier: MIT */
/*
 * test_constraints.c - the table's own checks, the last of DESIGN's three
 * validations: a hand-written INSERT that bypasses both writers and breaks
 * an envelope or subject rule cannot commit, and the error names the
 * constraint it broke (SQLSTATE 23514, PG_DIAG_CONSTRAINT_NAME).
 *
 * Each row is built consistent and valid, then exactly one thing is
 * broken, so the expected constraint is the only one that can fire. A
 * control test proves the unbroken row commits.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "outbox/outbox.h"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(constraints, .init = setup, .fini = teardown, .timeout = 60);

/*
 * A hand-written row. Unset fields take valid defaults, and the envelope
 * is built from the row's own values unless given whole; `patch` is then
 * merged into it and `drop_key` removed from it.
 */
struct row {
    const char *what;           /* the one thing wrong with it, for messages */
    const char *id;             /* NULL: a fresh uuid */
    const char *aggregate_type; /* NULL: "movie" */
    const char *event_type;     /* NULL: "review.logged" */
    const char *tenant_id;      /* NULL: none */
    const char *data_subject;   /* NULL: none */
    const char *status;         /* NULL: 'pending' */
    const char *envelope;       /* NULL: built from the row */
    const char *patch;          /* JSON object merged into the built envelope */
    const char *drop_key;       /* key removed from the built envelope */
};

static const char insert_sql[] =
    "WITH r AS ("
    "  SELECT coalesce($1::text, gen_random_uuid()::text) AS id,"
    "         coalesce($2::text, 'movie') AS aggregate_type,"
    "         '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b'::text AS aggregate_id,"
    "         coalesce($3::text, 'review.logged') AS event_type,"
    "         $4::text AS tenant_id, $5::text AS data_subject)"
    " INSERT INTO outbox.events (id, aggregate_type, aggregate_id, event_type, tenant_id,"
    "                            data_subject, status, envelope)"
    " SELECT r.id::uuid, r.aggregate_type, r.aggregate_id::uuid, r.event_type, r.tenant_id,"
    "        r.data_subject, coalesce($6::text, 'pending'),"
    "        coalesce($7::jsonb,"
    "                 (jsonb_build_object('id', r.id, 'event_type', r.event_type,"
    "                                     'aggregate_type', r.aggregate_type,"
    "                                     'aggregate_id', r.aggregate_id,"
    "                                     'occurred_at', '2026-11-29T09:41:56.123Z',"
    "                                     'schema_version', 1,"
    "                                     'payload', '{\"stars\": 5}'::jsonb)"
    "                  || jsonb_strip_nulls(jsonb_build_object('tenant_id', r.tenant_id,"
    "                                                          'data_subject', r.data_subject))"
    "                  || coalesce($8::jsonb, '{}'))"
    "                 - coalesce($9::text, ''))"
    "   FROM r";

static PGresult *
insert_row(const struct row *r)
{
    const char *params[] = {r->id,        r->aggregate_type, r->event_type,
                            r->tenant_id, r->data_subject,   r->status,
                            r->envelope,  r->patch,          r->drop_key};

    return PQexecParams(conn, insert_sql, 9, NULL, params, NULL, NULL, 0);
}

static void
expect_commits(const struct row *r)
{
    PGresult *res = insert_row(r);

    cr_expect_eq(PQresultStatus(res), PGRES_COMMAND_OK, "%s: refused: %s", r->what,
                 PQresultErrorMessage(res));
    PQclear(res);
}

/* The insert fails with `sqlstate` and, when given, names `constraint`. */
static void
expect_refused_with(const struct row *r, const char *sqlstate, const char *constraint)
{
    PGresult *res = insert_row(r);
    const char *got_state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *got_name = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);

    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "%s: the row was accepted", r->what);
    cr_expect_str_eq(got_state ? got_state : "", sqlstate, "%s: %s", r->what,
                     PQresultErrorMessage(res));
    if (constraint != NULL) {
        cr_expect_str_eq(got_name ? got_name : "(none)", constraint, "%s: %s", r->what,
                         PQresultErrorMessage(res));
    }
    PQclear(res);
}

static void
expect_refused(const struct row *r, const char *constraint)
{
    expect_refused_with(r, "23514", constraint);
}

static long long
event_count(void)
{
    return harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events");
}

Test(constraints, a_well_formed_hand_written_row_commits)
{
    expect_commits(&(struct row){.what = "the baseline row"});
    expect_commits(&(struct row){.what = "all optional fields",
                                 .tenant_id = "acme",
                                 .data_subject = "acct-1",
                                 .patch = "{\"traceparent\": "
                                          "\"00-0af7651916cd43dd8448eb211c80319c-"
                                          "b7ad6b7169203331-01\"}"});
    cr_expect_eq(event_count(), 2);
}

Test(constraints, an_id_that_is_not_a_uuid_is_refused)
{
    expect_refused_with(&(struct row){.what = "id \"xyz\"", .id = "xyz"}, "22P02", NULL);
    expect_refused_with(
        &(struct row){.what = "id with 31 hex digits", .id = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5"},
        "22P02", NULL);
    cr_expect_eq(event_count(), 0);
}

Test(constraints, an_envelope_id_that_differs_from_the_row_id_is_refused)
{
    expect_refused(&(struct row){.what = "another id in the envelope",
                                 .patch = "{\"id\": \"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5c\"}"},
                   "events_envelope_matches_row");
    expect_refused(&(struct row){.what = "a numeric envelope id", .patch = "{\"id\": 7}"},
                   "events_envelope_matches_row");
    expect_refused(&(struct row){.what = "a null envelope id", .patch = "{\"id\": null}"},
                   "events_envelope_matches_row");
    cr_expect_eq(event_count(), 0);
}

Test(constraints, a_non_canonical_envelope_id_is_refused)
{
    /* PostgreSQL reads all three as the same uuid; only the canonical text may be published. */
    expect_refused(&(struct row){.what = "upper-case envelope id",
                                 .id = "0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5C"},
                   "events_envelope_matches_row");
    expect_refused(&(struct row){.what = "envelope id in braces",
                                 .id = "{0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5c}"},
                   "events_envelope_matches_row");
    expect_refused(&(struct row){.what = "envelope id without hyphens",
                                 .id = "0190a3b21c2d7e3f8a9b0c1d2e3f4a5c"},
                   "events_envelope_matches_row");
    cr_expect_eq(event_count(), 0);
}

Test(constraints, other_envelope_fields_that_disagree_with_the_row_are_refused)
{
    const struct row rows[] = {
        {.what = "envelope event_type", .patch = "{\"event_type\": \"review.deleted\"}"},
        {.what = "envelope aggregate_type", .patch = "{\"aggregate_type\": \"book\"}"},
        {.what = "envelope aggregate_id",
         .patch = "{\"aggregate_id\": \"0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5c\"}"},
        {.what = "upper-case envelope aggregate_id",
         .patch = "{\"aggregate_id\": \"0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B\"}"},
        {.what = "envelope tenant_id", .tenant_id = "acme", .patch = "{\"tenant_id\": \"other\"}"},
        {.what = "tenant_id only in the envelope", .patch = "{\"tenant_id\": \"acme\"}"},
        {.what = "tenant_id only in the row", .tenant_id = "acme", .drop_key = "tenant_id"},
        {.what = "numeric tenant_id", .tenant_id = "5", .patch = "{\"tenant_id\": 5}"},
        {.what = "null tenant_id", .patch = "{\"tenant_id\": null}"},
        {.what = "data_subject only in the envelope", .patch = "{\"data_subject\": \"acct-1\"}"},
        {.what = "data_subject only in the row",
         .data_subject = "acct-1",
         .drop_key = "data_subject"},
    };

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        expect_refused(&rows[i], "events_envelope_matches_row");
    }
    cr_expect_eq(event_count(), 0);
}

Test(constraints, subject_tokens_with_space_star_gt_or_an_empty_token_are_refused)
{
    const char *aggregate_types[] = {"mo vie", "*", ">", "", "movie.review", "mo\r\nvie"};
    const char *event_types[] = {"review logged",  "review.*", "*",       ">", "review.>",
                                 "review..logged", "review.",  ".review", "",  "review\tlogged"};

    for (size_t i = 0; i < sizeof(aggregate_types) / sizeof(aggregate_types[0]); i++) {
        char what[64];

        snprintf(what, sizeof(what), "aggregate_type \"%s\"", aggregate_types[i]);
        expect_refused(&(struct row){.what = what, .aggregate_type = aggregate_types[i]},
                       "events_aggregate_type_token");
    }
    for (size_t i = 0; i < sizeof(event_types) / sizeof(event_types[0]); i++) {
        char what[64];

        snprintf(what, sizeof(what), "event_type \"%s\"", event_types[i]);
        expect_refused(&(struct row){.what = what, .event_type = event_types[i]},
                       "events_event_type_tokens");
    }
    cr_expect_eq(event_count(), 0);
}

Test(constraints, an_event_type_repeating_its_aggregate_prefix_is_refused)
{
    expect_refused(&(struct row){.what = "movie / movie.logged", .event_type = "movie.logged"},
                   "events_event_type_bare");
    expect_refused(&(struct row){.what = "movie / movie.movie.x", .event_type = "movie.movie.x"},
                   "events_event_type_bare");
    /* Near misses are fine: the same word alone, or a longer word. */
    expect_commits(&(struct row){.what = "movie / movie", .event_type = "movie"});
    expect_commits(&(struct row){.what = "movie / movies.listed", .event_type = "movies.listed"});
    cr_expect_eq(event_count(), 2);
}

Test(constraints, a_payload_that_is_not_an_object_is_refused)
{
    const char *patches[] = {"{\"payload\": [1]}", "{\"payload\": \"x\"}", "{\"payload\": 5}",
                             "{\"payload\": null}", "{\"payload\": true}"};

    for (size_t i = 0; i < sizeof(patches) / sizeof(patches[0]); i++) {
        expect_refused(&(struct row){.what = patches[i], .patch = patches[i]},
                       "events_envelope_v1");
    }
    expect_commits(&(struct row){.what = "empty payload", .patch = "{\"payload\": {}}"});
    cr_expect_eq(event_count(), 1);
}

Test(constraints, a_bare_business_payload_as_the_envelope_is_refused)
{
    expect_refused(
        &(struct row){.what = "{\"stars\": 5} as the envelope", .envelope = "{\"stars\": 5}"},
        "events_envelope_v1");
    expect_refused(&(struct row){.what = "an array as the envelope", .envelope = "[]"},
                   "events_envelope_v1");
    expect_refused(&(struct row){.what = "a string as the envelope", .envelope = "\"x\""},
                   "events_envelope_v1");
    cr_expect_eq(event_count(), 0);
}

Test(constraints, an_envelope_missing_any_required_field_is_refused)
{
    const char *required[] = {"id",          "event_type",     "aggregate_type", "aggregate_id",
                              "occurred_at", "schema_version", "payload"};

    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        char what[64];

        snprintf(what, sizeof(what), "no %s", required[i]);
        expect_refused(&(struct row){.what = what, .drop_key = required[i]}, "events_envelope_v1");
    }
    cr_expect_eq(event_count(), 0);
}

Test(constraints, an_unknown_envelope_key_is_refused)
{
    expect_refused(&(struct row){.what = "key colour", .patch = "{\"colour\": \"red\"}"},
                   "events_envelope_v1");
    expect_refused(&(struct row){.what = "key Id", .patch = "{\"Id\": \"x\"}"},
                   "events_envelope_v1");
    cr_expect_eq(event_count(), 0);
}

Test(constraints, a_schema_version_other_than_1_is_refused)
{
    const char *patches[] = {"{\"schema_version\": 2}", "{\"schema_version\": 0}",
                             "{\"schema_version\": \"1\"}", "{\"schema_version\": null}",
                             "{\"schema_version\": 1.0}"};

    for (size_t i = 0; i < sizeof(patches) / sizeof(patches[0]); i++) {
        expect_refused(&(struct row){.what = patches[i], .patch = patches[i]},
                       "events_envelope_v1");
    }
    cr_expect_eq(event_count(), 0);
}

Test(constraints, a_malformed_occurred_at_is_refused)
{
    const char *patches[] = {"{\"occurred_at\": \"yesterday\"}", "{\"occurred_at\": 1764409316}",
                             "{\"occurred_at\": \"2026-11-29 09:41:56Z\"}",
                             "{\"occurred_at\": null}"};

    for (size_t i = 0; i < sizeof(patches) / sizeof(patches[0]); i++) {
        expect_refused(&(struct row){.what = patches[i], .patch = patches[i]},
                       "events_envelope_v1");
    }
    cr_expect_eq(event_count(), 0);
}

Test(constraints, a_malformed_or_null_traceparent_is_refused)
{
    const char *patches[] = {
        "{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c\"}",
        "{\"traceparent\": \"00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01\"}",
        "{\"traceparent\": \"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}",
        "{\"traceparent\": \"00-00000000000000000000000000000000-b7ad6b7169203331-01\"}",
        "{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01\"}",
        "{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\\n\"}",
        "{\"traceparent\": null}",
        "{\"traceparent\": 7}",
    };

    for (size_t i = 0; i < sizeof(patches) / sizeof(patches[0]); i++) {
        expect_refused(&(struct row){.what = patches[i], .patch = patches[i]},
                       "events_envelope_v1");
    }
    cr_expect_eq(event_count(), 0);
}

Test(constraints, a_tenant_id_or_data_subject_with_a_control_character_is_refused)
{
    const char *tenants[] = {"ac\tme", "acme\x7f", "ac\x01me", "acme\n", ""};
    char long_tenant[130];
    char long_subject[258];

    for (size_t i = 0; i < sizeof(tenants) / sizeof(tenants[0]); i++) {
        expect_refused(&(struct row){.what = "tenant_id", .tenant_id = tenants[i]},
                       "events_tenant_id_text");
    }
    memset(long_tenant, 't', 129);
    long_tenant[129] = '\0';
    expect_refused(&(struct row){.what = "tenant_id of 129 bytes", .tenant_id = long_tenant},
                   "events_tenant_id_text");
    expect_refused(&(struct row){.what = "data_subject \"acct\\n1\"", .data_subject = "acct\n1"},
                   "events_data_subject_text");
    memset(long_subject, 'd', 257);
    long_subject[257] = '\0';
    expect_refused(&(struct row){.what = "data_subject of 257 bytes", .data_subject = long_subject},
                   "events_data_subject_text");
    /* Spaces and non-ASCII text are not control characters. */
    expect_commits(&(struct row){.what = "tenant with spaces and unicode",
                                 .tenant_id = "Ac me \xc3\xa9t\xc3\xa9",
                                 .data_subject = "acct 1"});
    cr_expect_eq(event_count(), 1);
}

Test(constraints, a_route_over_222_bytes_is_refused)
{
    char aggregate_type[101];
    char event_type[124];

    /* 100 + "." + 122 = 223 bytes. */
    memset(aggregate_type, 'a', 100);
    aggregate_type[100] = '\0';
    memset(event_type, 'b', 122);
    event_type[60] = '.';
    event_type[122] = '\0';
    expect_refused(&(struct row){.what = "223-byte route",
                                 .aggregate_type = aggregate_type,
                                 .event_type = event_type},
                   "events_route_length");
    event_type[121] = '\0';
    expect_commits(&(struct row){
        .what = "222-byte route", .aggregate_type = aggregate_type, .event_type = event_type});
    cr_expect_eq(event_count(), 1);
}

Test(constraints, an_unknown_status_is_refused)
{
    const char *statuses[] = {"sent", "PENDING", "", "published"};

    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
        expect_refused(&(struct row){.what = statuses[i], .status = statuses[i]},
                       "events_status_known");
    }
    /* A leased row needs its lease. */
    expect_refused(&(struct row){.what = "leased without a lease", .status = "leased"},
                   "events_lease_complete");
    cr_expect_eq(event_count(), 0);
}

/* An UPDATE of a committed row fails with 23514 naming `constraint`. */
static void
expect_update_refused(const char *what, const char *set_sql, const char *constraint)
{
    char sql[512];
    PGresult *res;
    const char *got_state, *got_name;

    snprintf(sql, sizeof(sql), "UPDATE outbox.events SET %s", set_sql);
    res = PQexec(conn, sql);
    got_state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    got_name = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
    cr_expect_eq(PQresultStatus(res), PGRES_FATAL_ERROR, "%s: the update was accepted", what);
    cr_expect_str_eq(got_state ? got_state : "", "23514", "%s: %s", what,
                     PQresultErrorMessage(res));
    cr_expect_str_eq(got_name ? got_name : "(none)", constraint, "%s: %s", what,
                     PQresultErrorMessage(res));
    PQclear(res);
}

/*
 * The event's rules run on INSERT and on any UPDATE that sets the event's
 * columns (a trigger, so leases and finishes skip them); the state rules
 * are CHECKs that every UPDATE meets.
 */
Test(constraints, an_update_is_held_to_the_same_rules)
{
    expect_commits(&(struct row){.what = "the row to update"});
    expect_update_refused("an envelope that no longer matches the row",
                          "envelope = jsonb_set(envelope, '{event_type}', '\"other\"')",
                          "events_envelope_matches_row");
    expect_update_refused("an envelope without a payload", "envelope = envelope - 'payload'",
                          "events_envelope_v1");
    expect_update_refused("a bare event_type broken", "event_type = 'movie.x'",
                          "events_event_type_bare");
    expect_update_refused("an unknown status", "status = 'sent'", "events_status_known");
    expect_update_refused("a lease without its token",
                          "status = 'leased', leased_until = now() + interval '1 minute'",
                          "events_lease_complete");
    expect_update_refused("negative attempts", "attempts = -1", "events_counts_not_negative");
    /* A replication-role session (pg_restore --disable-triggers, logical apply) is held too. */
    harness_exec(conn, "SET session_replication_role = replica");
    expect_update_refused("an envelope changed under session_replication_role = replica",
                          "envelope = envelope - 'payload'", "events_envelope_v1");
    harness_exec(conn, "RESET session_replication_role");
    cr_expect_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.events "
                                         "WHERE status = 'pending' AND attempts = 0"),
                 1, "a refused update changed the row");
}
