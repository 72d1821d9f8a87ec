/* SPDX-License-Identifier: MIT */
/*
 * settings.h - the one table of settings.
 *
 * Every setting is one row: its environment variable (the key is the
 * variable's name without OUTBOX_, lower-case: OUTBOX_BATCH_SIZE is the key
 * batch_size and the flag --batch-size), its type, bounds, default, the
 * parts that take it, and one line of help. The library's configuration
 * objects (outbox_config_set), the daemons' environment and flags, --help
 * and docs/reference/settings.md all come from these rows, so they cannot drift.
 */
#ifndef OBX_SETTINGS_H
#define OBX_SETTINGS_H

#include <stddef.h>

#include "outbox/outbox.h"

/* Longest OUTBOX_CONSUMER_NAME and OUTBOX_NAME (a fleet member's is REPLICA.DATABASE). */
#define OBX_CONSUMER_NAME_MAX 64
#define OBX_REPLICA_NAME_MAX  255

/* Which parts take a setting: a row's `parts`, a configuration's kind. */
enum obx_parts {
    OBX_FOR_WRITER = 1 << 0,
    OBX_FOR_RELAY = 1 << 1,
    OBX_FOR_CONSUMER = 1 << 2,
    OBX_FOR_PROGRAM = 1 << 3, /* the daemons and tools themselves (HTTP, logging, drain) */
    OBX_FOR_ALL = (1 << 4) - 1,
};

/*
 * Every setting's value. A configuration object holds one, whatever its
 * kind; a part reads only the fields its rows name. Strings are owned
 * (NULL: unset); a CHOICE holds the index of its value in the row's
 * choices, which is the value of the matching public enum.
 */
struct obx_config {
    unsigned parts; /* enum obx_parts: the keys this object takes */
    char *database_url, *nats_url, *schema, *stream, *subject_prefix, *http_addr, *ce_source;
    char *nats_creds, *nats_tls_ca, *nats_tls_cert, *nats_tls_key, *name, *consumer_name;
    char *fleet_file, *database_url_file, *nats_nkey_seed, *nats_user, *nats_password_file;
    char *nats_token_file;
    int bus;        /* outbox_bus_kind */
    int relay_mode; /* outbox_relay_mode */
    int log_level;  /* outbox_log_level */
    long long max_attempts, lease_seconds, ledger_lease_seconds, batch_size, publish_timeout_ms;
    long long max_in_flight, poll_max_ms, listen, backoff_base_ms, backoff_cap_ms;
    long long max_lease_expiries, retention_hours, ledger_retention_days, drain_timeout_seconds;
    long long stream_max_age_seconds, stream_max_bytes, stream_replicas, duplicate_window_seconds;
    long long max_envelope_bytes, ack_wait_seconds, max_deliver, handler_timeout_seconds;
    long long fleet_database_in_flight, fleet_try_ms;
};

enum obx_setting_type { OBX_SETTING_STR, OBX_SETTING_INT, OBX_SETTING_CHOICE };

struct obx_setting {
    const char *env; /* environment variable; the key and the flag derive from it */
    enum obx_setting_type type;
    size_t offset;        /* where the value lands in struct obx_config */
    unsigned parts;       /* enum obx_parts */
    const char *fallback; /* default as text; NULL: none (unset) */
    long long min, max;   /* bounds for OBX_SETTING_INT */
    const char *choices;  /* "a|b|c" for OBX_SETTING_CHOICE */
    /* Optional rule for a STR value beyond its type; OUTBOX_EINVAL names it. */
    outbox_status (*check)(const char *value, outbox_error *err);
    const char *help; /* one line for --help and the settings reference */
};

extern const struct obx_setting obx_settings[];
extern const size_t obx_settings_count;

/*
 * OUTBOX_BATCH_SIZE unset (0 in struct obx_config): each part's own. A relay
 * claims 500 rows at a time: at 100, two relays needed a hundred claims a
 * second to keep up with 10,000 events/s and fell behind (docs/benchmarks.md).
 * A consumer fetches 100 messages: a fetch is held until its last message is
 * handled, and the ack wait runs for all of them.
 */
enum { OBX_RELAY_BATCH_DEFAULT = 500, OBX_CONSUMER_BATCH_DEFAULT = 100 };

/* A fleet relay's batch per database, unset: ten fit the shared window (fleet_member.c). */
enum { OBX_FLEET_BATCH_DEFAULT = 100 };

/* The batch size `part` (OBX_FOR_RELAY or OBX_FOR_CONSUMER) runs with: set, or its default. */
long long obx_batch_size(const struct obx_config *cfg, unsigned part);

/* The row whose key is `key` ("batch_size"), or NULL. */
const struct obx_setting *obx_setting_by_key(const char *key);

/* The row whose flag is `flag` without its dashes ("batch-size", `len` bytes), or NULL. */
const struct obx_setting *obx_setting_by_flag(const char *flag, size_t len);

/* The key ("batch_size") and the flag ("batch-size") of a row, into `out`. */
void obx_setting_key(const struct obx_setting *s, char *out, size_t cap);
void obx_setting_flag(const struct obx_setting *s, char *out, size_t cap);

/* Index of `value` in a row's choices, or -1. */
int obx_setting_choice_index(const struct obx_setting *s, const char *value);

#endif
