/* SPDX-License-Identifier: MIT */
/*
 * relay_check.c - the relay checker (C, S, Q, D compared), relay log
 * scanning, and the settings relay tests start outboxd with.
 */
#include "relay_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Adds the first column of every row of `sql` to `set`. */
static int
load_ids(PGconn *conn, const char *sql, struct id_set *set, char *err, size_t cap)
{
    PGresult *res = PQexec(conn, sql);
    int rc = 0;

    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, cap, "%s: %s", sql, PQerrorMessage(conn));
        PQclear(res);
        return -1;
    }
    for (int i = 0; i < PQntuples(res) && rc == 0; i++) {
        rc = id_set_add(set, PQgetvalue(res, i, 0));
    }
    PQclear(res);
    if (rc != 0) {
        snprintf(err, cap, "out of memory loading %s", sql);
        return -1;
    }
    id_set_sort(set);
    return 0;
}

static void
count_lost(const struct id_set *c, const struct id_set *s, const struct id_set *q,
           const struct id_set *d, struct relay_check *out)
{
    for (size_t i = 0; i < c->count; i++) {
        const char *id = c->ids[i];

        if (!id_set_has(s, id) && !id_set_has(q, id) && !id_set_has(d, id)) {
            if (out->lost++ == 0) {
                memcpy(out->lost_example, id, ID_TEXT_CAP);
            }
        }
    }
}

static void
count_phantoms(const struct id_set *c, const struct id_set *s, struct relay_check *out)
{
    for (size_t i = 0; i < s->count; i++) {
        if (!id_set_has(c, s->ids[i])) {
            if (out->phantom++ == 0) {
                memcpy(out->phantom_example, s->ids[i], ID_TEXT_CAP);
            }
        }
    }
}

int
relay_check_run(PGconn *conn, const char *committed_sql, struct id_set *stream,
                struct relay_check *out, char *err, size_t cap)
{
    struct id_set c, q, d;
    int rc;

    memset(out, 0, sizeof(*out));
    id_set_init(&c);
    id_set_init(&q);
    id_set_init(&d);
    id_set_sort(stream);
    rc = load_ids(conn, committed_sql, &c, err, cap);
    if (rc == 0) {
        rc = load_ids(conn, "SELECT id::text FROM outbox.events WHERE status = 'invalid'", &q, err,
                      cap);
    }
    if (rc == 0) {
        rc = load_ids(conn, "SELECT event_id::text FROM outbox.dead_letters", &d, err, cap);
    }
    if (rc == 0) {
        out->committed = c.count;
        out->stream = stream->count;
        out->quarantined = q.count;
        out->dead = d.count;
        out->stream_dups = id_set_dups(stream, out->dup_example);
        count_lost(&c, stream, &q, &d, out);
        count_phantoms(&c, stream, out);
    }
    id_set_fini(&d);
    id_set_fini(&q);
    id_set_fini(&c);
    return rc;
}

/* The number after "rows=" on the line that starts at `line`, or 0. */
static size_t
rows_on_line(const char *line)
{
    const char *end = strchr(line, '\n');
    const char *rows = strstr(line, " rows=");

    if (rows == NULL || (end != NULL && rows > end)) {
        return 0;
    }
    return (size_t)strtoul(rows + strlen(" rows="), NULL, 10);
}

void
lease_log_scan(const char *log, struct lease_log *out)
{
    for (const char *p = log; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *batch = strstr(p, "lease batch relay=");
        const char *lost = strstr(p, "lease lost before finish relay=");

        if (batch != NULL && batch < p + len) {
            size_t rows = rows_on_line(batch);

            out->batches++;
            out->rows += rows;
            out->max_rows = rows > out->max_rows ? rows : out->max_rows;
        } else if (lost != NULL && lost < p + len) {
            out->lost_rows += rows_on_line(lost);
        }
        p = end != NULL ? end + 1 : NULL;
    }
}

size_t
text_count(const char *text, const char *needle)
{
    size_t n = 0;

    for (const char *p = text; p != NULL && (p = strstr(p, needle)) != NULL; p += strlen(needle)) {
        n++;
    }
    return n;
}

/* ---- settings ---------------------------------------------------------------------------- */

/*
 * Short enough that a test waits seconds, not minutes, for a lease to run
 * out, a publish to time out or a retry to come due; long enough that a
 * relay under ASan on a busy 2-core machine keeps its leases.
 */
static const char *const relay_defaults[][2] = {
    {"OUTBOX_LOG_LEVEL", "debug"},         {"OUTBOX_LEASE_SECONDS", "2"},
    {"OUTBOX_PUBLISH_TIMEOUT_MS", "1000"}, {"OUTBOX_POLL_MAX_MS", "200"},
    {"OUTBOX_BACKOFF_BASE_MS", "200"},     {"OUTBOX_BACKOFF_CAP_MS", "2000"},
    {"OUTBOX_DRAIN_TIMEOUT_SECONDS", "5"},
};

void
relay_env_init(struct relay_env *e, const char *database_url, const char *nats_url,
               const char *stream, const char *subject_prefix)
{
    memset(e, 0, sizeof(*e));
    relay_env_set(e, "OUTBOX_DATABASE_URL", database_url);
    relay_env_set(e, "OUTBOX_NATS_URL", nats_url);
    relay_env_set(e, "OUTBOX_STREAM", stream);
    relay_env_set(e, "OUTBOX_SUBJECT_PREFIX", subject_prefix);
    for (size_t i = 0; i < sizeof(relay_defaults) / sizeof(relay_defaults[0]); i++) {
        relay_env_set(e, relay_defaults[i][0], relay_defaults[i][1]);
    }
}

int
relay_env_set(struct relay_env *e, const char *key, const char *value)
{
    size_t key_len = strlen(key);
    size_t len = key_len + 1 + strlen(value) + 1;
    char *entry = malloc(len);
    size_t i = 0;

    if (entry == NULL) {
        return -1;
    }
    snprintf(entry, len, "%s=%s", key, value);
    while (i < e->count &&
           !(strncmp(e->vars[i], key, key_len) == 0 && e->vars[i][key_len] == '=')) {
        i++;
    }
    if (i == e->count) {
        if (e->count == RELAY_ENV_MAX) {
            free(entry);
            return -1;
        }
        e->count++;
    }
    free(e->vars[i]);
    e->vars[i] = entry;
    return 0;
}

int
relay_env_set_int(struct relay_env *e, const char *key, long long value)
{
    char text[32];

    snprintf(text, sizeof(text), "%lld", value);
    return relay_env_set(e, key, text);
}

void
relay_env_fini(struct relay_env *e)
{
    for (size_t i = 0; i < e->count; i++) {
        free(e->vars[i]);
    }
    memset(e, 0, sizeof(*e));
}
