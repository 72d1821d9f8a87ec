/* SPDX-License-Identifier: MIT */
/*
 * settings.c - the settings table and finding a row by key or flag.
 *
 * Defaults are chosen for production; tests shorten leases, backoff and
 * timeouts through the same keys. A row names the parts that take it, so
 * a relay's configuration refuses a consumer-only key by name.
 */
#include "settings.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/conninfo.h"
#include "common/error.h"
#include "common/secret.h"
#include "common/text.h"
#include "common/url_list.h"
#include "envelope/subject.h"
#include "uri_reference.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/*
 * NATS stream names become API subjects: one token, short. The value is
 * shown masked: cut short as it is, a URL pasted here would lose the '@'
 * that tells its password apart.
 */
static outbox_status
stream_name_check(const char *name, outbox_error *err)
{
    size_t len = strlen(name);
    char shown[200];

    if (len == 0 || len > 32 || !obx_token_valid(name, len)) {
        obx_mask_quote(name, shown, sizeof(shown));
        return obx_fail(err, OUTBOX_EINVAL, "stream %s must be 1 to 32 of [A-Za-z0-9_-]", shown);
    }
    return OUTBOX_OK;
}

/*
 * A durable JetStream consumer's name: no blank, '.', '*' or '>' (it is a
 * token of the server's API subjects), and short. A longer one is refused
 * by the server at every try, which looks like an outage.
 */
static outbox_status
consumer_name_check(const char *name, outbox_error *err)
{
    size_t len = strlen(name);

    if (len > OBX_CONSUMER_NAME_MAX || !obx_token_valid(name, len)) {
        return obx_fail(err, OUTBOX_EINVAL, "must be 1 to %d of [A-Za-z0-9_-]",
                        OBX_CONSUMER_NAME_MAX);
    }
    return OUTBOX_OK;
}

/*
 * A replica's name is written into log lines (relay=NAME), PostgreSQL's
 * application_name and the NATS connection name: a blank, a quote or a
 * line break in it would forge fields or lines.
 */
static outbox_status
replica_name_check(const char *name, outbox_error *err)
{
    size_t len = strlen(name);

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];

        if (c <= ' ' || c >= 0x7f || strchr("\"'\\=", c) != NULL) {
            len = 0;
        }
    }
    if (len == 0 || len > OBX_REPLICA_NAME_MAX) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "must be 1 to %d printable ASCII characters without blanks, quotes, "
                        "backslashes or '='",
                        OBX_REPLICA_NAME_MAX);
    }
    return OUTBOX_OK;
}

/*
 * CloudEvents' source is a URI-reference (RFC 3986), and not empty: an SDK
 * refuses every event whose source is not one, so it is refused here, at
 * start, rather than in every consumer.
 */
static outbox_status
ce_source_check(const char *source, outbox_error *err)
{
    outbox_error why = {0};
    size_t len = strlen(source);

    if (len == 0 || len > 1024) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "must be a URI-reference (RFC 3986) of 1 to 1024 bytes, the CloudEvents "
                        "source");
    }
    if (obx_uri_reference_check(source, &why) != OUTBOX_OK) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "must be a URI-reference (RFC 3986), the CloudEvents source: %s",
                        why.message);
    }
    return OUTBOX_OK;
}

