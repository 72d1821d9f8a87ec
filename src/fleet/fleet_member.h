/* SPDX-License-Identifier: MIT */
/*
 * fleet_member.h - one database of the fleet: its ownership and its relay.
 *
 * A member runs two threads. The owner thread tries the database's lock
 * every try interval; once it holds it, it starts the relay thread (an
 * ordinary outbox_relay for that database) and checks the lock every
 * quarter second. When the lock is lost (the database dropped the
 * session), the member is stopped or the relay gives up, the relay is
 * stopped and drained first and the lock released after, so on a graceful
 * hand-over the next owner starts only once this one is done.
 */
#ifndef OBX_FLEET_MEMBER_H
#define OBX_FLEET_MEMBER_H

#include "fleet.h"

struct obx_fleet_member;

struct obx_fleet_window;

/*
 * A member for `entry` (copied) with `base`'s relay settings, named
 * `replica`.`entry->name` in logs and server views. It joins `window` (the
 * replica's, which must outlive it) with a cap of
 * OUTBOX_FLEET_DATABASE_IN_FLIGHT messages (at most OUTBOX_MAX_IN_FLIGHT);
 * its relay's batch is at most that cap. Starts nothing.
 */
outbox_status obx_fleet_member_new(const struct obx_fleet_entry *entry,
                                   const struct obx_config *base, const char *replica,
                                   struct obx_fleet_window *window, struct obx_fleet_member **out,
                                   outbox_error *err);

/* Starts the owner thread. */
outbox_status obx_fleet_member_start(struct obx_fleet_member *m, outbox_error *err);

/* Asks the owner thread to stop (returns at once). */
void obx_fleet_member_stop(struct obx_fleet_member *m);

/* Waits for a stopped member's threads (each bounded by the drain timeout), then frees it. */
void obx_fleet_member_free(struct obx_fleet_member *m);

/* 1 when `m` serves exactly what `entry` says (same name, URL, schema, stream, prefix). */
int obx_fleet_member_matches(const struct obx_fleet_member *m, const struct obx_fleet_entry *entry);

const char *obx_fleet_member_name(const struct obx_fleet_member *m);

/* The member's state for /metrics, under its own lock. */
void obx_fleet_member_visit(struct obx_fleet_member *m,
                            void (*visit)(void *ctx, const struct obx_fleet_view *view), void *ctx);

/* 1 while this replica owns the database. */
int obx_fleet_member_owned(struct obx_fleet_member *m);

#endif
