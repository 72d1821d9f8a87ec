/* SPDX-License-Identifier: MIT */
/*
 * test_settings.c - the settings table: defaults, environment, flags,
 * bounds, and one clear line for a bad value.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/settings.h"
#include "outbox/worker.h"

static void
clear_env(void)
{
    for (size_t i = 0; i < obx_settings_count; i++) {
        unsetenv(obx_settings[i].env);
    }
}

TestSuite(settings, .init = clear_env);

Test(settings, defaults_apply_when_nothing_is_set)
{
    struct obx_config cfg;
    outbox_error err = {0};
    int rest = -1;

    cr_assert_eq(obx_config_load(&cfg, 0, NULL, &rest, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(rest, 0);
    cr_assert_str_eq(cfg.schema, "outbox");
    cr_assert_eq(cfg.bus, OUTBOX_BUS_JETSTREAM);
    cr_assert_eq(cfg.relay_mode, OUTBOX_RELAY_MARK);
    cr_assert_eq(cfg.log_level, OUTBOX_LOG_INFO);
    cr_assert_str_eq(cfg.stream, "EVENTS");
    cr_assert_str_eq(cfg.subject_prefix, "events");
    cr_assert_eq(cfg.lease_seconds, 60);
    cr_assert_eq(cfg.ledger_lease_seconds, 1800);
    cr_assert_null(cfg.database_url);
    obx_config_fini(&cfg);
}

Test(settings, flags_override_the_environment)
{
    struct obx_config cfg;
    outbox_error err = {0};
    char *argv[] = {"relay", "--batch-size", "250", "--relay-mode=prune", "extra", NULL};
    int rest = 0;

    setenv("OUTBOX_BATCH_SIZE", "50", 1);
    setenv("OUTBOX_LEASE_SECONDS", "1", 1);
    cr_assert_eq(obx_config_load(&cfg, 5, argv, &rest, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(cfg.batch_size, 250);
    cr_assert_eq(cfg.lease_seconds, 1, "environment applies when no flag is given");
    cr_assert_eq(cfg.relay_mode, OUTBOX_RELAY_PRUNE);
    cr_assert_eq(rest, 2);
    cr_assert_str_eq(argv[0], "relay");
    cr_assert_str_eq(argv[1], "extra");
    obx_config_fini(&cfg);
}

Test(settings, an_out_of_range_value_names_the_variable_and_the_range)
{
    struct obx_config cfg;
    outbox_error err = {0};
    int rest;

    setenv("OUTBOX_LEASE_SECONDS", "0", 1);
    cr_assert_eq(obx_config_load(&cfg, 0, NULL, &rest, &err), OUTBOX_EINVAL);
    cr_assert_str_eq(err.message,
                     "OUTBOX_LEASE_SECONDS=\"0\" must be a whole number from 1 to 3600");
    obx_config_fini(&cfg);
}

Test(settings, a_choice_lists_the_accepted_values)
{
    struct obx_config cfg;
    outbox_error err = {0};
    char *argv[] = {"--bus", "kafka"};
    int rest;

    cr_assert_eq(obx_config_load(&cfg, 2, argv, &rest, &err), OUTBOX_EINVAL);
    cr_assert_str_eq(err.message, "OUTBOX_BUS=\"kafka\" is not one of jetstream|nats-core|db");
    obx_config_fini(&cfg);
}

Test(settings, trailing_garbage_in_a_number_is_refused)
{
    struct obx_config cfg;
    outbox_error err = {0};
    int rest;

    setenv("OUTBOX_BATCH_SIZE", "100x", 1);
    cr_assert_eq(obx_config_load(&cfg, 0, NULL, &rest, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "OUTBOX_BATCH_SIZE=\"100x\"") != NULL, "%s", err.message);
    obx_config_fini(&cfg);
}

Test(settings, every_design_variable_is_in_the_table)
{
    const char *design[] = {"OUTBOX_DATABASE_URL",
                            "OUTBOX_NATS_URL",
                            "OUTBOX_BUS",
                            "OUTBOX_SCHEMA",
                            "OUTBOX_RELAY_MODE",
                            "OUTBOX_MAX_ATTEMPTS",
                            "OUTBOX_LEASE_SECONDS",
                            "OUTBOX_LEDGER_LEASE_SECONDS",
                            "OUTBOX_BATCH_SIZE",
                            "OUTBOX_STREAM",
                            "OUTBOX_SUBJECT_PREFIX",
                            "OUTBOX_HTTP_ADDR"};

    for (size_t d = 0; d < sizeof(design) / sizeof(design[0]); d++) {
        int found = 0;

        for (size_t i = 0; i < obx_settings_count; i++) {
            found |= strcmp(obx_settings[i].env, design[d]) == 0;
        }
        cr_assert(found, "%s is missing from the settings table", design[d]);
    }
}

/* A CHOICE is stored as its index: the rows must list their values in the enums' order. */
Test(settings, choices_are_in_the_order_of_the_public_enums)
{
    const struct obx_setting *bus = obx_setting_by_key("bus");
    const struct obx_setting *mode = obx_setting_by_key("relay_mode");
    const struct obx_setting *level = obx_setting_by_key("log_level");

    cr_assert_eq(obx_setting_choice_index(bus, "jetstream"), OUTBOX_BUS_JETSTREAM);
    cr_assert_eq(obx_setting_choice_index(bus, "nats-core"), OUTBOX_BUS_NATS_CORE);
    cr_assert_eq(obx_setting_choice_index(bus, "db"), OUTBOX_BUS_DB);
    cr_assert_eq(obx_setting_choice_index(mode, "mark"), OUTBOX_RELAY_MARK);
    cr_assert_eq(obx_setting_choice_index(mode, "prune"), OUTBOX_RELAY_PRUNE);
    cr_assert_eq(obx_setting_choice_index(level, "debug"), OUTBOX_LOG_DEBUG);
    cr_assert_eq(obx_setting_choice_index(level, "info"), OUTBOX_LOG_INFO);
    cr_assert_eq(obx_setting_choice_index(level, "warn"), OUTBOX_LOG_WARN);
    cr_assert_eq(obx_setting_choice_index(level, "error"), OUTBOX_LOG_ERROR);
    cr_assert_eq(obx_setting_choice_index(level, "verbose"), -1);
}

