/* SPDX-License-Identifier: MIT */
/*
 * test_handler_spec.c - declared handlers: NAME[@FILTER]=sql:... / exec:...
 */
#include <criterion/criterion.h>
#include <string.h>

#include "handlers/http_handler.h"
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

Test(handler_spec, parses_exec_options_in_brackets_before_the_colon)
{
    struct obx_handler_spec s;
    outbox_error err = {0};

    cr_assert_eq(
        obx_handler_spec_parse("mailer=exec[in_flight=4,timeout=30]:[ -e x ] || exit 75", &s, &err),
        OUTBOX_OK, "%s", err.message);
    cr_assert_eq(s.kind, OBX_SPEC_EXEC);
    cr_assert_eq(s.in_flight, 4);
    cr_assert_eq(s.timeout_seconds, 30);
    cr_assert_str_eq(s.body, "[ -e x ] || exit 75", "a bracket in the command is kept");
    obx_handler_spec_fini(&s);
    cr_assert_eq(obx_handler_spec_parse("mailer=exec:[ -e x ]", &s, &err), OUTBOX_OK);
    cr_assert_eq(s.in_flight, OBX_SPEC_DEFAULT_IN_FLIGHT, "the default in-flight limit");
    cr_assert_eq(s.timeout_seconds, 0, "no timeout option: the setting's");
    cr_assert_str_eq(s.body, "[ -e x ]");
    obx_handler_spec_fini(&s);
}

Test(handler_spec, parses_an_http_handler_and_its_options)
{
    struct obx_handler_spec s;
    outbox_error err = {0};

    cr_assert_eq(obx_handler_spec_parse(
                     "hook@events.>=http[in_flight=16,timeout=5,token_file=/run/t,ca_file=/etc/"
                     "ca.pem,header=X-Tenant: eu,header=X-B:1,mode=structured]:https://h.example/e",
                     &s, &err),
                 OUTBOX_OK, "%s", err.message);
    cr_assert_eq(s.kind, OBX_SPEC_HTTP);
    cr_assert_str_eq(s.filter, "events.>");
    cr_assert_str_eq(s.body, "https://h.example/e");
    cr_assert_eq(s.in_flight, 16);
    cr_assert_eq(s.timeout_seconds, 5);
    cr_assert_str_eq(s.token_file, "/run/t");
    cr_assert_str_eq(s.ca_file, "/etc/ca.pem");
    cr_assert_eq(s.header_count, 2);
    cr_assert_str_eq(s.headers[0], "X-Tenant: eu");
    cr_assert_str_eq(s.headers[1], "X-B:1");
    cr_assert_eq(s.structured, 1);
    obx_handler_spec_fini(&s);
    cr_assert_eq(obx_handler_spec_parse("hook=http:http://h.example/e", &s, &err), OUTBOX_OK);
    cr_assert_eq(s.in_flight, OBX_HTTP_DEFAULT_IN_FLIGHT, "http's own default in-flight limit");
    cr_assert_eq(OBX_HTTP_DEFAULT_IN_FLIGHT, 64);
    obx_handler_spec_fini(&s);
}

Test(handler_spec, refuses_bad_options_naming_the_option_and_value)
{
    const struct {
        const char *spec, *reason;
    } bad[] = {
        {"h=sql[in_flight=2]:SELECT 1", "sql: takes no options"},
        {"h=exec[in_flight=300]:true", "in_flight=\"300\" must be a number from 1 to 256"},
        {"h=exec[in_flight=x]:true", "in_flight=\"x\""},
        {"h=exec[timeout=0]:true", "timeout=\"0\""},
        {"h=exec[mode=structured]:true", "unknown option \"mode\" for exec"},
        {"h=exec[in_flight=2:true", "options must be [KEY=VALUE,...] followed by ':'"},
        {"h=exec[in_flight]:true", "option \"in_flight\" is not KEY=VALUE"},
        {"h=http:", "the URL is empty"},
        {"h=http:file:///etc/passwd", "must be http://HOST"},
        {"h=http:http://a b", "without blanks"},
        {"h=http[header=Bad Name: x]:http://h/", "header=\"Bad Name: x\""},
        {"h=http[header=NoColon]:http://h/", "header=\"NoColon\""},
        {"h=http[ca_file=/c]:http://h/", "ca_file needs an https:// URL"},
        {"h=http[mode=batch]:http://h/", "mode=\"batch\" must be binary or structured"},
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
