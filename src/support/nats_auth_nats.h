/* SPDX-License-Identifier: MIT */
/*
 * nats_auth_nats.h - credentials and TLS put into nats.c's options, and
 * the words that explain a refused connection.
 */
#ifndef OBX_NATS_AUTH_NATS_H
#define OBX_NATS_AUTH_NATS_H

#include <stddef.h>

#include <nats/nats.h>

#include "nats_auth.h"
#include "outbox/outbox.h"

/*
 * Turns TLS on when any TLS file is set or `url` has a tls:// server
 * (nats.c then refuses a server without TLS: no fall-back to plaintext),
 * and sets the one way to sign in. Password and token files are read
 * here, once; their content never reaches a message. OUTBOX_EINVAL naming
 * the setting and its file when one cannot be used.
 */
outbox_status obx_nats_auth_apply(natsOptions *o, const struct obx_nats_auth *a, const char *url,
                                  outbox_error *err);

/*
 * What to check when a connection is refused: for TLS failures the TLS
 * settings and their files, for refused credentials the way we signed in
 * (settings and files, never a secret). Made once from the settings, so a
 * connection that fails later needs no settings kept.
 */
struct obx_nats_hints {
    char tls[512];
    char auth[512];
    int tls_on; /* TLS files or a tls:// URL: a protocol error at connect is about TLS */
};

void obx_nats_hints_init(struct obx_nats_hints *h, const struct obx_nats_auth *a, const char *url);

/* The hint for a refusal with `s`; "" when `s` is neither TLS nor credentials. */
const char *obx_nats_hint_for(const struct obx_nats_hints *h, natsStatus s);

#endif
