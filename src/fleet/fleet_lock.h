/* SPDX-License-Identifier: MIT */
/*
 * fleet_lock.h - the ownership of one database by one fleet replica: a
 * session advisory lock (fleet_lock_take.sql) on a connection of its own.
 * The lock lives exactly as long as the session, so a replica that dies,
 * is partitioned away or has its backend terminated hands the database on
 * without anyone waiting for a lease to run out.
 */
#ifndef OBX_FLEET_LOCK_H
#define OBX_FLEET_LOCK_H

#include "outbox/outbox.h"

struct obx_fleet_lock; /* one connection, owned */

/*
 * Connects and tries the lock once. OUTBOX_OK with `*out` set: this replica
 * owns the database. OUTBOX_OK with `*out` NULL: another replica does; the
 * connection is already closed. OUTBOX_EUNAVAILABLE (or another failure):
 * the database cannot be reached; `err` says why.
 */
outbox_status obx_fleet_lock_take(const char *conninfo, const char *application_name,
                                  const char *schema, struct obx_fleet_lock **out,
                                  outbox_error *err);

/* OUTBOX_OK while the session is alive and still holds the lock. */
outbox_status obx_fleet_lock_check(struct obx_fleet_lock *lock, outbox_error *err);

/* Closes the session: the lock goes with it. NULL is a no-op. */
void obx_fleet_lock_release(struct obx_fleet_lock *lock);

#endif
