/* SPDX-License-Identifier: MIT */
/*
 * fuzz_secret_file.c - a mounted secret: OUTBOX_DATABASE_URL_FILE's first
 * line becomes the database URL, checked as the variable would be.
 *
 * Input: the first byte sizes the buffer obx_secret_file_read() fills; the
 * rest is the file's content, read both ways. The verdict and the message
 * are the same with the file's passwords blanked: an error never shows one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config/config_files.h"
#include "fuzz.h"

/* OUTBOX_DATABASE_URL_FILE naming a file of `data`, resolved as at start. */
static outbox_status
resolve(const uint8_t *data, size_t size, outbox_error *err)
{
    struct obx_config cfg;
    char path[64];
    int fd = obx_fuzz_memfile(data, size, path, sizeof(path));
    outbox_status st;

    obx_fuzz_require(obx_config_init(&cfg, OBX_FOR_RELAY, err) == OUTBOX_OK,
                     "the default relay configuration");
    obx_fuzz_require(obx_config_set_key(&cfg, "database_url_file", path, err) == OUTBOX_OK,
                     "a memfd path is not a readable file");
    st = obx_config_resolve_files(&cfg, err);
    obx_fuzz_require(st != OUTBOX_OK || cfg.database_url != NULL,
                     "a resolved secret file gave no database_url");
    obx_config_fini(&cfg);
    close(fd); /* the next memfd gets the same number: the same path in messages */
    return st;
}

int
obx_fuzz_secret_file(const uint8_t *data, size_t size)
{
    outbox_error read_err = {0}, err = {0};
    char path[64], out[256], *blanked;
    outbox_status st;
    size_t cap;
    int fd;

    if (size == 0) {
        return 0;
    }
    blanked = obx_fuzz_cstr(data + 1, size - 1);
    cap = 1 + data[0] % sizeof(out);
    fd = obx_fuzz_memfile(data + 1, size - 1, path, sizeof(path));
    memset(out, 'x', sizeof(out));
    if (obx_secret_file_read("database_url_file", path, out, cap, &read_err) == OUTBOX_OK) {
        obx_fuzz_require(memchr(out, '\0', cap) != NULL, "a secret overran its buffer");
        obx_fuzz_require(strchr(out, '\n') == NULL, "a secret kept its line break");
    }
    close(fd);
    st = resolve(data + 1, size - 1, &err);
    obx_fuzz_require(st == OUTBOX_OK || err.message[0] != '\0',
                     "a refused secret file has no reason");
    if (obx_fuzz_blank_passwords(blanked, size - 1) > 0) {
        outbox_error err2 = {0};

        obx_fuzz_require(resolve((const uint8_t *)blanked, size - 1, &err2) == st &&
                             strcmp(err.message, err2.message) == 0,
                         "a password in a secret file changes its verdict or its message");
    }
    free(blanked);
    return 0;
}
