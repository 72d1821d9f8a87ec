/* SPDX-License-Identifier: MIT */
/*
 * test_config_files.c - secrets read from files and credentials that
 * exclude each other: OUTBOX_DATABASE_URL_FILE's first line becomes the
 * database URL (checked as the variable is, never echoed), and settings
 * that cannot go together are refused naming both.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/config_files.h"
#include "config/settings.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define SECRET "pw-Fq9k-file-only"

static char path[] = "/tmp/obx-config-files-XXXXXX";
static struct obx_config cfg;

static void
setup(void)
{
    int fd = mkstemp(path);

    cr_assert(fd >= 0);
    close(fd);
    cr_assert_eq(obx_config_init(&cfg, OBX_FOR_ALL, NULL), OUTBOX_OK);
}

static void
teardown(void)
{
    obx_config_fini(&cfg);
    unlink(path);
}

TestSuite(config_files, .init = setup, .fini = teardown);

static void
write_file(const char *text)
{
    FILE *f = fopen(path, "w");

    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void
set(const char *key, const char *value)
{
    outbox_error err = {0};

    cr_assert_eq(obx_config_set_key(&cfg, key, value, &err), OUTBOX_OK, "%s", err.message);
}

/* obx_config_resolve_files() with a fresh error (the first error wins in one). */
static outbox_status
resolve(outbox_error *err)
{
    *err = (outbox_error){0};
    return obx_config_resolve_files(&cfg, err);
}

Test(config_files, the_database_url_comes_from_the_files_first_line)
{
    outbox_error err = {0};

    write_file("postgresql://app:" SECRET "@db:5432/app?sslmode=verify-full\nignored\n");
    set("database_url_file", path);
    cr_assert_eq(resolve(&err), OUTBOX_OK, "%s", err.message);
    cr_assert_str_eq(cfg.database_url,
                     "postgresql://app:" SECRET "@db:5432/app?sslmode=verify-full");
}

Test(config_files, a_bad_url_in_the_file_is_refused_without_its_password)
{
    outbox_error err = {0};

    write_file("postgresql://app:" SECRET "@db:5432/app?sslmode=verify-fullest\n");
    set("database_url_file", path);
    cr_assert_eq(resolve(&err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "OUTBOX_DATABASE_URL_FILE") != NULL &&
                  strstr(err.message, "sslmode") != NULL,
              "%s", err.message);
    cr_assert(strstr(err.message, SECRET) == NULL, "%s", err.message);
}

Test(config_files, an_empty_file_or_both_url_settings_are_refused)
{
    outbox_error err = {0};

    write_file("\n");
    set("database_url_file", path);
    cr_assert_eq(resolve(&err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "is empty") != NULL, "%s", err.message);
    write_file("postgresql://db/app\n");
    set("database_url", "postgresql://db/other");
    cr_assert_eq(resolve(&err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "OUTBOX_DATABASE_URL and OUTBOX_DATABASE_URL_FILE") != NULL, "%s",
              err.message);
}

Test(config_files, credentials_that_exclude_each_other_are_refused_naming_both)
{
    outbox_error err = {0};

    set("nats_user", "relay");
    cr_assert_eq(resolve(&err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "OUTBOX_NATS_PASSWORD_FILE is not set") != NULL, "%s",
              err.message);
    set("nats_password_file", path);
    cr_assert_eq(resolve(&err), OUTBOX_OK, "%s", err.message);
    set("nats_token_file", path);
    cr_assert_eq(resolve(&err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "OUTBOX_NATS_USER and OUTBOX_NATS_TOKEN_FILE") != NULL, "%s",
              err.message);
    set("nats_token_file", NULL);
    set("nats_creds", path);
    set("nats_nkey_seed", path);
    cr_assert_eq(resolve(&err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "OUTBOX_NATS_CREDS and OUTBOX_NATS_NKEY_SEED") != NULL, "%s",
              err.message);
}
