/* SPDX-License-Identifier: MIT */
/*
 * test_fleet_file.c - reading the fleet file: comments and blank lines,
 * defaults from the replica's settings, and every refusal naming the
 * file, the line, the field and the value, never a URL.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "fleet/fleet.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static struct obx_config base;
static char path[64];

static void
setup(void)
{
    cr_assert_eq(obx_config_init(&base, OBX_FOR_ALL, NULL), OUTBOX_OK);
    snprintf(path, sizeof(path), "/tmp/obx-fleet-unit-%d.conf", (int)getpid());
}

static void
teardown(void)
{
    obx_config_fini(&base);
    unlink(path);
}

TestSuite(fleet_file, .init = setup, .fini = teardown);

static void
write_file(const char *text)
{
    FILE *f = fopen(path, "w");

    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* Loads `text`; returns the status and leaves the message in `err`. */
static outbox_status
load(const char *text, struct obx_fleet_list *list, outbox_error *err)
{
    write_file(text);
    return obx_fleet_file_load(path, &base, list, err);
}

static void
assert_refused(const char *text, const char *const *needles)
{
    struct obx_fleet_list list;
    outbox_error err = {0};

    cr_assert_eq(load(text, &list, &err), OUTBOX_EINVAL, "accepted:\n%s", text);
    cr_assert(strstr(err.message, path) != NULL, "no file in: %s", err.message);
    for (const char *const *n = needles; *n != NULL; n++) {
        cr_assert(strstr(err.message, *n) != NULL, "\"%s\" missing from: %s", *n, err.message);
    }
    cr_assert(strstr(err.message, "s3cret") == NULL, "a URL was quoted: %s", err.message);
    cr_assert_eq(list.count, 0);
}

Test(fleet_file, reads_lines_skips_comments_and_takes_defaults_from_the_settings)
{
    struct obx_fleet_list list;
    outbox_error err = {0};

    cr_assert_eq(obx_config_set_key(&base, "stream", "BASE", &err), OUTBOX_OK);
    cr_assert_eq(load("# a fleet\n\n   \n"
                      "orders postgresql://u:s3cret@h/orders schema=shop stream=ORDERS "
                      "subject_prefix=orders.v1  # trailing comment\n"
                      "\tbilling\tpostgresql://h/billing\r\n"
                      "catalog postgresql://h/catalog schema=cat\n",
                      &list, &err),
                 OUTBOX_OK, "%s", err.message);
    cr_assert_eq(list.count, 3);
    cr_assert_str_eq(list.items[0].name, "orders");
    cr_assert_str_eq(list.items[0].database_url, "postgresql://u:s3cret@h/orders");
    cr_assert_str_eq(list.items[0].schema, "shop");
    cr_assert_str_eq(list.items[0].stream, "ORDERS");
    cr_assert_str_eq(list.items[0].subject_prefix, "orders.v1");
    cr_assert_eq(list.items[0].line, 4);
    cr_assert_str_eq(list.items[1].name, "billing");
    cr_assert_str_eq(list.items[1].schema, "outbox");
    cr_assert_str_eq(list.items[1].stream, "BASE");
    cr_assert_str_eq(list.items[1].subject_prefix, "events");
    cr_assert_str_eq(list.items[2].schema, "cat");
    cr_assert_str_eq(list.items[2].stream, "BASE"); /* shares the stream and the prefix */
    obx_fleet_list_fini(&list);
}

Test(fleet_file, refuses_a_bad_line_naming_line_field_and_value)
{
    assert_refused("ok postgresql://h/a\nbad postgresql://u:s3cret@h/b strem=X\n",
                   (const char *const[]){"line 2", "strem", "\"X\"", NULL});
    assert_refused("a postgresql://u:s3cret@h/a schema=Bad-Name\n",
                   (const char *const[]){"line 1", "field schema", "Bad-Name", NULL});
    assert_refused("a postgresql://h/a stream=has.dot\n",
                   (const char *const[]){"line 1", "field stream", "has.dot", NULL});
    assert_refused("a postgresql://h/a subject_prefix=no..tokens\n",
                   (const char *const[]){"line 1", "field subject_prefix", "no..tokens", NULL});
    assert_refused("a postgresql://h/a schema\n",
                   (const char *const[]){"line 1", "\"schema\"", "field=value", NULL});
    assert_refused("bad/name postgresql://h/a\n",
                   (const char *const[]){"line 1", "field name", "bad/name", NULL});
    assert_refused("\n\nlonely\n", (const char *const[]){"line 3", "database_url", NULL});
    assert_refused("host=h port=5432 dbname=a\n",
                   (const char *const[]){"line 1", "field name", NULL});
    assert_refused("a host=h dbname=a\n",
                   (const char *const[]){"line 1", "dbname", "postgresql:// URL", NULL});
}

Test(fleet_file, refuses_a_repeated_name_and_one_stream_with_two_prefixes)
{
    assert_refused("a postgresql://h/a\nb postgresql://h/b\na postgresql://u:s3cret@h/c\n",
                   (const char *const[]){"line 3", "field name", "\"a\"", "line 1", NULL});
    assert_refused("a postgresql://h/a stream=S subject_prefix=one\n"
                   "b postgresql://h/b stream=S subject_prefix=two\n",
                   (const char *const[]){"line 2", "subject_prefix", "\"two\"", "one", NULL});
}

Test(fleet_file, refuses_an_empty_or_missing_file)
{
    struct obx_fleet_list list;
    outbox_error err = {0};

    cr_assert_eq(load("# nothing here\n", &list, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "no database") != NULL, "%s", err.message);
    unlink(path);
    cr_assert_eq(obx_fleet_file_load(path, &base, &list, &err), OUTBOX_EUNAVAILABLE);
    cr_assert(strstr(err.message, path) != NULL, "%s", err.message);
}

Test(fleet_file, never_prints_a_password_it_refuses)
{
    /* key=value words after a key=value DATABASE_URL: the password reaches the field check. */
    assert_refused("orders host=db password=s3cret dbname=orders\n",
                   (const char *const[]){"line 1", "unknown field \"password\"", "\"***\"",
                                         "postgresql:// URL", NULL});
    /* A URL written where the name goes. */
    assert_refused("postgresql://u:s3cret@h/a schema=x\n",
                   (const char *const[]){"line 1", "field name", "u:***@h", NULL});
    assert_refused("a b c=postgresql://u:s3cret@h/x\n", (const char *const[]){"line 1", NULL});
}

Test(fleet_file, refuses_a_database_url_libpq_would_refuse_when_connecting)
{
    assert_refused(
        "a postgresql://u:s3cret@h:abc/a\n",
        (const char *const[]){"line 1", "field database_url", "u:***@h:abc", "port \"abc\"", NULL});
    assert_refused("a port=abc\n",
                   (const char *const[]){"line 1", "field database_url", "port \"abc\"", NULL});
    assert_refused("a postgresql://h/a?sslmode=always\n",
                   (const char *const[]){"line 1", "database_url", "sslmode", NULL});
}
