/* SPDX-License-Identifier: MIT */
/*
 * config_warn.h - what a program is given and does not read: OUTBOX_*
 * variables no setting has (a misspelling, with the setting it is close
 * to), and settings of other parts that this command ignores.
 *
 * Warnings, not errors: a shared environment file for relays and
 * consumers is normal; a typo that silently leaves a default in force is
 * what the warning is for.
 */
#ifndef OBX_CONFIG_WARN_H
#define OBX_CONFIG_WARN_H

#include <stddef.h>

#include "settings.h"

/*
 * The row whose variable is closest to `env_name` ("OUTBOX_BATCHSIZE":
 * OUTBOX_BATCH_SIZE), or NULL when none is close enough to be the one
 * meant (edit distance at most a quarter of the name, and at least 2).
 */
const struct obx_setting *obx_setting_closest(const char *env_name);

/* What the command reads, to say what it ignores. */
struct obx_config_use {
    const char *command; /* "outboxd relay": names the reader in warnings */
    unsigned parts;      /* enum obx_parts the command reads */
    const char *const
        *unread;  /* NULL-terminated variables of those parts it does not read; or NULL */
    int handlers; /* 1 if it reads OUTBOX_HANDLER_<n> */
};

/*
 * Calls `warn` once for every OUTBOX_* entry of `envp` no setting has
 * (OUTBOX_TEST_* are the tests' own), and for every setting among `envp`
 * and the --flags of `argv` that `use` does not read. An empty variable
 * counts as set here: it is still a name the operator wrote. Returns the
 * number of warnings.
 */
size_t obx_config_warn(const struct obx_config_use *use, int argc, char *const *argv,
                       char *const *envp, void (*warn)(void *ctx, const char *line), void *ctx);

#endif