/* No test hook is a setting: they are not in the table, --help or the settings reference. */
Test(settings, no_test_hook_is_a_setting)
{
    for (size_t i = 0; i < obx_settings_count; i++) {
        cr_assert(strstr(obx_settings[i].env, "TEST") == NULL, "%s is in the settings table",
                  obx_settings[i].env);
        cr_assert(strstr(obx_settings[i].help, "tests only") == NULL, "%s is a test hook",
                  obx_settings[i].env);
    }
}

/* The message of loading `value` into `env`: refused, naming the variable. */
static const char *
refusal(const char *env, const char *value)
{
    static outbox_error err;
    struct obx_config cfg;
    int rest;

    clear_env();
    err = (outbox_error){0};
    setenv(env, value, 1);
    cr_assert_eq(obx_config_load(&cfg, 0, NULL, &rest, &err), OUTBOX_EINVAL, "%s=%s accepted", env,
                 value);
    obx_config_fini(&cfg);
    unsetenv(env);
    cr_assert(strncmp(err.message, env, strlen(env)) == 0, "not named: %s", err.message);
    cr_assert_null(strchr(err.message, '\n'), "two lines: %s", err.message);
    return err.message;
}

Test(settings, what_would_fail_every_connect_is_refused_at_start_by_variable)
{
    const char *m;

    m = refusal("OUTBOX_DATABASE_URL", "not a url");
    cr_assert_not_null(strstr(m, "not a libpq URL or key=value string"), "%s", m);
    m = refusal("OUTBOX_DATABASE_URL", "host=db password=s3cret port=abc");
    cr_assert_not_null(strstr(m, "port \"abc\""), "%s", m);
    cr_assert_not_null(strstr(m, "password=***"), "%s", m);
    cr_assert_null(strstr(m, "s3cret"), "%s", m);
    m = refusal("OUTBOX_DATABASE_URL", "postgresql://u:s3cret@h/db?sslmode=sometimes");
    cr_assert_not_null(strstr(m, "sslmode"), "%s", m);
    cr_assert_null(strstr(m, "s3cret"), "%s", m);
    m = refusal("OUTBOX_DATABASE_URL", "password s3cret");
    cr_assert_null(strstr(m, "s3cret"), "%s", m);
    m = refusal("OUTBOX_NATS_URL", "nats://u:s3cret@h:abc");
    cr_assert_null(strstr(m, "s3cret"), "%s", m);
    m = refusal("OUTBOX_NATS_CREDS", "/nonexistent/user.creds");
    cr_assert_not_null(strstr(m, "/nonexistent/user.creds"), "%s", m);
    refusal("OUTBOX_NATS_TLS_CA", "/nonexistent/ca.pem");
    refusal("OUTBOX_NATS_TLS_CERT", "/");
    refusal("OUTBOX_NATS_TLS_KEY", "/nonexistent/key.pem");
    m = refusal("OUTBOX_CE_SOURCE", "svc\r\nforged: yes");
    cr_assert_not_null(strstr(m, "\\r\\n"), "%s", m);
    refusal("OUTBOX_CE_SOURCE", "two words");
    /* A source an SDK refuses as a URI-reference would make every message unreadable. */
    m = refusal("OUTBOX_CE_SOURCE", "not a uri");
    cr_assert_not_null(strstr(m, "OUTBOX_CE_SOURCE=\"not a uri\""), "%s", m);
    cr_assert_not_null(strstr(m, "URI-reference"), "%s", m);
    m = refusal("OUTBOX_CE_SOURCE", "caf\xc3\xa9/orders");
    cr_assert_not_null(strstr(m, "not ASCII; percent-encode it (%C3)"), "%s", m);
    m = refusal("OUTBOX_CE_SOURCE", "orders{eu}");
    cr_assert_not_null(strstr(m, "byte 7 '{'"), "%s", m);
    refusal("OUTBOX_CE_SOURCE", "orders%zz");
    refusal("OUTBOX_CE_SOURCE", "https://[::1/orders");
    refusal("OUTBOX_CE_SOURCE", "https://example.com:80a/orders");
    refusal("OUTBOX_CE_SOURCE", "1orders:eu");
    refusal("OUTBOX_CONSUMER_NAME",
            "a234567890123456789012345678901234567890123456789012345678901234567890");
    refusal("OUTBOX_CONSUMER_NAME", "has.dot");
    m = refusal("OUTBOX_NAME", "r1\n2026-01-01T00:00:00Z level=error forged");
    cr_assert_not_null(strstr(m, "r1\\n"), "%s", m);
    refusal("OUTBOX_NAME", "r1 level=error");
}

