/* SPDX-License-Identifier: MIT */
/*
 * config_files.c - secrets read from files, and credentials that exclude
 * each other (see config_files.h).
 */
#include "config_files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/conninfo.h"
#include "common/error.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* Longest database URL a file may hold (libpq has no limit; a URL of this size is a mistake). */
#define DATABASE_URL_MAX 4096

outbox_status
obx_secret_file_read(const char *setting, const char *path, char *out, size_t cap,
                     outbox_error *err)
{
    FILE *f = fopen(path, "re");
    size_t len;

    if (f == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "%s: cannot read %s: %s", setting, path,
                        strerror(errno));
    }
    if (fgets(out, (int)cap, f) == NULL) {
        out[0] = '\0';
    }
    fclose(f);
    len = strcspn(out, "\r\n");
    if (out[len] == '\0' && len + 1 >= cap) {
        explicit_bzero(out, cap);
        return obx_fail(err, OUTBOX_EINVAL, "%s: the first line of %s is longer than %zu bytes",
                        setting, path, cap - 1);
    }
    out[len] = '\0';
    if (len == 0) {
        return obx_fail(err, OUTBOX_EINVAL, "%s: %s is empty (its first line holds the secret)",
                        setting, path);
    }
    return OUTBOX_OK;
}

static outbox_status
read_database_url(struct obx_config *cfg, outbox_error *err)
{
    char url[DATABASE_URL_MAX + 2];
    outbox_error why = {0};
    outbox_status st;

    if (cfg->database_url != NULL) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "OUTBOX_DATABASE_URL and OUTBOX_DATABASE_URL_FILE are both set: give one");
    }
    st = obx_secret_file_read("OUTBOX_DATABASE_URL_FILE", cfg->database_url_file, url, sizeof(url),
                              err);
    if (st != OUTBOX_OK) {
        return st;
    }
    /* The check masks every secret of the URL in its reason. */
    if (obx_conninfo_check(url, &why) != OUTBOX_OK) {
        explicit_bzero(url, sizeof(url));
        return obx_fail(err, OUTBOX_EINVAL, "OUTBOX_DATABASE_URL_FILE=%s: %s",
                        cfg->database_url_file, why.message);
    }
    cfg->database_url = strdup(url);
    explicit_bzero(url, sizeof(url));
    return cfg->database_url != NULL ? OUTBOX_OK : obx_fail(err, OUTBOX_ENOMEM, "out of memory");
}

/* nats.c takes one way to sign in: a .creds file or an NKey, a token or a user. */
static outbox_status
check_nats_credentials(const struct obx_config *cfg, outbox_error *err)
{
    if (cfg->nats_creds != NULL && cfg->nats_nkey_seed != NULL) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "OUTBOX_NATS_CREDS and OUTBOX_NATS_NKEY_SEED are both set: give one");
    }
    if ((cfg->nats_user == NULL) != (cfg->nats_password_file == NULL)) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "OUTBOX_NATS_USER and OUTBOX_NATS_PASSWORD_FILE must be set together (%s "
                        "is not set)",
                        cfg->nats_user == NULL ? "OUTBOX_NATS_USER" : "OUTBOX_NATS_PASSWORD_FILE");
    }
    if (cfg->nats_user != NULL && cfg->nats_token_file != NULL) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "OUTBOX_NATS_USER and OUTBOX_NATS_TOKEN_FILE are both set: give one");
    }
    return OUTBOX_OK;
}

outbox_status
obx_config_resolve_files(struct obx_config *cfg, outbox_error *err)
{
    outbox_status st = OUTBOX_OK;

    if (cfg->database_url_file != NULL) {
        st = read_database_url(cfg, err);
    }
    return st == OUTBOX_OK ? check_nats_credentials(cfg, err) : st;
}
