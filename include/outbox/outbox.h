/* SPDX-License-Identifier: MIT */
/*
 * outbox.h - write events into the outbox inside the caller's transaction.
 *
 * Rules that hold for every function declared here:
 *   - A function that can fail returns outbox_status; OUTBOX_OK is 0.
 *   - If `err` is not NULL it is reset on entry and receives the reason for
 *     a failure, so it needs no initialization.
 *   - Arguments are borrowed: the library copies whatever it keeps.
 *   - x_new() returns an object the caller owns and releases with x_free();
 *     x_free(NULL) does nothing.
 *   - Out-parameters are written only on success.
 *   - The library never prints and never begins, commits or rolls back the
 *     caller's transaction (outbox_migrate(), which runs its own, excepted).
 *   - Objects are not shared between threads unless a function says so.
 */
#ifndef OUTBOX_OUTBOX_H
#define OUTBOX_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <libpq-fe.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OUTBOX_API __attribute__((visibility("default")))

/* Codes say what the caller should do next, not where the error came from. */
typedef enum outbox_status {
    OUTBOX_OK = 0,
    OUTBOX_EINVAL,       /* bad argument, envelope or setting; retrying will not help */
    OUTBOX_ENOMEM,       /* out of memory */
    OUTBOX_ENOTXN,       /* the connection is not inside an open transaction */
    OUTBOX_EUNAVAILABLE, /* server unreachable or timed out; retry later, spend no attempt */
    OUTBOX_EDB,          /* the database refused; see outbox_error.sqlstate */
    OUTBOX_EREJECTED,    /* the broker or a handler refused this item; retry with backoff */
    OUTBOX_ECONFLICT,    /* someone else holds it (lease, claim); defer, spend no attempt */
} outbox_status;

typedef struct outbox_error {
    outbox_status code;
    char sqlstate[6]; /* five-character SQLSTATE when the database refused, else "" */
    char message[512];
} outbox_error;

/* "OUTBOX_EINVAL" and so on; never NULL. */
OUTBOX_API const char *outbox_status_name(outbox_status status);

/* The library's version, "MAJOR.MINOR.PATCH". */
OUTBOX_API const char *outbox_version(void);

/* ---- events ---------------------------------------------------------------------------- */

/* Limits on a well-formed envelope. */
enum {
    OUTBOX_DEFAULT_MAX_ENVELOPE_BYTES = 512 * 1024, /* fits 1 MiB max_payload with headers */
    OUTBOX_MAX_PAYLOAD_DEPTH = 64,                  /* {} is depth 1 */
    OUTBOX_MAX_ROUTE_BYTES = 222,  /* aggregate_type "." event_type; 255 - 32 - 1 */
    OUTBOX_MAX_PREFIX_BYTES = 32,  /* subject prefix, so every valid route fits 255 */
    OUTBOX_MAX_TENANT_BYTES = 128, /* tenant_id */
    OUTBOX_MAX_DATA_SUBJECT_BYTES = 256,
};

/* An event being built. Opaque: use the functions below. */
typedef struct outbox_event outbox_event;

/*
 * A new event with a fresh UUIDv7 id (monotonic within the process) and
 * occurred_at set to now. Returns NULL when out of memory or when the
 * system has no randomness to give.
 */
OUTBOX_API outbox_event *outbox_event_new(void);
OUTBOX_API void outbox_event_free(outbox_event *ev);

/*
 * Sets the route: `aggregate_type` is one token of [A-Za-z0-9_-], `event_type`
 * one or more such tokens joined by dots, and must not repeat the aggregate
 * type as its first token. OUTBOX_EINVAL names the field and value.
 */
OUTBOX_API outbox_status outbox_event_set_route(outbox_event *ev, const char *aggregate_type,
                                                const char *event_type, outbox_error *err);

/* `aggregate_id` is a UUID in canonical 8-4-4-4-12 form (either case; stored lower-case). */
OUTBOX_API outbox_status outbox_event_set_aggregate_id(outbox_event *ev, const char *aggregate_id,
                                                       outbox_error *err);

/*
 * The payload must be a JSON object ({} is valid), nested no deeper than
 * OUTBOX_MAX_PAYLOAD_DEPTH, with no NUL characters (PostgreSQL cannot store
 * them) and valid UTF-8 strings.
 * Keeps its own reference to `payload`; the caller still owns theirs.
 */
OUTBOX_API outbox_status outbox_event_set_payload(outbox_event *ev, json_t *payload,
                                                  outbox_error *err);

/* Same, from JSON text of `len` bytes (need not be NUL-terminated). */
OUTBOX_API outbox_status outbox_event_set_payload_json(outbox_event *ev, const char *json,
                                                       size_t len, outbox_error *err);

/* Optional fields; NULL clears. See the limits above; no control characters. */
OUTBOX_API outbox_status outbox_event_set_tenant_id(outbox_event *ev, const char *tenant_id,
                                                    outbox_error *err);
OUTBOX_API outbox_status outbox_event_set_data_subject(outbox_event *ev, const char *data_subject,
                                                       outbox_error *err);
/* W3C trace context: "00-<32 hex>-<16 hex>-<2 hex>", ids not all zero. */
OUTBOX_API outbox_status outbox_event_set_traceparent(outbox_event *ev, const char *traceparent,
                                                      outbox_error *err);

/* Overrides occurred_at (milliseconds since the Unix epoch, UTC). */
OUTBOX_API outbox_status outbox_event_set_occurred_at_ms(outbox_event *ev, int64_t unix_ms,
                                                         outbox_error *err);

