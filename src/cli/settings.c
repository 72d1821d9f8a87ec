/* SPDX-License-Identifier: MIT */
/*
 * settings.c - the settings table and its parser.
 *
 * Defaults are chosen for production; tests shorten leases, backoff and
 * timeouts through the same variables.
 */
#include "settings.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h" /* last: poisons unsafe functions */

#define FIELD(name) offsetof(struct obx_config, name)
#define STR(env, field, def, help)                                \
    {                                                             \
        env, OBX_SETTING_STR, FIELD(field), def, 0, 0, NULL, help \
    }
#define INT(env, field, def, lo, hi, help)                          \
    {                                                               \
        env, OBX_SETTING_INT, FIELD(field), def, lo, hi, NULL, help \
    }
#define CHOICE(env, field, def, choices, help)                          \
    {                                                                   \
        env, OBX_SETTING_CHOICE, FIELD(field), def, 0, 0, choices, help \
    }

const struct obx_setting obx_settings[] = {
    STR("OUTBOX_DATABASE_URL", database_url, NULL,
        "PostgreSQL connection (libpq URL or key=value); the demo and bench start one if unset"),
    STR("OUTBOX_NATS_URL", nats_url, "nats://127.0.0.1:4222",
        "NATS server URL(s), comma-separated; tls:// for TLS"),
    CHOICE("OUTBOX_BUS", bus, "jetstream", "jetstream|nats-core|db",
           "jetstream (exactly once in the stream), nats-core (at most once), db (no broker)"),
    STR("OUTBOX_SCHEMA", schema, "outbox", "schema of the outbox tables, [a-z_][a-z0-9_]{0,62}"),
    CHOICE("OUTBOX_RELAY_MODE", relay_mode, "mark", "mark|prune",
           "mark: keep published rows (status done) for replay; prune: delete them"),
    INT("OUTBOX_MAX_ATTEMPTS", max_attempts, "10", 1, 1000,
        "rejected publishes / handler failures before an event is dead-lettered"),
    INT("OUTBOX_LEASE_SECONDS", lease_seconds, "60", 1, 3600,
        "relay and DB-feed lease; another replica takes rows over after it"),
    INT("OUTBOX_LEDGER_LEASE_SECONDS", ledger_lease_seconds, "1800", 1, 86400,
        "consumer claim lease; a claim older than this is taken over"),
    INT("OUTBOX_BATCH_SIZE", batch_size, "100", 1, 10000,
        "rows per lease (and messages per fetch)"),
    STR("OUTBOX_STREAM", stream, "EVENTS", "JetStream stream name"),
    STR("OUTBOX_SUBJECT_PREFIX", subject_prefix, "events",
        "subject prefix: {prefix}.{aggregate_type}.{event_type}; the stream captures {prefix}.>"),
    STR("OUTBOX_HTTP_ADDR", http_addr, NULL,
        "host:port for /metrics, /healthz and /readyz; unset: no HTTP server"),
    INT("OUTBOX_PUBLISH_TIMEOUT_MS", publish_timeout_ms, "5000", 100, 600000,
        "how long the relay waits for acks before releasing the rows"),
    INT("OUTBOX_MAX_IN_FLIGHT", max_in_flight, "1024", 1, 65536, "async publish window (messages)"),
    INT("OUTBOX_POLL_MAX_MS", poll_max_ms, "1000", 10, 60000,
        "longest idle poll when no wake-up arrives"),
    INT("OUTBOX_LISTEN", listen, "1", 0, 1,
        "1: LISTEN for commit wake-ups; 0: poll only (behind PgBouncer transaction mode)"),
    INT("OUTBOX_BACKOFF_BASE_MS", backoff_base_ms, "5000", 1, 3600000,
        "first retry delay; doubles per failure (tests shorten it)"),
    INT("OUTBOX_BACKOFF_CAP_MS", backoff_cap_ms, "300000", 1, 86400000,
        "longest retry delay (jitter is +-10 %)"),
    INT("OUTBOX_MAX_LEASE_EXPIRIES", max_lease_expiries, "5", 1, 1000,
        "leases that run out with no outcome before a row is dead-lettered (crash loops)"),
    INT("OUTBOX_RETENTION_HOURS", retention_hours, "24", 0, 8760,
        "mark mode: published (or, with OUTBOX_BUS=db, handled) rows are deleted after this"),
    INT("OUTBOX_LEDGER_RETENTION_DAYS", ledger_retention_days, "30", 1, 3650,
        "consumer ledger rows are deleted after this (not below the stream's max age)"),
    INT("OUTBOX_DRAIN_TIMEOUT_SECONDS", drain_timeout_seconds, "10", 0, 600,
        "on SIGTERM: finish or release held work within this"),
    INT("OUTBOX_STREAM_MAX_AGE_SECONDS", stream_max_age_seconds, "604800", 0, 3153600000L,
        "stream max_age when the stream is created (0: unlimited)"),
    INT("OUTBOX_STREAM_MAX_BYTES", stream_max_bytes, "-1", -1, 4611686018427387904L,
        "stream max_bytes when the stream is created (-1: unlimited)"),
    INT("OUTBOX_DUPLICATE_WINDOW_SECONDS", duplicate_window_seconds, "3600", 1, 604800,
        "stream duplicate_window; updated in place on an existing stream"),
    INT("OUTBOX_MAX_ENVELOPE_BYTES", max_envelope_bytes, "524288", 1024, 67108864,
        "writer envelope size limit of the demo writers (library writers: outbox_writer_options)"),
    STR("OUTBOX_CONSUMER_NAME", consumer_name, "outbox",
        "durable JetStream consumer shared by consumer replicas (one per consumer group)"),
    INT("OUTBOX_ACK_WAIT_SECONDS", ack_wait_seconds, "60", 1, 86400,
        "JetStream ack_wait: an unsettled message is redelivered after it"),
    INT("OUTBOX_MAX_DELIVER", max_deliver, "-1", -1, 1000000000,
        "JetStream max_deliver, a safety net only (-1: unlimited; attempts live in the ledger)"),
    INT("OUTBOX_HANDLER_TIMEOUT_SECONDS", handler_timeout_seconds, "300", 1, 86400,
        "an exec: handler running longer is killed and counts as failed"),
    STR("OUTBOX_CE_SOURCE", ce_source, "pgoutbox", "CloudEvents ce-source header"),
    STR("OUTBOX_NATS_CREDS", nats_creds, NULL, "NATS credentials file (.creds)"),
    STR("OUTBOX_NATS_TLS_CA", nats_tls_ca, NULL, "CA file to verify the NATS server"),
    STR("OUTBOX_NATS_TLS_CERT", nats_tls_cert, NULL, "client certificate for NATS TLS"),
    STR("OUTBOX_NATS_TLS_KEY", nats_tls_key, NULL, "client key for NATS TLS"),
    CHOICE("OUTBOX_LOG_LEVEL", log_level, "info", "debug|info|warn|error", "least level logged"),
    STR("OUTBOX_NAME", name, NULL, "replica name in logs and server views; default host-pid"),
    STR("OUTBOX_TEST_CRASH_ON_EVENT_TYPE", test_crash_on_event_type, NULL,
        "tests only: the relay aborts when it leases an event of this type (crash-loop tests)"),
    INT("OUTBOX_TEST_CRASH_AFTER_PUBLISH", test_crash_after_publish, "0", 0, 1000000,
        "tests only: N makes a relay abort when its Nth new batch is acked, before finishing it"),
    INT("OUTBOX_TEST_CRASH_AFTER_LEDGER_COMMIT", test_crash_after_ledger_commit, "0", 0, 1,
        "tests only: 1 makes a consumer abort after a batch's ledger commit, before its acks"),
};

