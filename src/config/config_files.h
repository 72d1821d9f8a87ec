/* SPDX-License-Identifier: MIT */
/*
 * config_files.h - settings that name a file holding a secret, and the
 * combinations of credentials a configuration may hold.
 *
 * Containers mount secrets as files (/run/secrets/...). A secret in a
 * variable shows in `docker inspect` and in /proc/PID/environ, and as a
 * flag in /proc/PID/cmdline for every user of the machine; a file is
 * readable only by whom its mode allows.
 */
#ifndef OBX_CONFIG_FILES_H
#define OBX_CONFIG_FILES_H

#include <stddef.h>

#include "outbox/outbox.h"
#include "settings.h"

/*
 * After the environment and the flags: OUTBOX_DATABASE_URL_FILE's first
 * line becomes database_url (checked like the variable, never echoed),
 * and credentials that cannot go together are refused, naming both
 * settings. OUTBOX_EINVAL with the reason; nothing changed then.
 */
outbox_status obx_config_resolve_files(struct obx_config *cfg, outbox_error *err);

/*
 * The first line of `path` (without its line break) into `out` (cap bytes),
 * for secrets: `setting` names the file's setting in errors, which never
 * show the content. OUTBOX_EINVAL when it cannot be read, is empty or does
 * not fit.
 */
outbox_status obx_secret_file_read(const char *setting, const char *path, char *out, size_t cap,
                                   outbox_error *err);

#endif
