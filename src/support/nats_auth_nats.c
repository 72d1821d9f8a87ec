/* SPDX-License-Identifier: MIT */
/*
 * nats_auth_nats.c - credentials and TLS from the configuration and on
 * nats.c's options (see nats_auth.h and nats_auth_nats.h).
 *
 * nats.c's own messages for a refused connection say what failed
 * ("certificate verify failed", "Authorization Violation") but not which
 * of our settings led there; the hint names them with their files.
 */
#include "nats_auth_nats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "config/config.h"
#include "config/config_files.h"
#include "config/settings.h"
#include "nkey.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define SECRET_CAP 1024

static int
is_set(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/* nats.c's reason for the last failure, without its "(file.c:123): " prefix. */
static const char *
last_reason(void)
{
    natsStatus s = NATS_OK;
    const char *last = nats_GetLastError(&s);

    if (last == NULL) {
        return "";
    }
    return last[0] == '(' && strstr(last, "): ") != NULL ? strstr(last, "): ") + 3 : last;
}

static outbox_status
set_tls(natsOptions *o, const struct obx_nats_auth *a, const char *url, outbox_error *err)
{
    int wanted = is_set(a->tls_ca_file) || is_set(a->tls_cert_file) || is_set(a->tls_key_file) ||
                 strstr(url, "tls://") != NULL;

    if (!wanted) {
        return OUTBOX_OK;
    }
    if (is_set(a->tls_cert_file) != is_set(a->tls_key_file)) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "nats_tls_cert (OUTBOX_NATS_TLS_CERT) and nats_tls_key "
                        "(OUTBOX_NATS_TLS_KEY) must be set together");
    }
    if (natsOptions_SetSecure(o, true) != NATS_OK) {
        return obx_fail(err, OUTBOX_EINVAL, "enabling nats tls: %s", last_reason());
    }
    if (is_set(a->tls_ca_file) &&
        natsOptions_LoadCATrustedCertificates(o, a->tls_ca_file) != NATS_OK) {
        return obx_fail(err, OUTBOX_EINVAL, "nats_tls_ca (OUTBOX_NATS_TLS_CA) %s: %s",
                        a->tls_ca_file, last_reason());
    }
    if (is_set(a->tls_cert_file) &&
        natsOptions_LoadCertificatesChain(o, a->tls_cert_file, a->tls_key_file) != NATS_OK) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "nats_tls_cert (OUTBOX_NATS_TLS_CERT) %s with nats_tls_key "
                        "(OUTBOX_NATS_TLS_KEY) %s: %s",
                        a->tls_cert_file, a->tls_key_file, last_reason());
    }
    return OUTBOX_OK;
}

static outbox_status
set_user(natsOptions *o, const struct obx_nats_auth *a, outbox_error *err)
{
    char secret[SECRET_CAP];
    natsStatus ns;
    outbox_status st;

    if (is_set(a->user) && is_set(a->password_file)) {
        st = obx_secret_file_read("nats_password_file (OUTBOX_NATS_PASSWORD_FILE)",
                                  a->password_file, secret, sizeof(secret), err);
        if (st != OUTBOX_OK) {
            return st;
        }
        ns = natsOptions_SetUserInfo(o, a->user, secret);
        explicit_bzero(secret, sizeof(secret));
        if (ns != NATS_OK) {
            return obx_fail(err, OUTBOX_ENOMEM, "setting the nats user: %s", last_reason());
        }
    }
    if (is_set(a->token_file)) {
        st = obx_secret_file_read("nats_token_file (OUTBOX_NATS_TOKEN_FILE)", a->token_file, secret,
                                  sizeof(secret), err);
        if (st != OUTBOX_OK) {
            return st;
        }
        ns = natsOptions_SetToken(o, secret);
        explicit_bzero(secret, sizeof(secret));
        if (ns != NATS_OK) {
            return obx_fail(err, OUTBOX_ENOMEM, "setting the nats token: %s", last_reason());
        }
    }
    return OUTBOX_OK;
}

static outbox_status
set_keys(natsOptions *o, const struct obx_nats_auth *a, outbox_error *err)
{
    char pub[OBX_NKEY_PUBLIC_LEN + 1];
    outbox_status st;

    if (is_set(a->creds_file) &&
        natsOptions_SetUserCredentialsFromFiles(o, a->creds_file, NULL) != NATS_OK) {
        return obx_fail(err, OUTBOX_EINVAL, "nats_creds (OUTBOX_NATS_CREDS) %s: %s", a->creds_file,
                        last_reason());
    }
    if (is_set(a->nkey_seed_file)) {
        st = obx_nkey_public_of_file("nats_nkey_seed (OUTBOX_NATS_NKEY_SEED)", a->nkey_seed_file,
                                     pub, err);
        if (st != OUTBOX_OK) {
            return st;
        }
        if (natsOptions_SetNKeyFromSeed(o, pub, a->nkey_seed_file) != NATS_OK) {
            return obx_fail(err, OUTBOX_EINVAL, "nats_nkey_seed (OUTBOX_NATS_NKEY_SEED) %s: %s",
                            a->nkey_seed_file, last_reason());
        }
    }
    return OUTBOX_OK;
}

