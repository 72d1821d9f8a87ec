/* SPDX-License-Identifier: MIT */
/*
 * test_settings.c - the settings table: defaults, environment, flags,
 * bounds, and one clear line for a bad value.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"

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
    char msg[256];
    int rest = -1;

    cr_assert_eq(obx_settings_load(&cfg, 0, NULL, &rest, msg, sizeof(msg)), 0, "%s", msg);
    cr_assert_eq(rest, 0);
    cr_assert_str_eq(cfg.schema, "outbox");
    cr_assert_str_eq(cfg.bus, "jetstream");
    cr_assert_str_eq(cfg.relay_mode, "mark");
    cr_assert_str_eq(cfg.stream, "EVENTS");
    cr_assert_str_eq(cfg.subject_prefix, "events");
    cr_assert_eq(cfg.lease_seconds, 60);
    cr_assert_eq(cfg.ledger_lease_seconds, 1800);
    cr_assert_null(cfg.database_url);
}

Test(settings, flags_override_the_environment)
{
    struct obx_config cfg;
    char msg[256];
    char *argv[] = {"relay", "--batch-size", "250", "--relay-mode=prune", "extra", NULL};
    int rest = 0;

    setenv("OUTBOX_BATCH_SIZE", "50", 1);
    setenv("OUTBOX_LEASE_SECONDS", "1", 1);
    cr_assert_eq(obx_settings_load(&cfg, 5, argv, &rest, msg, sizeof(msg)), 0, "%s", msg);
    cr_assert_eq(cfg.batch_size, 250);
    cr_assert_eq(cfg.lease_seconds, 1, "environment applies when no flag is given");
    cr_assert_str_eq(cfg.relay_mode, "prune");
    cr_assert_eq(rest, 2);
    cr_assert_str_eq(argv[0], "relay");
    cr_assert_str_eq(argv[1], "extra");
}

Test(settings, an_out_of_range_value_names_the_variable_and_the_range)
{
    struct obx_config cfg;
    char msg[256];
    int rest;

    setenv("OUTBOX_LEASE_SECONDS", "0", 1);
    cr_assert_eq(obx_settings_load(&cfg, 0, NULL, &rest, msg, sizeof(msg)), -1);
    cr_assert_str_eq(msg, "OUTBOX_LEASE_SECONDS=\"0\" must be a whole number from 1 to 3600");
}

Test(settings, a_choice_lists_the_accepted_values)
{
    struct obx_config cfg;
    char msg[256];
    char *argv[] = {"--bus", "kafka"};
    int rest;

    cr_assert_eq(obx_settings_load(&cfg, 2, argv, &rest, msg, sizeof(msg)), -1);
    cr_assert_str_eq(msg, "OUTBOX_BUS=\"kafka\" is not one of jetstream|nats-core|db");
}

Test(settings, trailing_garbage_in_a_number_is_refused)
{
    struct obx_config cfg;
    char msg[256];
    int rest;

    setenv("OUTBOX_BATCH_SIZE", "100x", 1);
    cr_assert_eq(obx_settings_load(&cfg, 0, NULL, &rest, msg, sizeof(msg)), -1);
    cr_assert(strstr(msg, "OUTBOX_BATCH_SIZE") != NULL, "%s", msg);
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
