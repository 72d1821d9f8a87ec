/* SPDX-License-Identifier: MIT */
/*
 * nats_auth.h - how a NATS connection of ours proves who it is and whom it
 * talks to: credentials and TLS, taken from the configuration by one
 * mapping that the relay's bus, the consumers' feed, outboxctl and the
 * tools share, so a new setting reaches every connection at once.
 *
 * No nats.h here: the bus's and feed's option structs embed this.
 */
#ifndef OBX_NATS_AUTH_H
#define OBX_NATS_AUTH_H

#include "outbox/outbox.h"

struct obx_config;

/* Every field borrowed; NULL: not used. At most one way to sign in is set. */
struct obx_nats_auth {
    const char *creds_file;     /* .creds: a user JWT and its NKey seed */
    const char *nkey_seed_file; /* a user NKey seed (SU...), its public key derived from it */
    const char *user;           /* with password_file */
    const char *password_file;  /* first line: the password */
    const char *token_file;     /* first line: the token */
    const char *tls_ca_file;    /* NULL: the system's trust store (when TLS is on) */
    const char *tls_cert_file;  /* client certificate; needs tls_key_file */
    const char *tls_key_file;
};

/* The settings' credentials and TLS files (pointers into `cfg`). */
void obx_nats_auth_from_config(struct obx_nats_auth *auth, const struct obx_config *cfg);

/*
 * Sets into `cfg` the credential and TLS settings of the environment, and
 * only those (OUTBOX_NATS_CREDS, ..._TLS_KEY), checked and named as the
 * daemons' settings are: for a program with its own options (the bench)
 * whose connections must sign in as the daemons do. OUTBOX_EINVAL names
 * the variable.
 */
outbox_status obx_nats_auth_load_env(struct obx_config *cfg, outbox_error *err);

/*
 * The credentials of the program's one-shot connections (tools asking a
 * stream a question deep inside code that knows only a URL: the demo's
 * audit, the benchmark's setup). A program sets them once at start,
 * before any thread connects; `auth`'s strings must live as long as the
 * program. Without a call: none.
 */
void obx_nats_tool_auth_set(const struct obx_nats_auth *auth);
const struct obx_nats_auth *obx_nats_tool_auth(void);

#endif
