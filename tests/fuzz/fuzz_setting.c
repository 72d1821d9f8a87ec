/* SPDX-License-Identifier: MIT */
/*
 * fuzz_setting.c - every setting's value, as the environment, a flag, a
 * fleet file or outbox_config_set() may give it.
 *
 * Input: the first byte picks the row of the settings table, the rest is
 * the value. Beyond memory safety: a value taken reads back
 * (obx_config_text) as a value the same setting takes again, unchanged;
 * and the verdict and the message are the same with the value's passwords
 * blanked, so an error never shows one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/settings.h"
#include "fuzz.h"

/* Sets `key` to `value` in a fresh configuration; its text into `text` when taken. */
static outbox_status
set_fresh(const char *key, const char *value, char *text, size_t cap, outbox_error *err)
{
    struct obx_config cfg;
    outbox_status st;

    obx_fuzz_require(obx_config_init(&cfg, OBX_FOR_ALL, err) == OUTBOX_OK,
                     "the default configuration");
    st = obx_config_set_key(&cfg, key, value, err);
    if (st == OUTBOX_OK) {
        obx_config_text(&cfg, obx_setting_by_key(key), text, cap);
    }
    obx_config_fini(&cfg);
    return st;
}

int
obx_fuzz_setting(const uint8_t *data, size_t size)
{
    const struct obx_setting *s;
    outbox_error err = {0}, err2 = {0};
    char key[128], *value, *blanked, first[4096], again[4096];
    outbox_status st;

    if (size == 0) {
        return 0;
    }
    s = &obx_settings[data[0] % obx_settings_count];
    obx_setting_key(s, key, sizeof(key));
    value = obx_fuzz_cstr(data + 1, size - 1);
    blanked = obx_fuzz_cstr(data + 1, size - 1);
    st = set_fresh(key, value, first, sizeof(first), &err);
    if (st == OUTBOX_OK && strlen(first) + 1 < sizeof(first)) {
        obx_fuzz_require(set_fresh(key, first, again, sizeof(again), &err2) == OUTBOX_OK,
                         "a setting's value, read back, is refused");
        obx_fuzz_require(strcmp(first, again) == 0, "a setting's value changes when set again");
    } else if (st != OUTBOX_OK) {
        obx_fuzz_require(err.message[0] != '\0', "a refused value has no reason");
    }
    if (obx_fuzz_blank_passwords(blanked, strlen(blanked)) > 0) {
        outbox_error err3 = {0};

        obx_fuzz_require(set_fresh(key, blanked, again, sizeof(again), &err3) == st &&
                             strcmp(err.message, err3.message) == 0,
                         "a password in a setting's value changes its verdict or its message");
    }
    free(value);
    free(blanked);
    return 0;
}