outbox_status
obx_nats_auth_apply(natsOptions *o, const struct obx_nats_auth *a, const char *url,
                    outbox_error *err)
{
    outbox_status st = set_tls(o, a, url, err);

    if (st == OUTBOX_OK) {
        st = set_keys(o, a, err);
    }
    return st == OUTBOX_OK ? set_user(o, a, err) : st;
}

/* Appends "NAME=value" for a set setting, separated by ", ". */
static void
add(char *out, size_t cap, const char *name, const char *value)
{
    size_t len = strlen(out);

    if (is_set(value) && len < cap) {
        snprintf(out + len, cap - len, "%s%s=%s", len > 0 ? ", " : "", name, value);
    }
}

void
obx_nats_hints_init(struct obx_nats_hints *h, const struct obx_nats_auth *a, const char *url)
{
    char set[400] = "";

    add(set, sizeof(set), "OUTBOX_NATS_TLS_CA", a->tls_ca_file);
    add(set, sizeof(set), "OUTBOX_NATS_TLS_CERT", a->tls_cert_file);
    add(set, sizeof(set), "OUTBOX_NATS_TLS_KEY", a->tls_key_file);
    h->tls_on = is_set(a->tls_ca_file) || is_set(a->tls_cert_file) || is_set(a->tls_key_file) ||
                strstr(url, "tls://") != NULL;
    snprintf(h->tls, sizeof(h->tls), "tls refused; check %s%s%s",
             set[0] ? set : "OUTBOX_NATS_TLS_CA (unset: the system's trust store)",
             is_set(a->tls_cert_file) ? ""
                                      : " (no client certificate: OUTBOX_NATS_TLS_CERT and "
                                        "OUTBOX_NATS_TLS_KEY are unset)",
             strstr(url, "tls://") != NULL ? " and the tls:// URL" : "");
    set[0] = '\0';
    add(set, sizeof(set), "OUTBOX_NATS_CREDS", a->creds_file);
    add(set, sizeof(set), "OUTBOX_NATS_NKEY_SEED", a->nkey_seed_file);
    add(set, sizeof(set), "OUTBOX_NATS_USER", a->user);
    add(set, sizeof(set), "OUTBOX_NATS_PASSWORD_FILE", a->password_file);
    add(set, sizeof(set), "OUTBOX_NATS_TOKEN_FILE", a->token_file);
    snprintf(h->auth, sizeof(h->auth), "credentials refused; check %s",
             set[0] ? set
             : strchr(url, '@') != NULL
                 ? "the user information of OUTBOX_NATS_URL"
                 : "OUTBOX_NATS_CREDS, OUTBOX_NATS_NKEY_SEED, OUTBOX_NATS_USER "
                   "or OUTBOX_NATS_TOKEN_FILE (none is set)");
}

const char *
obx_nats_hint_for(const struct obx_nats_hints *h, natsStatus s)
{
    switch (s) {
    case NATS_SSL_ERROR:
    case NATS_SECURE_CONNECTION_WANTED:
    case NATS_SECURE_CONNECTION_REQUIRED:
        return h->tls;
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_NOT_PERMITTED:
        return h->auth;
    case NATS_PROTOCOL_ERROR:
        /* A server that wants a client certificate we lack closes after the
         * handshake (TLS 1.3 checks it then): nats.c sees no PONG. */
        return h->tls_on ? h->tls : "";
    default:
        return "";
    }
}

static struct obx_nats_auth tool_auth;

void
obx_nats_auth_from_config(struct obx_nats_auth *auth, const struct obx_config *cfg)
{
    *auth = (struct obx_nats_auth){
        .creds_file = cfg->nats_creds,
        .nkey_seed_file = cfg->nats_nkey_seed,
        .user = cfg->nats_user,
        .password_file = cfg->nats_password_file,
        .token_file = cfg->nats_token_file,
        .tls_ca_file = cfg->nats_tls_ca,
        .tls_cert_file = cfg->nats_tls_cert,
        .tls_key_file = cfg->nats_tls_key,
    };
}

/* The settings obx_nats_auth_from_config() reads, by key: keep the two together. */
static const char *const auth_keys[] = {
    "nats_creds",      "nats_nkey_seed", "nats_user",     "nats_password_file",
    "nats_token_file", "nats_tls_ca",    "nats_tls_cert", "nats_tls_key",
};

outbox_status
obx_nats_auth_load_env(struct obx_config *cfg, outbox_error *err)
{
    for (size_t i = 0; i < sizeof(auth_keys) / sizeof(auth_keys[0]); i++) {
        const struct obx_setting *s = obx_setting_by_key(auth_keys[i]);
        const char *value = s != NULL ? getenv(s->env) : NULL;
        outbox_status st;

        if (value != NULL && value[0] != '\0' &&
            (st = obx_config_set_as(cfg, s, s->env, value, err)) != OUTBOX_OK) {
            return st;
        }
    }
    return OUTBOX_OK;
}

void
obx_nats_tool_auth_set(const struct obx_nats_auth *auth)
{
    tool_auth = auth != NULL ? *auth : (struct obx_nats_auth){0};
}

const struct obx_nats_auth *
obx_nats_tool_auth(void)
{
    return &tool_auth;
}
