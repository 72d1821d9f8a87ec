/* SPDX-License-Identifier: MIT */
/*
 * conninfo.h - a PostgreSQL connection string checked before any
 * connection is tried.
 *
 * libpq refuses a bad port or sslmode only when it connects, and a
 * connection that fails is retried as an outage: `port=abc` would leave a
 * daemon unready forever. Checked at start, the same mistake is a
 * configuration error naming the setting.
 */
#ifndef OBX_CONNINFO_H
#define OBX_CONNINFO_H

#include "outbox/outbox.h"

/*
 * OUTBOX_OK if libpq parses `conninfo` (a postgresql:// URL or key=value
 * words) and will take its ports, numbers and choices; else OUTBOX_EINVAL
 * saying why, with every secret masked (libpq's own message included).
 */
outbox_status obx_conninfo_check(const char *conninfo, outbox_error *err);

#endif
