/* SPDX-License-Identifier: MIT */
/*
 * config.h - a configuration: every setting's value, set by key from
 * text or numbers, from the environment, or from --flags, each checked
 * against its row of the settings table once, when it is set.
 *
 * The public outbox_config (outbox.h) is this object; the programs use it
 * directly, with every key (OBX_FOR_ALL). Precedence for the programs:
 * default, then environment, then flags.
 */
#ifndef OBX_CONFIG_H
#define OBX_CONFIG_H

#include <stdio.h>

#include "outbox/outbox.h"
#include "settings.h"

/* What the public handle is: the values and nothing else. */
struct outbox_config {
    struct obx_config values;
};

/* Every value at its default, taking the keys of `parts`. OUTBOX_ENOMEM only. */
outbox_status obx_config_init(struct obx_config *cfg, unsigned parts, outbox_error *err);
void obx_config_fini(struct obx_config *cfg);

/* Copies every value of `src` into `dst` (an initialised one); `dst` keeps its parts. */
outbox_status obx_config_copy(struct obx_config *dst, const struct obx_config *src,
                              outbox_error *err);

/*
 * Sets `key` from `text` after checking it against its row. `as` names the
 * setting in messages ("batch_size", "OUTBOX_BATCH_SIZE"): a bad value is
 * OUTBOX_EINVAL with `as="text"` and what is accepted; a key this object
 * does not take is OUTBOX_EINVAL naming the key.
 */
outbox_status obx_config_set_as(struct obx_config *cfg, const struct obx_setting *s, const char *as,
                                const char *text, outbox_error *err);

/* obx_config_set_as() by key, named by its key in messages. */
outbox_status obx_config_set_key(struct obx_config *cfg, const char *key, const char *text,
                                 outbox_error *err);

/* The value of row `s` as text (a CHOICE as its name; "" when unset). */
void obx_config_text(const struct obx_config *cfg, const struct obx_setting *s, char *out,
                     size_t cap);

/*
 * OUTBOX_<KEY> variables that are set and not empty, for the keys this
 * object takes. An empty variable counts as not set, and so does an empty
 * flag value (--batch-size=): the two spellings of a setting agree.
 */
outbox_status obx_config_load_env(struct obx_config *cfg, outbox_error *err);

/*
 * --key value and --key=value arguments (flag spelling: --batch-size).
 * Arguments that are not settings are left in `argv` in order and their
 * count returned in `*rest`.
 */
outbox_status obx_config_load_args(struct obx_config *cfg, int argc, char **argv, int *rest,
                                   outbox_error *err);

/* Defaults, then environment, then flags: the programs' whole configuration. */
outbox_status obx_config_load(struct obx_config *cfg, int argc, char **argv, int *rest,
                              outbox_error *err);

/* `name`, or "host-pid" when it is unset, into `out`: a replica's name. */
void obx_config_replica_name(const struct obx_config *cfg, char *out, size_t cap);

/* --help: every setting of `parts` with its flag, default and help. */
void obx_config_print_help(FILE *out, unsigned parts);

/* The settings table (Markdown) of docs/reference/settings.md, from the same rows. */
void obx_config_print_markdown(FILE *out);

#endif