/* The event's UUIDv7 as lower-case text. Valid until outbox_event_free(ev). */
OUTBOX_API const char *outbox_event_id(const outbox_event *ev);

/*
 * The envelope as compact JSON, exactly what will be stored and published.
 * Fails with OUTBOX_EINVAL if a required field is missing. `*json` is valid
 * until the event is changed or freed.
 */
OUTBOX_API outbox_status outbox_event_envelope_json(outbox_event *ev, const char **json,
                                                    size_t *len, outbox_error *err);

/* ---- configuration ---------------------------------------------------------------------- */

/*
 * A configuration for a writer, a relay or a consumer: every setting by
 * key, the same keys as the daemons' environment variables without
 * OUTBOX_, lower-case (OUTBOX_BATCH_SIZE is "batch_size");
 * docs/reference/settings.md lists each key, its default, its accepted
 * values and which kinds take it. New keys may come in any minor release; a key is
 * never renamed or removed within a major version.
 */
typedef struct outbox_config outbox_config;

typedef enum outbox_config_kind {
    OUTBOX_CONFIG_WRITER,   /* outbox_writer_new() */
    OUTBOX_CONFIG_RELAY,    /* outbox_relay_new() (outbox/worker.h) */
    OUTBOX_CONFIG_CONSUMER, /* outbox_consumer_new() (outbox/worker.h) */
} outbox_config_kind;

/* Every setting of `kind` at its default. NULL when out of memory or for an unknown kind. */
OUTBOX_API outbox_config *outbox_config_new(outbox_config_kind kind);
OUTBOX_API void outbox_config_free(outbox_config *cfg);

/*
 * Sets `key` from text, checked at once against the setting's type and
 * range: OUTBOX_EINVAL names the key and the value and says what is
 * accepted, and for a key this kind does not take. NULL unsets a text
 * setting (database_url, name...). `value` is copied.
 */
OUTBOX_API outbox_status outbox_config_set(outbox_config *cfg, const char *key, const char *value,
                                           outbox_error *err);

/* The same for a number ("batch_size", 500). */
OUTBOX_API outbox_status outbox_config_set_int(outbox_config *cfg, const char *key, long long value,
                                               outbox_error *err);

/* The value of `key` as text into `buf` ("" for an unset one); OUTBOX_EINVAL for an unknown key. */
OUTBOX_API outbox_status outbox_config_get(const outbox_config *cfg, const char *key, char *buf,
                                           size_t cap, outbox_error *err);

/*
 * Sets every key of this kind whose OUTBOX_<KEY> environment variable is
 * set and not empty, as the daemons do; then database_url_file's first
 * line becomes database_url, and credentials that exclude each other are
 * refused (docs/security.md). OUTBOX_EINVAL names the variable.
 */
OUTBOX_API outbox_status outbox_config_load_env(outbox_config *cfg, outbox_error *err);

/* ---- writing --------------------------------------------------------------------------- */

/*
 * A configured writer (keys "schema" and "max_envelope_bytes"), checked
 * once. Immutable after creation, so one writer may be shared by many
 * threads (each with its own connection). `cfg` is copied; NULL means the
 * defaults. OUTBOX_EINVAL for a configuration of another kind.
 */
typedef struct outbox_writer outbox_writer;
OUTBOX_API outbox_status outbox_writer_new(const outbox_config *cfg, outbox_writer **out,
                                           outbox_error *err);
OUTBOX_API void outbox_writer_free(outbox_writer *w);

/*
 * Validates `ev` and inserts it through `conn`, which must be inside an open
 * transaction (OUTBOX_ENOTXN otherwise): the event exists if and only if
 * that transaction commits. A validation failure (OUTBOX_EINVAL) sends
 * nothing, so the caller's transaction stays usable; a database error
 * (OUTBOX_EDB, OUTBOX_EUNAVAILABLE) leaves it aborted, as any failed
 * statement does.
 */
OUTBOX_API outbox_status outbox_writer_enqueue(const outbox_writer *w, PGconn *conn,
                                               outbox_event *ev, outbox_error *err);

/*
 * Same for `count` events in one round trip. All are validated before
 * anything is sent; the first invalid one fails the call, naming its index.
 */
OUTBOX_API outbox_status outbox_writer_enqueue_batch(const outbox_writer *w, PGconn *conn,
                                                     outbox_event *const *events, size_t count,
                                                     outbox_error *err);

/* outbox_writer_enqueue{,_batch} with the default configuration (schema "outbox"). */
OUTBOX_API outbox_status outbox_enqueue(PGconn *conn, outbox_event *ev, outbox_error *err);
OUTBOX_API outbox_status outbox_enqueue_batch(PGconn *conn, outbox_event *const *events,
                                              size_t count, outbox_error *err);

/* ---- schema ---------------------------------------------------------------------------- */

/*
 * Brings `schema` (NULL: "outbox") up to the newest migration this library
 * carries. Runs its own transactions, so `conn` must not be inside one;
 * safe to run from any number of processes at once (an advisory lock
 * serializes them). A schema that does not exist yet is made in one
 * transaction, with per-aggregate ordering on; an existing one is upgraded
 * and keeps its ordering as it was. `*applied`, if not NULL, receives how
 * many migrations this call applied.
 */
OUTBOX_API outbox_status outbox_migrate(PGconn *conn, const char *schema, int *applied,
                                        outbox_error *err);

/* Checks a schema name: [a-z_][a-z0-9_]{0,62}. OUTBOX_EINVAL names the value. */
OUTBOX_API outbox_status outbox_schema_name_check(const char *schema, outbox_error *err);

#ifdef __cplusplus
}
#endif

#endif /* OUTBOX_OUTBOX_H */
