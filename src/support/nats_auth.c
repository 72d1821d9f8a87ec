/* SPDX-License-Identifier: MIT */
/*
 * nats_auth.c - the configuration's NATS credentials and TLS files, and
 * the program's one-shot connections' copy of them (see nats_auth.h).
 */
#include "nats_auth.h"

#include <stddef.h>

#include "config/settings.h"

#include "common/banned.h" /* last: poisons unsafe functions */

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
