/* SPDX-License-Identifier: MIT */
/*
 * pg_conn.h - one way to open a worker's PostgreSQL connection, shared by
 * the store (relay, DB feed) and the ledger (consumers): the same
 * keepalives and timeouts, no notices printed, the same session limits.
 */
#ifndef OBX_PG_CONN_H
#define OBX_PG_CONN_H

#include <libpq-fe.h>

#include "common/sql.h"

#include "outbox/outbox.h"

/*
 * Connects to `conninfo` (a libpq URL or key=value string), adding
 * keepalives and connect/TCP timeouts unless the conninfo or a PG*
 * variable sets them, then bounds the session (session_setup.sql). An
 * explicit application_name in the conninfo wins over `application_name`
 * (may be NULL). On success `*out` owns the connection (PQfinish);
 * OUTBOX_EUNAVAILABLE when the server cannot be reached, OUTBOX_EINVAL for
 * a conninfo libpq cannot parse (the message never quotes it: it may hold
 * a password).
 */
outbox_status obx_pg_connect(const char *conninfo, const char *application_name, PGconn **out,
                             outbox_error *err);

/* Where a store or a ledger connects, kept to reconnect after an outage. */
struct obx_pg_target {
    char *conninfo;         /* owned; never put into a message: it may hold a password */
    char *application_name; /* owned; NULL for libpq's default */
    char quoted_schema[OBX_SCHEMA_QUOTED_CAP]; /* the outbox schema, quoted, with its dot */
    char schema[OBX_SCHEMA_MAX_LEN + 1];
};

/*
 * Copies the strings; OUTBOX_EINVAL without a conninfo or for a bad
 * schema name, OUTBOX_ENOMEM.
 */
outbox_status obx_pg_target_init(struct obx_pg_target *t, const char *conninfo,
                                 const char *application_name, const char *schema,
                                 outbox_error *err);
void obx_pg_target_fini(struct obx_pg_target *t);

/*
 * obx_pg_connect() to `t`, then checks that the schema has every migration
 * this build needs; a connection already in `*conn` is closed first. An
 * unmigrated or older schema is OUTBOX_EUNAVAILABLE, so a worker started
 * before `outboxctl migrate` waits for it (saying so) instead of failing
 * every statement.
 */
outbox_status obx_pg_target_connect(const struct obx_pg_target *t, PGconn **conn,
                                    outbox_error *err);

/*
 * A worker's PostgreSQL session: where it connects, its statements rendered
 * once for the schema, and the live connection. The store (relay, DB feed)
 * and the ledger (consumers) each hold one; pg_session_pg.c.
 */
enum { OBX_PG_SESSION_MAX_SQL = 24 };
/* `prepared` below holds one bit per statement. */
_Static_assert(OBX_PG_SESSION_MAX_SQL <= sizeof(unsigned) * 8, "prepared bits overflow");

struct obx_pg_session {
    PGconn *conn;                      /* NULL while disconnected */
    struct obx_pg_target target;       /* where to (re)connect */
    char *sql[OBX_PG_SESSION_MAX_SQL]; /* owned: `templates` rendered for the schema */
    size_t sql_count;
    int use_prepared;  /* run sql[] as prepared statements (see obx_pg_session_exec()) */
    unsigned prepared; /* bit `which`: sql[which] is prepared on this connection */
};

/* Renders `count` statement templates for `schema`; connects nothing. */
outbox_status obx_pg_session_init(struct obx_pg_session *s, const char *conninfo,
                                  const char *application_name, const char *schema,
                                  const char *const *templates, size_t count, outbox_error *err);
void obx_pg_session_fini(struct obx_pg_session *s);

/*
 * Closes the connection held, if any, and makes a new one
 * (obx_pg_target_connect()); the new one has no statement prepared.
 */
outbox_status obx_pg_session_connect(struct obx_pg_session *s, outbox_error *err);

/* OUTBOX_EUNAVAILABLE unless the session holds a live connection. */
outbox_status obx_pg_session_require(struct obx_pg_session *s, outbox_error *err);

/*
 * Runs statement `which`. With `use_prepared` (the store's sessions), as a
 * named prepared statement (obx_sql_<which>) prepared on first use on each
 * connection: the relay's statements run thousands of times a second, and
 * parsing and planning the lease's CTE anew each time cost as much as
 * running it. A statement the server forgot (a pooler's DISCARD ALL) or
 * whose cached plan went stale (a migration changed its result) is
 * prepared again, and run again at once outside a transaction. The ledger
 * keeps unnamed statements: its transactions run handlers' SQL, which may
 * DEALLOCATE ALL, and a forgotten statement would abort the transaction.
 * The caller checks and PQclear()s the result.
 */
PGresult *obx_pg_session_exec(struct obx_pg_session *s, size_t which, const char *const *params,
                              int nparams);

/* Prepares statement `which` now unless it is (EXPLAIN EXECUTE needs it). */
outbox_status obx_pg_session_prepare(struct obx_pg_session *s, size_t which, int nparams,
                                     outbox_error *err);

/* The prepared statement's name of statement `which`: `name`. */
enum { OBX_PG_STATEMENT_NAME_CAP = 24 };
const char *obx_pg_session_statement_name(size_t which, char name[OBX_PG_STATEMENT_NAME_CAP]);

/* OUTBOX_OK if `res` holds a success; else the failure, classified into `err`. */
outbox_status obx_pg_session_check(struct obx_pg_session *s, const PGresult *res, const char *doing,
                                   outbox_error *err);

/* obx_pg_session_exec() and _check() together, for a statement whose rows are not read. */
outbox_status obx_pg_session_run(struct obx_pg_session *s, size_t which, const char *const *params,
                                 int nparams, const char *doing, outbox_error *err);

/* One statement of a pipeline: `text` if not NULL, else the session's statement `which`. */
struct obx_pg_step {
    size_t which;
    const char *text;
    const char *const *params;
    int nparams;
};

/*
 * Sends the `n` steps in one round trip and reads each one's result into
 * res[i] (the caller checks and PQclear()s them all, also on failure; a
 * step after a failed one is PGRES_PIPELINE_ABORTED). Statements run as
 * obx_pg_session_exec() would, but one the server forgot is not run again:
 * it fails, and is prepared anew next time. Returns OUTBOX_OK when every
 * result was read; a failure to send or read is OUTBOX_EUNAVAILABLE (the
 * connection cannot be used further).
 */
outbox_status obx_pg_session_pipeline(struct obx_pg_session *s, const struct obx_pg_step *steps,
                                      size_t n, PGresult **res, outbox_error *err);

/* Room for a retention pass's place: a uuid's text and its terminator. */
#define OBX_PRUNE_AFTER_CAP 37

/*
 * One batch of a retention pass: statement `which` deletes at most `limit`
 * rows older than `retention_seconds` ($1, $2) from key `after` on ($3;
 * "" or NULL: from the oldest); `*deleted` gets how many it did, and
 * `after` (OBX_PRUNE_AFTER_CAP bytes, unless NULL) the key it stopped at,
 * for the pass's next batch.
 */
outbox_status obx_pg_session_prune(struct obx_pg_session *s, size_t which,
                                   long long retention_seconds, int limit, char *after,
                                   const char *doing, size_t *deleted, outbox_error *err);

/* libpq's connection messages span lines ("\n\tIs the server running..."): joins them. */
void obx_pg_one_line(outbox_error *err);

#endif
