/* SPDX-License-Identifier: MIT */
/*
 * test_config_warn.c - a misspelled OUTBOX_* variable named with the
 * setting it is close to; a setting the command does not read named as
 * ignored by it, from the environment or a flag; the tests' own variables
 * and a consumer's handlers left alone.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "config/config_warn.h"

static char lines[8][400];
static size_t count;

static void
collect(void *ctx, const char *line)
{
    (void)ctx;
    if (count < 8) {
        snprintf(lines[count], sizeof(lines[count]), "%s", line);
    }
    count++;
}

static size_t
warn(const struct obx_config_use *use, int argc, char *const *argv, char *const *envp)
{
    count = 0;
    memset(lines, 0, sizeof(lines));
    return obx_config_warn(use, argc, argv, envp, collect, NULL);
}

static const struct obx_config_use relay = {.command = "outboxd relay",
                                            .parts = OBX_FOR_RELAY | OBX_FOR_PROGRAM};

Test(config_warn, the_closest_setting_is_suggested_only_when_close)
{
    cr_assert_str_eq(obx_setting_closest("OUTBOX_BATCHSIZE")->env, "OUTBOX_BATCH_SIZE");
    cr_assert_str_eq(obx_setting_closest("OUTBOX_DATABASE_URI")->env, "OUTBOX_DATABASE_URL");
    cr_assert_str_eq(obx_setting_closest("OUTBOX_NATS_TLS_CAFILE")->env, "OUTBOX_NATS_TLS_CA");
    cr_assert_str_eq(obx_setting_closest("OUTBOX_LEASE_SECOND")->env, "OUTBOX_LEASE_SECONDS");
    cr_assert_null(obx_setting_closest("OUTBOX_FOO"));
    cr_assert_null(obx_setting_closest("OUTBOX_SOMETHING_ELSE_ENTIRELY"));
}

Test(config_warn, an_unknown_variable_is_named_with_its_close_match)
{
    char *envp[] = {"PATH=/bin",   "OUTBOX_BATCHSIZE=500",       "OUTBOX_BATCH_SIZE=10",
                    "OUTBOX_FOO=", "OUTBOX_TEST_DATABASE_URL=x", NULL};

    cr_assert_eq(warn(&relay, 0, NULL, envp), 2);
    cr_assert_not_null(strstr(lines[0], "\"OUTBOX_BATCHSIZE\""), "%s", lines[0]);
    cr_assert_not_null(strstr(lines[0], "did you mean OUTBOX_BATCH_SIZE?"), "%s", lines[0]);
    cr_assert_not_null(strstr(lines[1], "\"OUTBOX_FOO\""), "%s", lines[1]);
    cr_assert_null(strstr(lines[1], "did you mean"), "%s", lines[1]);
}

Test(config_warn, a_setting_of_another_part_is_ignored_by_the_command)
{
    char *envp[] = {"OUTBOX_LEDGER_LEASE_SECONDS=60", "OUTBOX_HANDLER_1=a=sql:SELECT 1",
                    "OUTBOX_LEASE_SECONDS=5", NULL};
    char *argv[] = {"relay", "--ledger-lease-seconds", "9", "--batch-size=5", NULL};
    const struct obx_config_use consume = {.command = "outboxd consume",
                                           .parts = OBX_FOR_CONSUMER | OBX_FOR_PROGRAM,
                                           .unread =
                                               (const char *const[]){"OUTBOX_FLEET_FILE", NULL},
                                           .handlers = 1};
    char *fleet_env[] = {"OUTBOX_FLEET_FILE=/etc/fleet", "OUTBOX_HANDLER_1=x", NULL};

    cr_assert_eq(warn(&relay, 4, argv, envp), 3);
    cr_assert_not_null(
        strstr(lines[0], "OUTBOX_LEDGER_LEASE_SECONDS\" is ignored by outboxd relay"), "%s",
        lines[0]);
    cr_assert_not_null(strstr(lines[1], "OUTBOX_HANDLER_1\" is ignored by outboxd relay"), "%s",
                       lines[1]);
    cr_assert_not_null(strstr(lines[2], "--ledger-lease-seconds is ignored by outboxd relay"), "%s",
                       lines[2]);
    cr_assert_eq(warn(&consume, 0, NULL, fleet_env), 1);
    cr_assert_not_null(strstr(lines[0], "OUTBOX_FLEET_FILE\" is ignored by outboxd consume"), "%s",
                       lines[0]);
}

Test(config_warn, a_name_cannot_break_the_line)
{
    char *envp[] = {"OUTBOX_X\nlevel=error forged=1", NULL};

    cr_assert_eq(warn(&relay, 0, NULL, envp), 1);
    cr_assert_null(strchr(lines[0], '\n'), "%s", lines[0]);
}