const size_t obx_settings_count = sizeof(obx_settings) / sizeof(obx_settings[0]);

/* --batch-size for OUTBOX_BATCH_SIZE. */
static void
flag_name(const struct obx_setting *s, char *out, size_t cap)
{
    size_t w = 0;

    for (const char *p = s->env + strlen("OUTBOX_"); *p && w + 1 < cap; p++) {
        out[w++] = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
    }
    out[w] = '\0';
}

static int
choice_ok(const char *choices, const char *value)
{
    size_t len = strlen(value);

    for (const char *p = choices; p != NULL && *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);

        if (n == len && strncmp(p, value, n) == 0) {
            return 1;
        }
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

/* Stores `value` for setting `s`; -1 with `msg` when it is out of bounds. */
static int
apply(struct obx_config *cfg, const struct obx_setting *s, const char *value, char *msg, size_t cap)
{
    char *base = (char *)cfg + s->offset;
    char *end = NULL;
    long n;

    if (s->type == OBX_SETTING_STR) {
        *(const char **)(void *)base = value;
        return 0;
    }
    if (s->type == OBX_SETTING_CHOICE) {
        if (!choice_ok(s->choices, value)) {
            snprintf(msg, cap, "%s=\"%s\" is not one of %s", s->env, value, s->choices);
            return -1;
        }
        *(const char **)(void *)base = value;
        return 0;
    }
    errno = 0;
    n = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || n < s->min || n > s->max) {
        snprintf(msg, cap, "%s=\"%s\" must be a whole number from %ld to %ld", s->env, value,
                 s->min, s->max);
        return -1;
    }
    *(long *)(void *)base = n;
    return 0;
}

