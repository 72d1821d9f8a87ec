/* SPDX-License-Identifier: MIT */
/*
 * test_secret.c - secrets masked in every form they reach a message in:
 * URL passwords and tokens, libpq key=value and URL-query passwords, .creds
 * contents; libpq's own messages about a bad conninfo; values quoted for
 * an error with their control characters escaped.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "common/secret.h"

static void
masks_to(const char *text, const char *want)
{
    char out[512];

    obx_mask_secrets(text, out, sizeof(out));
    cr_assert_str_eq(out, want, "masking %s", text);
}

Test(secret, masks_url_passwords_and_tokens)
{
    masks_to("postgres://app:SECRET@db.example:5432/orders",
             "postgres://app:***@db.example:5432/orders");
    masks_to("postgresql://app@db/orders", "postgresql://app@db/orders");
    masks_to("nats://TOKEN@n1:4222,nats://u:pw@n2:4222", "nats://***@n1:4222,nats://u:***@n2:4222");
    masks_to("tls://u:p@ss@h:4222", "tls://u:***@h:4222");
    masks_to("nats://127.0.0.1:4222", "nats://127.0.0.1:4222");
    masks_to("connecting to nats at nats://tok@h failed",
             "connecting to nats at nats://***@h failed");
}

Test(secret, masks_conninfo_and_query_passwords)
{
    masks_to("host=db password=SECRET dbname=orders", "host=db password=*** dbname=orders");
    masks_to("host=db password = 'se cr\\'et' dbname=x", "host=db password=*** dbname=x");
    masks_to("PASSWORD=x", "PASSWORD=***");
    masks_to("postgres://db/x?sslmode=require&password=SECRET&application_name=a",
             "postgres://db/x?sslmode=require&password=***&application_name=a");
    masks_to("sslpassword=k1 token=t2", "sslpassword=*** token=***");
    masks_to("mypassword=notakey", "mypassword=notakey");
    masks_to("orders host=db password=SECRET", "orders host=db password=***");
}

Test(secret, masks_creds_file_contents)
{
    masks_to("seed SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4 end", "seed *** end");
    masks_to("jwt eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5In0.eyJqdGkiOiJ4In0.c2ln here",
             "jwt *** here");
    masks_to("SUBJECT orders.created", "SUBJECT orders.created");
}

Test(secret, cuts_at_the_buffer_and_terminates)
{
    char out[8];

    obx_mask_secrets("postgres://u:SECRET@host", out, sizeof(out));
    cr_assert_eq(strlen(out), 7);
    cr_assert_null(strstr(out, "SECRET"));
}

Test(secret, hides_what_a_libpq_message_quotes_of_a_secret)
{
    char out[256];

    /* libpq: missing "=" after "hunter2" in connection info string */
    obx_mask_echo("missing \"=\" after \"hunter2\" in connection info string",
                  "host=db password=hunter2 x", out, sizeof(out));
    cr_assert_str_eq(out, "missing \"=\" after \"***\" in connection info string");
    obx_mask_echo("invalid integer value \"abc\" for connection option \"port\"", "port=abc", out,
                  sizeof(out));
    cr_assert_str_eq(out, "invalid integer value \"abc\" for connection option \"port\"");
}

Test(secret, keeps_a_message_on_one_line)
{
    char out[256];

    obx_mask_echo("bad \"a\nlevel=error forged\"", "a\nlevel=error forged", out, sizeof(out));
    cr_assert_null(strchr(out, '\n'));
    cr_assert_not_null(strstr(out, "a\\nlevel=error"));
    obx_mask_quote("pg\r\nsrc", out, sizeof(out));
    cr_assert_str_eq(out, "\"pg\\r\\nsrc\"");
    obx_mask_quote("postgres://u:SECRET@h/db", out, sizeof(out));
    cr_assert_str_eq(out, "\"postgres://u:***@h/db\"");
}

Test(secret, hides_a_whole_value_whose_password_has_no_key_value_form)
{
    char out[256];

    /* libpq cannot parse it, so nothing says where the password ends. */
    obx_mask_quote("host=db password s3cret", out, sizeof(out));
    cr_assert_str_eq(out, "\"***\"");
    obx_mask_quote("host=db password=s3cret", out, sizeof(out));
    cr_assert_str_eq(out, "\"host=db password=***\"");
    obx_mask_quote("/etc/nats/token.creds", out, sizeof(out));
    cr_assert_str_eq(out, "\"/etc/nats/token.creds\"");
}
