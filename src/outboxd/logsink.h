/* SPDX-License-Identifier: MIT */
/*
 * logsink.h - the programs' logger: one line per event on stderr.
 *
 * 2026-11-29T09:41:56.123Z level=info relay starting relay=... schema=...
 * A constant message, then key=value fields; journald and Docker collect
 * stderr. Lines from several threads never interleave.
 */
#ifndef OBX_LOGSINK_H
#define OBX_LOGSINK_H

#include "outbox/worker.h"

/* Installs the stderr logger: lines at `level` and above. */
void obx_logsink_install(outbox_log_level level);

#endif
