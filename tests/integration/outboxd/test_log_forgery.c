/* SPDX-License-Identifier: MIT */
/*
 * test_log_forgery.c - text a writer or a handler controls cannot forge a
 * log line. Hostile text (a quote, " level=error relay=forged", a newline,
 * " database=evil") goes through each source of outside text in a log line:
 *   - a relay's quarantine reason for a row a foreign writer committed;
 *   - an exec: handler's stderr, the reason of its dead letter;
 *   - a fleet member's quarantine reason, where " database=" must not hide
 *     the line's real database label.
 * Every line the daemon wrote is then parsed as logfmt: one record per
 * line (a timestamp, then level=), quotes balanced, no key twice, and no
 * field the hostile text made up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "harness.h"
#include "relay_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;
static char dir[64];

static void
setup(void)
{
    consume_test_suite_begin(&conn, dir);
}

static void
teardown(void)
{
    consume_test_suite_end(&conn, dir);
}

TestSuite(log_forgery, .init = setup, .fini = teardown, .timeout = 120);

/* In SQL: a quote to end the value, fields of its own, a newline, a database label. */
#define HOSTILE_SQL                                                                             \
    "'mo\"vie level=error relay=forged consumer=forged' || chr(10) || 'forged=1 database=evil " \
    "x'"

enum { MAX_KEYS = 32 };

struct record {
    char keys[MAX_KEYS][40];
    char values[MAX_KEYS][512];
    int count;
};

