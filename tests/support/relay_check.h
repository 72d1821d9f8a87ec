/* SPDX-License-Identifier: MIT */
/*
 * relay_check.h - the checker of FAULTS.md §1 for relay tests, and what
 * the tests read from relay logs and settings.
 *
 * After quiescence: C = committed event ids (the test's own table, written
 * in the same transactions as the events), S = ids read from the stream,
 * Q = rows quarantined as invalid, D = dead-lettered ids. Then
 *   lost        = |C \ (S ∪ Q ∪ D)|   must be 0
 *   phantom     = |S \ C|              must be 0
 *   stream_dups = |S| - |distinct S|   must be 0 within the duplicate window
 * No server is touched here except through the PGconn the caller passes.
 */
#ifndef OBX_TEST_RELAY_CHECK_H
#define OBX_TEST_RELAY_CHECK_H

#include <stddef.h>

#include <libpq-fe.h>

#include "id_set.h"

struct relay_check {
    size_t committed;   /* |C| */
    size_t stream;      /* |S|, duplicates included */
    size_t quarantined; /* |Q| */
    size_t dead;        /* |D| */
    size_t lost;
    size_t phantom;
    size_t stream_dups;
    char lost_example[ID_TEXT_CAP]; /* one id of each kind, for failure messages */
    char phantom_example[ID_TEXT_CAP];
    char dup_example[ID_TEXT_CAP];
};

/*
 * Compares `stream` (S, sorted here) with the database: `committed_sql`
 * selects C (one uuid or text column); Q and D come from schema "outbox".
 * Returns 0, or -1 with the reason in `err`.
 */
int relay_check_run(PGconn *conn, const char *committed_sql, struct id_set *stream,
                    struct relay_check *out, char *err, size_t cap);

/* What relay logs say about leases (debug lines of outboxd relay). */
struct lease_log {
    size_t batches;   /* "lease batch" lines */
    size_t rows;      /* their rows= summed */
    size_t max_rows;  /* the largest batch */
    size_t lost_rows; /* rows= of "lease lost before finish" lines, summed */
};

/* Adds what `log` says to `out` (zero it first; call once per relay log). */
void lease_log_scan(const char *log, struct lease_log *out);

/* Occurrences of `needle` in `text`. */
size_t text_count(const char *text, const char *needle);

/* ---- outboxd relay settings ---------------------------------------------------------- */

enum { RELAY_ENV_MAX = 48 };

/* "KEY=VALUE" entries for harness_spawn(), NULL-terminated. */
struct relay_env {
    char *vars[RELAY_ENV_MAX + 1]; /* owned */
    size_t count;
};

/*
 * The settings every relay test starts from: the servers, debug logs, the
 * test's own stream and subject prefix, and short leases, timeouts and
 * backoff so that CI stays fast (see relay_check.c for the values).
 */
void relay_env_init(struct relay_env *e, const char *database_url, const char *nats_url,
                    const char *stream, const char *subject_prefix);

/* Sets or replaces `key`; -1 when out of room or memory. */
int relay_env_set(struct relay_env *e, const char *key, const char *value);

/* Same with an integer value. */
int relay_env_set_int(struct relay_env *e, const char *key, long long value);

void relay_env_fini(struct relay_env *e);

#endif
