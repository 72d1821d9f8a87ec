/* SPDX-License-Identifier: MIT */
/*
 * fuzz_url_list.c - OUTBOX_NATS_URL: a comma-separated list of server URLs.
 *
 * Beyond memory safety: the setting's check agrees with the parse, every
 * entry taken is one non-empty URL, and the verdict and the message never
 * depend on an entry's user information (user:password@ or token@): the
 * same list with those bytes overwritten must get exactly the same answer,
 * so no part of a secret can reach the error.
 */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/url_list.h"
#include "fuzz.h"

/* Overwrites the user information of every entry of `list` with 'x', in place. */
static void
blank_user_info(char *list)
{
    for (char *entry = list; entry != NULL;) {
        char *comma = strchr(entry, ',');
        size_t len = comma != NULL ? (size_t)(comma - entry) : strlen(entry);
        char *scheme_end, *host = entry, *at = NULL;

        while (len > 0 && strchr(" \t\n\v\f\r", *host) != NULL) {
            host++, len--;
        }
        scheme_end = memmem(host, len, "://", 3);
        if (scheme_end != NULL) {
            len -= (size_t)(scheme_end + 3 - host);
            host = scheme_end + 3;
        }
        for (size_t i = 0; i < len; i++) {
            if (host[i] == '@') {
                at = host + i;
            }
        }
        for (char *p = host; at != NULL && p < at; p++) {
            *p = 'x';
        }
        entry = comma != NULL ? comma + 1 : NULL;
    }
}

int
obx_fuzz_url_list(const uint8_t *data, size_t size)
{
    char *text = obx_fuzz_cstr(data, size), *blanked = obx_fuzz_cstr(data, size);
    struct obx_url_list list = {0}, other = {0};
    outbox_error err = {0}, check = {0}, err2 = {0};
    outbox_status st = obx_url_list_parse("nats_url", text, &list, &err), st2;

    obx_fuzz_require((obx_nats_url_check(text, &check) == OUTBOX_OK) == (st == OUTBOX_OK),
                     "the setting's check and the parse disagree");
    blank_user_info(blanked);
    st2 = obx_url_list_parse("nats_url", blanked, &other, &err2);
    obx_fuzz_require(st == st2 && strcmp(err.message, err2.message) == 0,
                     "a list's user information (a password) changes the verdict or the message");
    if (st == OUTBOX_OK) {
        obx_fuzz_require(list.count >= 1 && list.count <= OBX_URL_LIST_MAX,
                         "a parsed list has no entry or too many");
        for (size_t i = 0; i < list.count; i++) {
            obx_fuzz_require(list.urls[i][0] != '\0' && strchr(list.urls[i], ',') == NULL,
                             "a parsed entry is empty or holds a comma");
        }
    } else {
        obx_fuzz_require(err.message[0] != '\0', "a refused list has no reason");
    }
    obx_url_list_free(&list);
    obx_url_list_free(&other);
    free(text);
    free(blanked);
    return 0;
}
