/* SPDX-License-Identifier: MIT */
/*
 * fleet.h - one relay process serving many service databases.
 *
 * The fleet file lists the databases (fleet_file.c). Each one is a member
 * (fleet_member.c): a thread that tries, every OUTBOX_FLEET_TRY_MS, to take
 * the database's ownership lock (fleet_lock_pg.c) and, while it holds it,
 * runs an ordinary outbox_relay for that database in a second thread. So
 * every database is served by one replica at a time, a replica holds no
 * connection to a database it does not own beyond the short try, and a
 * database that is down, locked or slow stalls only its own threads.
 * The relays share one publish window of OUTBOX_MAX_IN_FLIGHT messages and
 * take turns in it by deficit round-robin (fleet_window.c).
 * fleet.c keeps the members in step with the file, re-read on reload.
 */
#ifndef OBX_FLEET_H
#define OBX_FLEET_H

#include <stddef.h>

#include "config/settings.h"
#include "outbox/worker.h"

/* ---- the file ------------------------------------------------------------------------ */

enum { OBX_FLEET_NAME_MAX = 63 };

/* One line of the fleet file. */
struct obx_fleet_entry {
    char name[OBX_FLEET_NAME_MAX + 1];      /* [A-Za-z0-9_.-]: the label in metrics and logs */
    int line;                               /* where it was written */
    char *database_url;                     /* owned; never printed: it may hold a password */
    char *schema, *stream, *subject_prefix; /* owned; the base settings' values by default */
};

struct obx_fleet_list {
    struct obx_fleet_entry *items;
    size_t count;
};

/*
 * Reads `path`: one database a line, `NAME DATABASE_URL [schema=S] [stream=X]
 * [subject_prefix=P]`, blank lines and `#` comments skipped; what a line
 * leaves out comes from `base`. OUTBOX_EINVAL names the file, the line, the
 * field and its value (never a URL's): a bad name, a repeated name, an
 * unknown field, a value its setting refuses, one stream given two subject
 * prefixes. OUTBOX_EUNAVAILABLE when the file cannot be read.
 */
outbox_status obx_fleet_file_load(const char *path, const struct obx_config *base,
                                  struct obx_fleet_list *out, outbox_error *err);
void obx_fleet_list_fini(struct obx_fleet_list *list);

/* ---- the fleet ----------------------------------------------------------------------- */

struct obx_fleet;

/* What one member reports, for /metrics. */
struct obx_fleet_view {
    const char *name;             /* valid during the visit */
    int owned;                    /* 1 while this replica holds the database's lock */
    outbox_relay *relay;          /* the running relay while owned, else NULL */
    unsigned long long takeovers; /* times this replica took the database */
    double window_wait_seconds;   /* time its relay waited for room in the replica's window */
};

/*
 * A fleet serving the databases of `base`'s fleet_file with `base`'s relay
 * settings (copied). Starts nothing. OUTBOX_EINVAL for a bad file, with
 * obx_fleet_file_load()'s message.
 */
outbox_status obx_fleet_new(const struct obx_config *base, struct obx_fleet **out,
                            outbox_error *err);

/*
 * Runs until obx_fleet_stop(): starts a member per database, re-reads the
 * file whenever SIGHUP arrives (the caller keeps SIGHUP blocked in every
 * thread; this one takes it), and on stop stops every member, each with
 * the drain timeout. Returns OUTBOX_OK.
 */
outbox_status obx_fleet_run(struct obx_fleet *fleet);

/* Safe from any thread. */
void obx_fleet_stop(struct obx_fleet *fleet);

/* Re-reads the file now (what SIGHUP does); a bad file keeps the members as they are. */
void obx_fleet_reload(struct obx_fleet *fleet);

/* Calls `visit` for every member, in file order, under the fleet's lock. */
void obx_fleet_visit(struct obx_fleet *fleet,
                     void (*visit)(void *ctx, const struct obx_fleet_view *view), void *ctx);

/* The number of members, and of those this replica owns. */
void obx_fleet_counts(struct obx_fleet *fleet, size_t *members, size_t *owned);

/* The shared publish window: its size, the messages in it, the databases waiting for room. */
void obx_fleet_window_state(struct obx_fleet *fleet, size_t *capacity, size_t *in_flight,
                            size_t *waiting);

void obx_fleet_free(struct obx_fleet *fleet);

/* The database the calling thread serves (a member's threads), or NULL: for log lines. */
const char *obx_fleet_thread_database(void);

#endif