Test(settings, good_values_of_the_checked_settings_are_taken)
{
    struct obx_config cfg;
    outbox_error err = {0};
    int rest;

    setenv("OUTBOX_DATABASE_URL", "host=db port=5433,5434 dbname=x host=a,b sslmode=require", 1);
    setenv("OUTBOX_NATS_CREDS", OBX_SOURCE_DIR "/README.md", 1);
    setenv("OUTBOX_CE_SOURCE", "https://example.com/orders?x=1", 1);
    cr_assert_eq(obx_config_load(&cfg, 0, NULL, &rest, &err), OUTBOX_OK, "%s", err.message);
    obx_config_fini(&cfg);
    setenv("OUTBOX_CE_SOURCE", "urn:example:orders%C3%A9", 1);
    setenv("OUTBOX_CONSUMER_NAME", "billing-v2_a", 1);
    setenv("OUTBOX_NAME", "orders-relay-0.eu:1", 1);
    cr_assert_eq(obx_config_load(&cfg, 0, NULL, &rest, &err), OUTBOX_OK, "%s", err.message);
    obx_config_fini(&cfg);
    setenv("OUTBOX_DATABASE_URL", "postgresql://u:p@h1:5432,h2/db?connect_timeout=5", 1);
    cr_assert_eq(obx_config_load(&cfg, 0, NULL, &rest, &err), OUTBOX_OK, "%s", err.message);
    obx_config_fini(&cfg);
}

Test(settings, an_empty_flag_is_not_given_as_an_empty_variable_is_not_set)
{
    struct obx_config cfg;
    outbox_error err = {0};
    char *argv[] = {"--batch-size=", "--nats-tls-ca", "", "--lease-seconds=", "relay"};
    int rest;

    setenv("OUTBOX_BATCH_SIZE", "", 1);
    setenv("OUTBOX_LEASE_SECONDS", "7", 1);
    cr_assert_eq(obx_config_load(&cfg, 5, argv, &rest, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_eq(cfg.batch_size, 0, "unset");
    cr_assert_eq(obx_batch_size(&cfg, OBX_FOR_RELAY), 500, "unset: a relay claims 500 at a time");
    cr_assert_eq(obx_batch_size(&cfg, OBX_FOR_CONSUMER), 100, "unset: a consumer fetches 100");
    cr_assert_eq(cfg.lease_seconds, 7, "an empty flag leaves the variable's value");
    cr_assert_null(cfg.nats_tls_ca);
    cr_assert_eq(rest, 1);
    obx_config_fini(&cfg);
}
