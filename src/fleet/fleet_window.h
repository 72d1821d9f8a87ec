/* SPDX-License-Identifier: MIT */
/*
 * fleet_window.h - the replica's publish window, shared by the databases
 * it serves.
 *
 * Each owned database's relay asks for room for a batch before it
 * publishes it and gives the room back once the batch's acks are in. The
 * window holds OUTBOX_MAX_IN_FLIGHT messages in all and one database at
 * most OUTBOX_FLEET_DATABASE_IN_FLIGHT of them.
 *
 * While nobody waits and there is room, a request is granted at once. Once
 * requests wait, they are served by deficit round-robin: the waiting
 * databases take turns in a ring, each turn adds a quantum (the window's
 * capacity divided among the members) to the database's deficit, and its
 * request is granted once the deficit covers it. A database whose turn has
 * come but finds no room keeps its turn, so nobody overtakes it: a
 * flooded database gets its share of the window and a quiet one is never
 * starved by it, whatever either one's batch size.
 */
#ifndef OBX_FLEET_WINDOW_H
#define OBX_FLEET_WINDOW_H

#include <stdatomic.h>
#include <stddef.h>

struct obx_fleet_window;
struct obx_fleet_share;

/* A window of `capacity` messages (>= 1); NULL when out of memory. */
struct obx_fleet_window *obx_fleet_window_new(size_t capacity);

/*
 * Frees the window once its last share has left; until then (a relay
 * thread abandoned at its drain timeout still holds one) it stays.
 */
void obx_fleet_window_free(struct obx_fleet_window *w);

/* A database's place in `w`, holding at most `cap` messages (>= 1); NULL when out of memory. */
struct obx_fleet_share *obx_fleet_window_join(struct obx_fleet_window *w, size_t cap);

/* Leaves the window; the share must hold nothing and wait for nothing. */
void obx_fleet_share_leave(struct obx_fleet_share *s);

/*
 * Waits for room for `n` messages (at most the share's cap, which the
 * member's batch never exceeds) and takes it. Returns the number taken, or
 * 0 once `*stop` is set while waiting (checked every few milliseconds).
 */
size_t obx_fleet_share_acquire(struct obx_fleet_share *s, size_t n, atomic_int *stop);

/* Gives back `n` messages taken by obx_fleet_share_acquire(). */
void obx_fleet_share_release(struct obx_fleet_share *s, size_t n);

/* What the window holds now, for /metrics and the tests. */
struct obx_fleet_window_view {
    size_t capacity, in_flight, waiting; /* messages; databases waiting for room */
    size_t quantum;                      /* messages a waiting database gains per turn */
};
void obx_fleet_window_view(struct obx_fleet_window *w, struct obx_fleet_window_view *out);

/* What one database holds now, and how long it has waited for room in all. */
struct obx_fleet_share_view {
    size_t in_flight;
    double wait_seconds;
};
void obx_fleet_share_view(struct obx_fleet_share *s, struct obx_fleet_share_view *out);

#endif
