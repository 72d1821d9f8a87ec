/* SPDX-License-Identifier: MIT */
/*
 * test_url_list.c - NATS URL lists: a cluster's URLs split and trimmed, a
 * bad entry refused with the field's name and the entry (its password
 * left out), and the settings table refusing the same at start.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "common/url_list.h"
#include "outbox/outbox.h"

Test(url_list, splits_a_cluster_list_and_trims_each_entry)
{
    struct obx_url_list l;
    outbox_error err = {0};

    cr_assert_eq(obx_url_list_parse("nats_url",
                                    "nats://127.0.0.1:4222, nats://u:p@b.example:4223 ,tls://c", &l,
                                    &err),
                 OUTBOX_OK, "%s", err.message);
    cr_assert_eq(l.count, 3);
    cr_assert_str_eq(l.urls[0], "nats://127.0.0.1:4222");
    cr_assert_str_eq(l.urls[1], "nats://u:p@b.example:4223");
    cr_assert_str_eq(l.urls[2], "tls://c");
    obx_url_list_free(&l);
}

Test(url_list, takes_one_url_hosts_without_scheme_and_ipv6)
{
    const char *good[] = {"nats://127.0.0.1:4222", "localhost:4222", "localhost",
                          "nats://[::1]:4222", "nats://h:4222/"};

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct obx_url_list l;
        outbox_error err = {0};

        cr_assert_eq(obx_url_list_parse("nats_url", good[i], &l, &err), OUTBOX_OK, "%s: %s",
                     good[i], err.message);
        cr_assert_eq(l.count, 1);
        obx_url_list_free(&l);
    }
}

struct bad_case {
    const char *list;
    const char *says; /* a part of the message */
};

Test(url_list, refuses_bad_entries_naming_the_field_and_the_entry)
{
    const struct bad_case bad[] = {
        {"", "nats_url must not be empty"},
        {"nats://a:4222,,nats://b:4222", "empty entry"},
        {"nats://a:4222,", "empty entry"},
        {"http://a:4222", "\"http://a:4222\" has a scheme other than"},
        {"nats://a:0", "\"nats://a:0\" has a port that is not 1..65535"},
        {"nats://a:70000", "port that is not"},
        {"nats://a:42x", "port that is not"},
        {"nats://:4222", "\"nats://:4222\" has no host"},
        {"nats://a:4222/path", "has a path"},
        {"nats://a b:4222", "bad host"},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct obx_url_list l;
        outbox_error err = {0};

        cr_assert_eq(obx_url_list_parse("nats_url", bad[i].list, &l, &err), OUTBOX_EINVAL, "%s",
                     bad[i].list);
        cr_assert(strstr(err.message, "nats_url") != NULL, "%s: %s", bad[i].list, err.message);
        cr_assert(strstr(err.message, bad[i].says) != NULL, "%s: %s", bad[i].list, err.message);
    }
}

Test(url_list, leaves_the_password_out_of_the_error)
{
    struct obx_url_list l;
    outbox_error err = {0}, at_err = {0};

    cr_assert_eq(
        obx_url_list_parse("nats_url", "nats://a:4222,nats://relay:s3cret@b:99999", &l, &err),
        OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "s3cret") == NULL, "%s", err.message);
    cr_assert(strstr(err.message, "nats://***@b:99999") != NULL, "%s", err.message);
    /* A password holding an '@': the host starts after the last one. */
    cr_assert_eq(obx_url_list_parse("nats_url", "nats://relay:pa@ss3cret@b:0", &l, &at_err),
                 OUTBOX_EINVAL);
    cr_assert(strstr(at_err.message, "s3cret") == NULL, "%s", at_err.message);
    cr_assert(strstr(at_err.message, "nats://***@b:0") != NULL, "%s", at_err.message);
}

Test(url_list, refuses_more_than_the_maximum)
{
    char list[2048] = "";
    size_t used = 0;
    struct obx_url_list l;
    outbox_error err = {0};

    for (int i = 0; i <= OBX_URL_LIST_MAX; i++) {
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%snats://h:1", i ? "," : "");
    }
    cr_assert_eq(obx_url_list_parse("nats_url", list, &l, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "more than") != NULL, "%s", err.message);
}

Test(url_list, the_configuration_refuses_a_bad_nats_url_by_name)
{
    outbox_config *cfg = outbox_config_new(OUTBOX_CONFIG_RELAY);
    outbox_error err = {0};

    cr_assert_not_null(cfg);
    cr_assert_eq(outbox_config_set(cfg, "nats_url", "nats://127.0.0.1:4222,nats://x:0", &err),
                 OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "nats_url: \"nats://x:0\"") != NULL, "%s", err.message);
    cr_assert_eq(
        outbox_config_set(cfg, "nats_url", "nats://127.0.0.1:4222,nats://127.0.0.1:4223", &err),
        OUTBOX_OK, "%s", err.message);
    outbox_config_free(cfg);
}