static int
load_defaults_and_env(struct obx_config *cfg, char *msg, size_t cap)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < obx_settings_count; i++) {
        const struct obx_setting *s = &obx_settings[i];
        const char *env = getenv(s->env);

        if (s->fallback != NULL && apply(cfg, s, s->fallback, msg, cap) != 0) {
            return -1;
        }
        if (env != NULL && env[0] != '\0' && apply(cfg, s, env, msg, cap) != 0) {
            return -1;
        }
    }
    return 0;
}

/* The setting whose flag is `name` (without dashes and value), or NULL. */
static const struct obx_setting *
find_flag(const char *name, size_t len)
{
    char flag[64];

    for (size_t i = 0; i < obx_settings_count; i++) {
        flag_name(&obx_settings[i], flag, sizeof(flag));
        if (strlen(flag) == len && strncmp(flag, name, len) == 0) {
            return &obx_settings[i];
        }
    }
    return NULL;
}

int
obx_settings_load(struct obx_config *cfg, int argc, char **argv, int *rest, char *msg, size_t cap)
{
    int kept = 0;

    if (load_defaults_and_env(cfg, msg, cap) != 0) {
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *eq = strchr(arg, '=');
        const struct obx_setting *s = NULL;
        const char *value;

        if (strncmp(arg, "--", 2) == 0) {
            s = find_flag(arg + 2, eq ? (size_t)(eq - arg - 2) : strlen(arg + 2));
        }
        if (s == NULL) {
            argv[kept++] = argv[i];
            continue;
        }
        if (eq == NULL && i + 1 >= argc) {
            snprintf(msg, cap, "%s needs a value (%s)", arg, s->env);
            return -1;
        }
        value = eq ? eq + 1 : argv[++i];
        if (apply(cfg, s, value, msg, cap) != 0) {
            return -1;
        }
    }
    *rest = kept;
    return 0;
}

static const char *
type_text(const struct obx_setting *s, char *buf, size_t cap)
{
    if (s->type == OBX_SETTING_CHOICE) {
        return s->choices;
    }
    if (s->type == OBX_SETTING_INT) {
        snprintf(buf, cap, "%ld..%ld", s->min, s->max);
        return buf;
    }
    return "text";
}

void
obx_settings_print_help(FILE *out)
{
    char flag[64], range[64];

    fputs("Settings (environment variable, or --flag; flags win):\n", out);
    for (size_t i = 0; i < obx_settings_count; i++) {
        const struct obx_setting *s = &obx_settings[i];

        flag_name(s, flag, sizeof(flag));
        fprintf(out, "  %-32s --%-28s default: %s (%s)\n      %s\n", s->env, flag,
                s->fallback ? s->fallback : "(unset)", type_text(s, range, sizeof(range)), s->help);
    }
}

void
obx_settings_print_markdown(FILE *out)
{
    char range[64];

    fputs("| Variable | Default | Values | Meaning |\n|---|---|---|---|\n", out);
    for (size_t i = 0; i < obx_settings_count; i++) {
        const struct obx_setting *s = &obx_settings[i];

        fprintf(out, "| `%s` | %s%s%s | %s | %s |\n", s->env, s->fallback ? "`" : "",
                s->fallback ? s->fallback : "(unset)", s->fallback ? "`" : "",
                type_text(s, range, sizeof(range)), s->help);
    }
}
