/* SPDX-License-Identifier: MIT */
/*
 * settings.h - the programs' configuration: one table of settings.
 *
 * Every setting is one row: the environment variable, its flag (the
 * variable's name without OUTBOX_, lower-case, dashes), its type, bounds,
 * default and one line of help. Parsing, bounds checks, --help and the
 * README's table all come from that row, so they cannot drift apart.
 * Precedence: default, then environment, then flags.
 */
#ifndef OBX_SETTINGS_H
#define OBX_SETTINGS_H

#include <stddef.h>
#include <stdio.h>

struct obx_config {
    const char *database_url;
    const char *nats_url;
    const char *bus; /* jetstream | nats-core | db */
    const char *schema;
    const char *relay_mode; /* mark | prune */
    const char *stream;
    const char *subject_prefix;
    const char *http_addr;
    const char *ce_source;
    const char *nats_creds;
    const char *nats_tls_ca;
    const char *nats_tls_cert;
    const char *nats_tls_key;
    const char *log_level; /* debug | info | warn | error */
    const char *name;
    const char *test_crash_on_event_type;
    const char *consumer_name;
    long max_attempts;
    long lease_seconds;
    long ledger_lease_seconds;
    long batch_size;
    long publish_timeout_ms;
    long max_in_flight;
    long poll_max_ms;
    long listen;
    long backoff_base_ms;
    long backoff_cap_ms;
    long max_lease_expiries;
    long retention_hours;
    long ledger_retention_days;
    long drain_timeout_seconds;
    long stream_max_age_seconds;
    long stream_max_bytes;
    long duplicate_window_seconds;
    long max_envelope_bytes;
    long ack_wait_seconds;
    long max_deliver;
    long handler_timeout_seconds;
    long test_crash_after_ledger_commit;
    long test_crash_after_publish;
};

enum obx_setting_type { OBX_SETTING_STR, OBX_SETTING_INT, OBX_SETTING_CHOICE };

struct obx_setting {
    const char *env; /* environment variable; the flag derives from it */
    enum obx_setting_type type;
    size_t offset;        /* where the value lands in struct obx_config */
    const char *fallback; /* default as text; NULL: none (unset) */
    long min, max;        /* bounds for OBX_SETTING_INT */
    const char *choices;  /* "a|b|c" for OBX_SETTING_CHOICE */
    const char *help;     /* one line for --help and the README */
};

extern const struct obx_setting obx_settings[];
extern const size_t obx_settings_count;

/*
 * Fills `cfg` from defaults, the environment and `argv` flags
 * (--name=value or --name value). Arguments that are not settings are
 * left in `argv` in order and their count returned in `*rest`. On a bad
 * value returns -1 with one line in `msg` naming the variable and the
 * accepted values (the program exits 2).
 */
int obx_settings_load(struct obx_config *cfg, int argc, char **argv, int *rest, char *msg,
                      size_t msg_cap);

/* --help: every setting with its flag, default and help. */
void obx_settings_print_help(FILE *out);

/* The README's settings table (Markdown), generated from the same rows. */
void obx_settings_print_markdown(FILE *out);

#endif
