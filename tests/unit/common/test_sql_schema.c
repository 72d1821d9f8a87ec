/* SPDX-License-Identifier: MIT */
/*
 * test_sql_schema.c - schema names are checked before they are quoted, so
 * a hostile OUTBOX_SCHEMA never reaches SQL.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/sql.h"

Test(sql_schema, accepts_plain_lower_case_names)
{
    char quoted[OBX_SCHEMA_QUOTED_CAP];

    cr_assert_eq(obx_sql_quote_schema("outbox", quoted, NULL), OUTBOX_OK);
    cr_assert_str_eq(quoted, "\"outbox\".");
    cr_assert_eq(obx_sql_quote_schema("_billing_2", quoted, NULL), OUTBOX_OK);
}

Test(sql_schema, refuses_hostile_and_odd_names)
{
    const char *bad[] = {
        "",
        "x\"; DROP TABLE outbox.events; --",
        "web\".session WHERE $1=$1;--",
        "Outbox",
        "out box",
        "1outbox",
        "outbox.events",
        "pg_catalog",
        "a234567890123456789012345678901234567890123456789012345678901234",
        "ünïcode",
    };
    char quoted[OBX_SCHEMA_QUOTED_CAP] = "untouched";
    outbox_error err;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&err, 0, sizeof(err));
        cr_assert_eq(obx_sql_quote_schema(bad[i], quoted, &err), OUTBOX_EINVAL, "accepted %s",
                     bad[i]);
        cr_assert_str_eq(quoted, "untouched", "wrote output for a refused name");
        cr_assert(strstr(err.message, "schema") == err.message, "%s", err.message);
    }
    cr_assert_eq(outbox_schema_name_check(NULL, NULL), OUTBOX_EINVAL);
}

Test(sql_schema, renders_every_marker_and_nothing_else)
{
    char *sql = obx_sql_render("SELECT * FROM /*schema*/events JOIN /*schema*/dead_letters "
                               "/* other comment */",
                               "\"o\".");

    cr_assert_str_eq(sql, "SELECT * FROM \"o\".events JOIN \"o\".dead_letters /* other comment */");
    free(sql);
}