/* A file read when connecting (credentials, TLS): missing, it would fail every connect. */
static outbox_status
readable_file_check(const char *path, outbox_error *err)
{
    struct stat st;

    if (path[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "must name a file");
    }
    if (stat(path, &st) != 0 || access(path, R_OK) != 0) {
        return obx_fail(err, OUTBOX_EINVAL, "cannot be read: %s", strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        return obx_fail(err, OUTBOX_EINVAL, "is not a regular file");
    }
    return OUTBOX_OK;
}

#define FIELD(name) offsetof(struct obx_config, name)
#define STR(env, field, parts, def, check, help)                                \
    {                                                                           \
        env, OBX_SETTING_STR, FIELD(field), parts, def, 0, 0, NULL, check, help \
    }
#define INT(env, field, parts, def, lo, hi, help)                                \
    {                                                                            \
        env, OBX_SETTING_INT, FIELD(field), parts, def, lo, hi, NULL, NULL, help \
    }
#define CHOICE(env, field, parts, def, choices, help)                                \
    {                                                                                \
        env, OBX_SETTING_CHOICE, FIELD(field), parts, def, 0, 0, choices, NULL, help \
    }

enum {
    W = OBX_FOR_WRITER,
    R = OBX_FOR_RELAY,
    C = OBX_FOR_CONSUMER,
    P = OBX_FOR_PROGRAM,
};

/* A CHOICE's values are in the order of the public enum they stand for. */
const struct obx_setting obx_settings[] = {
    STR("OUTBOX_DATABASE_URL", database_url, R | C, NULL, obx_conninfo_check,
        "PostgreSQL connection (libpq URL or key=value, checked at start as libpq would when "
        "connecting); the demo and bench start one if unset"),
    STR("OUTBOX_NATS_URL", nats_url, R | C, "nats://127.0.0.1:4222", obx_nats_url_check,
        "NATS server URL(s), comma-separated (every node of a cluster); tls:// for TLS"),
    CHOICE("OUTBOX_BUS", bus, R | C, "jetstream", "jetstream|nats-core|db",
           "jetstream (exactly once in the stream), nats-core (at most once), db (no broker)"),
    STR("OUTBOX_SCHEMA", schema, W | R | C, "outbox", outbox_schema_name_check,
        "schema of the outbox tables, [a-z_][a-z0-9_]{0,62}"),
    CHOICE("OUTBOX_RELAY_MODE", relay_mode, R | C, "mark", "mark|prune",
           "mark: keep published rows (status done) for replay; prune: delete them"),
    INT("OUTBOX_MAX_ATTEMPTS", max_attempts, R | C, "10", 1, 1000,
        "rejected publishes / handler failures before an event is dead-lettered"),
    INT("OUTBOX_LEASE_SECONDS", lease_seconds, R | C, "60", 1, 3600,
        "relay and DB-feed lease; another replica takes rows over after it"),
    INT("OUTBOX_LEDGER_LEASE_SECONDS", ledger_lease_seconds, C, "1800", 1, 86400,
        "consumer claim lease; renewed every third of itself while an exec: or http: handler "
        "runs; below "
        "OUTBOX_HANDLER_TIMEOUT_SECONDS it must be at least 2"),
    INT("OUTBOX_BATCH_SIZE", batch_size, R | C, NULL, 1, 10000,
        "rows a relay claims at a time (unset: 500; a fleet relay: 100 per database) and messages "
        "a consumer fetches (unset: 100)"),
    STR("OUTBOX_STREAM", stream, R | C, "EVENTS", stream_name_check, "JetStream stream name"),
    STR("OUTBOX_SUBJECT_PREFIX", subject_prefix, R | C, "events", obx_subject_prefix_check,
        "subject prefix: {prefix}.{aggregate_type}.{event_type}; the stream captures {prefix}.>"),
    STR("OUTBOX_HTTP_ADDR", http_addr, P, NULL, NULL,
        "host:port for /metrics, /healthz and /readyz; unset: no HTTP server"),
    INT("OUTBOX_PUBLISH_TIMEOUT_MS", publish_timeout_ms, R, "5000", 100, 600000,
        "how long the relay waits for acks before releasing the rows"),
    INT("OUTBOX_MAX_IN_FLIGHT", max_in_flight, R, "1024", 1, 65536,
        "async publish window (messages)"),
    INT("OUTBOX_POLL_MAX_MS", poll_max_ms, R | C, "1000", 10, 60000,
        "longest idle poll when no wake-up arrives"),
    INT("OUTBOX_LISTEN", listen, R, "1", 0, 1,
        "1: LISTEN for commit wake-ups; 0: poll only (behind PgBouncer transaction mode)"),
    INT("OUTBOX_BACKOFF_BASE_MS", backoff_base_ms, R | C, "5000", 1, 3600000,
        "first retry delay; doubles per failure (tests shorten it)"),
    INT("OUTBOX_BACKOFF_CAP_MS", backoff_cap_ms, R | C, "300000", 1, 86400000,
        "longest retry delay (jitter is +-10 %); at least OUTBOX_BACKOFF_BASE_MS"),
    INT("OUTBOX_MAX_LEASE_EXPIRIES", max_lease_expiries, R, "5", 1, 1000,
        "leases that run out with no outcome before a row is dead-lettered (crash loops)"),
    INT("OUTBOX_RETENTION_HOURS", retention_hours, R | C, "24", 0, 8760,
        "mark mode: published (or, with OUTBOX_BUS=db, handled) rows are deleted after this"),
    INT("OUTBOX_LEDGER_RETENTION_DAYS", ledger_retention_days, C, "30", 1, 3650,
        "consumer ledger rows are deleted after this (not below the stream's max age)"),
    INT("OUTBOX_DRAIN_TIMEOUT_SECONDS", drain_timeout_seconds, P, "10", 0, 600,
        "on SIGTERM: finish or release held work within this"),
    INT("OUTBOX_STREAM_MAX_AGE_SECONDS", stream_max_age_seconds, R | C, "604800", 0, 3153600000LL,
        "stream max_age when the stream is created (0: unlimited)"),
    INT("OUTBOX_STREAM_MAX_BYTES", stream_max_bytes, R, "-1", -1, 4611686018427387904LL,
        "stream max_bytes when the stream is created (-1: unlimited)"),
    INT("OUTBOX_STREAM_REPLICAS", stream_replicas, R | C, "1", 1, 5,
        "stream num_replicas when the stream is created (3 on a JetStream cluster)"),
    INT("OUTBOX_DUPLICATE_WINDOW_SECONDS", duplicate_window_seconds, R, "3600", 1, 604800,
        "stream duplicate_window; updated in place on an existing stream"),
    INT("OUTBOX_MAX_ENVELOPE_BYTES", max_envelope_bytes, W, "524288", 1024, 67108864,
        "envelope size limit of the C writer (and the demo's writers)"),
    STR("OUTBOX_CONSUMER_NAME", consumer_name, C, "outbox", consumer_name_check,
        "durable JetStream consumer shared by consumer replicas (one per consumer group); 1-64 of "
        "[A-Za-z0-9_-]"),
    INT("OUTBOX_ACK_WAIT_SECONDS", ack_wait_seconds, C, "60", 1, 86400,
        "JetStream ack_wait: an unsettled message is redelivered after it"),
    INT("OUTBOX_MAX_DELIVER", max_deliver, C, "-1", -1, 1000000000,
        "JetStream max_deliver, a safety net only (-1: unlimited; attempts live in the ledger)"),
    INT("OUTBOX_HANDLER_TIMEOUT_SECONDS", handler_timeout_seconds, P, "300", 1, 86400,
        "an exec: handler running longer is killed, an http: request abandoned, and the run counts "
        "as failed (a handler's timeout option overrides it)"),
    STR("OUTBOX_CE_SOURCE", ce_source, R | C, "pgoutbox", ce_source_check,
        "CloudEvents ce-source header: a URI-reference (RFC 3986), ASCII only "
        "(percent-encode the rest); refused at start otherwise"),
    STR("OUTBOX_DATABASE_URL_FILE", database_url_file, R | C, NULL, readable_file_check,
        "file holding OUTBOX_DATABASE_URL (a mounted secret); instead of the variable"),
    STR("OUTBOX_NATS_CREDS", nats_creds, R | C, NULL, readable_file_check,
        "NATS credentials file (.creds); must be readable at start"),
    STR("OUTBOX_NATS_NKEY_SEED", nats_nkey_seed, R | C, NULL, readable_file_check,
        "file holding a NATS user NKey seed (SU...); not with OUTBOX_NATS_CREDS"),
    STR("OUTBOX_NATS_USER", nats_user, R | C, NULL, NULL,
        "NATS user name, with OUTBOX_NATS_PASSWORD_FILE"),
    STR("OUTBOX_NATS_PASSWORD_FILE", nats_password_file, R | C, NULL, readable_file_check,
        "file holding the password of OUTBOX_NATS_USER (first line)"),
    STR("OUTBOX_NATS_TOKEN_FILE", nats_token_file, R | C, NULL, readable_file_check,
        "file holding a NATS authentication token (first line)"),
    STR("OUTBOX_NATS_TLS_CA", nats_tls_ca, R | C, NULL, readable_file_check,
        "CA file to verify the NATS server; must be readable at start"),
    STR("OUTBOX_NATS_TLS_CERT", nats_tls_cert, R | C, NULL, readable_file_check,
        "client certificate for NATS TLS; must be readable at start"),
    STR("OUTBOX_NATS_TLS_KEY", nats_tls_key, R | C, NULL, readable_file_check,
        "client key for NATS TLS; must be readable at start"),
    CHOICE("OUTBOX_LOG_LEVEL", log_level, P, "info", "debug|info|warn|error", "least level logged"),
    STR("OUTBOX_NAME", name, R | C, NULL, replica_name_check,
        "replica name in logs and server views, 1-255 printable ASCII without blanks, quotes, "
        "backslashes or =; default host-pid"),
    STR("OUTBOX_FLEET_FILE", fleet_file, P, NULL, NULL,
        "relay: serve every database listed in this file (NAME URL [schema=] [stream=] "
        "[subject_prefix=]); unset: the one OUTBOX_DATABASE_URL"),
    INT("OUTBOX_FLEET_DATABASE_IN_FLIGHT", fleet_database_in_flight, P, "256", 1, 65536,
        "fleet: most messages one database has in flight inside the replica's shared "
        "OUTBOX_MAX_IN_FLIGHT window (its batch is cut to this)"),
    INT("OUTBOX_FLEET_TRY_MS", fleet_try_ms, P, "2000", 50, 600000,
        "fleet: how often a replica tries to take over a database it does not own"),
};

const size_t obx_settings_count = sizeof(obx_settings) / sizeof(obx_settings[0]);

/* The row's name after OUTBOX_, lower-case, with `sep` for each underscore. */
static void
derive(const struct obx_setting *s, char sep, char *out, size_t cap)
{
    size_t w = 0;

    for (const char *p = s->env + strlen("OUTBOX_"); *p && w + 1 < cap; p++) {
        out[w++] = *p == '_' ? sep : (char)tolower((unsigned char)*p);
    }
    out[w] = '\0';
}

void
obx_setting_key(const struct obx_setting *s, char *out, size_t cap)
{
    derive(s, '_', out, cap);
}

void
obx_setting_flag(const struct obx_setting *s, char *out, size_t cap)
{
    derive(s, '-', out, cap);
}

static const struct obx_setting *
find(char sep, const char *name, size_t len)
{
    char derived[64];

    for (size_t i = 0; i < obx_settings_count; i++) {
        derive(&obx_settings[i], sep, derived, sizeof(derived));
        if (strlen(derived) == len && strncmp(derived, name, len) == 0) {
            return &obx_settings[i];
        }
    }
    return NULL;
}

long long
obx_batch_size(const struct obx_config *cfg, unsigned part)
{
    if (cfg->batch_size > 0) {
        return cfg->batch_size;
    }
    return part == OBX_FOR_RELAY ? OBX_RELAY_BATCH_DEFAULT : OBX_CONSUMER_BATCH_DEFAULT;
}

const struct obx_setting *
obx_setting_by_key(const char *key)
{
    return key != NULL ? find('_', key, strlen(key)) : NULL;
}

const struct obx_setting *
obx_setting_by_flag(const char *flag, size_t len)
{
    return find('-', flag, len);
}

int
obx_setting_choice_index(const struct obx_setting *s, const char *value)
{
    size_t len = strlen(value);
    int index = 0;

    for (const char *p = s->choices; p != NULL && *p; index++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);

        if (n == len && strncmp(p, value, n) == 0) {
            return index;
        }
        p = bar ? bar + 1 : NULL;
    }
    return -1;
}
