/* SPDX-License-Identifier: MIT */
/*
 * test_handler_spec.c - declared handlers: NAME[@FILTER]=sql:... / exec:...
 */
#include <criterion/criterion.h>
#include <string.h>

#include "outboxd/handler_spec.h"

Test(handler_spec, parses_a_sql_handler_with_a_filter)
{
    struct obx_handler_spec s;
    outbox_error err;

    cr_assert_eq(
        obx_handler_spec_parse("stats@events.movie.>=sql:INSERT INTO t VALUES ($1)", &s, &err),
        OUTBOX_OK, "%s", err.message);
    cr_assert_str_eq(s.name, "stats");
    cr_assert_str_eq(s.filter, "events.movie.>");
    cr_assert_eq(s.kind, OBX_SPEC_SQL);
    cr_assert_str_eq(s.body, "INSERT INTO t VALUES ($1)");
    obx_handler_spec_fini(&s);
}

Test(handler_spec, parses_an_exec_handler_without_a_filter)
{
    struct obx_handler_spec s;

    cr_assert_eq(
        obx_handler_spec_parse("mailer.v2=exec:/usr/local/bin/send-mail --to=a@b", &s, NULL),
        OUTBOX_OK);
    cr_assert_str_eq(s.name, "mailer.v2");
    cr_assert_null(s.filter);
    cr_assert_eq(s.kind, OBX_SPEC_EXEC);
    cr_assert_str_eq(s.body, "/usr/local/bin/send-mail --to=a@b", "an '=' in the body is kept");
    obx_handler_spec_fini(&s);
}

Test(handler_spec, refuses_malformed_specs_naming_the_problem)
{
    const struct {
        const char *spec, *reason;
    } bad[] = {
        {"stats", "expected NAME[@SUBJECT_FILTER]=sql:"},
        {"=sql:SELECT 1", "name must be 1 to 64"},
        {"st ats=sql:SELECT 1", "name must be made of"},
        {"stats=select 1", "must start with sql: or exec:"},
        {"stats=sql:   ", "the statement is empty"},
        {"stats=exec:", "the command is empty"},
        {"stats@events..x=sql:SELECT 1", "subject filter \"events..x\""},
        {"stats@=sql:SELECT 1", "subject filter \"\""},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct obx_handler_spec s;
        outbox_error err = {0};

        cr_assert_eq(obx_handler_spec_parse(bad[i].spec, &s, &err), OUTBOX_EINVAL, "accepted %s",
                     bad[i].spec);
        cr_assert(strstr(err.message, bad[i].reason) != NULL, "%s: \"%s\" lacks \"%s\"",
                  bad[i].spec, err.message, bad[i].reason);
    }
}