/* Parses one logfmt value at `p` (quoted or bare) into `out`; NULL if malformed. */
static const char *
parse_value(const char *p, char *out, size_t cap)
{
    size_t n = 0;

    if (*p != '"') {
        while (*p != '\0' && *p != ' ') {
            if (*p == '"' || *p == '=') {
                return NULL; /* a quote or '=' inside a bare value: a broken field */
            }
            if (n + 1 < cap) {
                out[n++] = *p;
            }
            p++;
        }
        out[n] = '\0';
        return p;
    }
    for (p++; *p != '"'; p++) {
        if (*p == '\0' || (unsigned char)*p < 0x20) {
            return NULL;
        }
        if (*p == '\\') {
            p++;
            if (strchr("\"\\nrtu", *p) == NULL) {
                return NULL;
            }
        }
        if (n + 1 < cap) {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
    p++;
    return *p == '\0' || *p == ' ' ? p : NULL; /* a quoted value ends a field */
}

/* Parses a daemon log line; fails the test if it is not one well-formed logfmt record. */
static void
parse_line(const char *line, struct record *r)
{
    const char *p = line;

    memset(r, 0, sizeof(*r));
    /* 2026-11-29T09:41:56.123Z level=... : every line starts a record. */
    cr_assert(strlen(line) > 25 && line[4] == '-' && line[10] == 'T' && line[23] == 'Z' &&
                  strncmp(line + 24, " level=", 7) == 0,
              "not a record of its own: %s", line);
    p = line + 25;
    while (*p != '\0') {
        const char *start = p;
        char word[512];

        while (*p == ' ') {
            p++;
        }
        start = p;
        if (*p == '"') { /* quoted message words */
            p = parse_value(p, word, sizeof(word));
            cr_assert_not_null(p, "broken quotes in: %s", line);
            continue;
        }
        while (*p != '\0' && *p != ' ' && *p != '=') {
            cr_assert_neq(*p, '"', "a stray quote in: %s", line);
            p++;
        }
        if (*p != '=') {
            continue; /* a message word */
        }
        cr_assert_lt(r->count, MAX_KEYS);
        cr_assert_lt((size_t)(p - start), sizeof(r->keys[0]));
        memcpy(r->keys[r->count], start, (size_t)(p - start));
        for (int i = 0; i < r->count; i++) {
            cr_assert_str_neq(r->keys[i], r->keys[r->count], "key %s twice in: %s", r->keys[i],
                              line);
        }
        p = parse_value(p + 1, r->values[r->count], sizeof(r->values[0]));
        cr_assert_not_null(p, "field %s broken in: %s", r->keys[r->count], line);
        r->count++;
    }
}

static const char *
field(const struct record *r, const char *key)
{
    for (int i = 0; i < r->count; i++) {
        if (strcmp(r->keys[i], key) == 0) {
            return r->values[i];
        }
    }
    return NULL;
}

/*
 * Checks every line of `log`; returns how many contain `message`, each of
 * which must carry `key` with the hostile text, and `label`=`label_value`
 * if `label` is not NULL.
 */
static int
check_log(const char *log, const char *message, const char *key, const char *label,
          const char *label_value)
{
    char *copy = strdup(log), *save = NULL;
    int found = 0;

    for (char *line = strtok_r(copy, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        struct record r;

        parse_line(line, &r);
        cr_assert_null(field(&r, "forged"), "a forged field in: %s", line);
        for (int i = 0; i < r.count; i++) {
            cr_assert_str_neq(r.values[i], "forged", "a forged field %s in: %s", r.keys[i], line);
            cr_assert_str_neq(r.values[i], "evil", "a forged field %s in: %s", r.keys[i], line);
        }
        if (strstr(line, message) != NULL) {
            const char *v = field(&r, key);

            found++;
            cr_assert_not_null(v, "no %s in: %s", key, line);
            cr_assert_not_null(strstr(v, "relay=forged"), "%s lost the text: %s", key, line);
            if (label != NULL) {
                cr_assert_not_null(field(&r, label), "no %s in: %s", label, line);
                cr_assert_str_eq(field(&r, label), label_value, "%s hidden in: %s", label, line);
            }
        }
    }
    free(copy);
    return found;
}

/* Commits one row with the hostile aggregate_type, past the trigger the test dropped. */
static void
insert_hostile_row(const char *schema)
{
    char sql[1024];

    snprintf(
        sql, sizeof(sql),
        "WITH v AS (SELECT %s.uuid_v7() AS id, gen_random_uuid() AS agg), "
        "e AS (INSERT INTO %s.events (id, aggregate_type, aggregate_id, event_type, "
        "envelope) SELECT id, " HOSTILE_SQL ", agg, 'review.logged', "
        "jsonb_build_object('id', id, 'event_type', 'review.logged', 'aggregate_type', " HOSTILE_SQL
        ", 'aggregate_id', agg, 'occurred_at', '2026-11-29T09:41:56.123Z', "
        "'schema_version', 1, 'payload', '{}'::jsonb) FROM v RETURNING id) "
        "INSERT INTO committed SELECT id FROM e",
        schema, schema);
    harness_exec(conn, sql);
}

Test(log_forgery, a_quarantine_reason_cannot_forge_relay_log_fields)
{
    struct harness_proc relay;
    struct relay_env env;
    char *log;

    harness_exec(conn, "DROP TRIGGER events_row_valid ON outbox.events");
    relay_test_enqueue(conn, 10);
    insert_hostile_row("outbox");
    relay_test_enqueue(conn, 10);
    relay_test_env(&env, "LOGF_RELAY", "logfrelay");
    relay_test_start(&relay, &env, "logf");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);
    cr_assert_eq(relay_test_count(conn, "status = 'invalid'"), 1);

    log = harness_proc_log(&relay);
    cr_assert_eq(check_log(log, "row quarantined as invalid", "reason", NULL, NULL), 1, "%s", log);
    free(log);
    relay_env_fini(&env);
}

Test(log_forgery, an_exec_handlers_stderr_cannot_forge_consumer_log_fields)
{
    struct consume_group g;
    struct harness_proc consumer;
    char hook[400];
    char *log;

    consume_group_init(&g, "db", "LOGF", dir);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "1");
    snprintf(hook, sizeof(hook),
             "hook@%s.movie.review.logged=exec:printf 'handler broke\\\" level=error "
             "consumer=forged\\nforged=1 database=evil relay=forged\\n' >&2; exit 1",
             g.prefix);
    relay_test_enqueue(conn, 1);
    consume_test_start(&consumer, &g.env, "logf-c", (const char *const[]){hook, NULL});
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&consumer, "event exhausted max deliveries"),
                       30000);
    consume_test_stop(&consumer, 10000);

    log = harness_proc_log(&consumer);
    cr_assert_eq(check_log(log, "event exhausted max deliveries", "reason", NULL, NULL), 1, "%s",
                 log);
    free(log);
    consume_group_fini(&g);
}

Test(log_forgery, a_fleet_members_reason_cannot_hide_its_database_label)
{
    char fleet_path[64];
    struct harness_proc relay;
    struct relay_env env;
    FILE *f;
    char *log;

    harness_exec(conn, "DROP TRIGGER events_row_valid ON outbox.events");
    insert_hostile_row("outbox");
    relay_test_enqueue(conn, 5);
    snprintf(fleet_path, sizeof(fleet_path), "/tmp/obx-logf-fleet-%d.conf", (int)getpid());
    f = fopen(fleet_path, "w");
    cr_assert_not_null(f);
    fprintf(f, "real %s schema=outbox stream=LOGF_FLEET subject_prefix=logffleet\n",
            harness_db_url());
    fclose(f);
    relay_test_env(&env, "LOGF_BASE", "logfbase");
    relay_env_set(&env, "OUTBOX_FLEET_FILE", fleet_path);
    relay_env_set(&env, "OUTBOX_FLEET_TRY_MS", "300");
    relay_test_start(&relay, &env, "logf-fleet");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);

    log = harness_proc_log(&relay);
    cr_assert_eq(check_log(log, "row quarantined as invalid", "reason", "database", "real"), 1,
                 "%s", log);
    free(log);
    unlink(fleet_path);
    relay_env_fini(&env);
}
