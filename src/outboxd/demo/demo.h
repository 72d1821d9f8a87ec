/* SPDX-License-Identifier: MIT */
/*
 * demo.h - `outboxd demo`: the whole product on a laptop in one command.
 *
 * Writers commit business rows and their events together; relay replicas
 * (separate outboxd processes, one of them killed and restarted on the
 * way) publish to JetStream; a live line shows the flow, and a summary
 * reads the stream back and counts what was lost (0) and duplicated (0).
 */
#ifndef OBX_DEMO_H
#define OBX_DEMO_H

#include <sys/types.h>

#include "config/settings.h"
#include "outbox/outbox.h"

struct obx_demo_options {
    double seconds;   /* how long the writers write */
    int rate;         /* events per second, all writers together */
    int writers;      /* writer threads, each with its own connection */
    int relays;       /* relay processes */
    const char *self; /* path of this outboxd, to start relays */
};

/* Writers (demo_writers_pg.c): one business row and one event per transaction. */
struct obx_demo_writers;

struct obx_demo_writers *obx_demo_writers_start(const char *database_url, const outbox_config *wc,
                                                int writers, int rate, double seconds);
/* Events committed so far (thread-safe). */
long long obx_demo_writers_committed(struct obx_demo_writers *w);
/* 1 once every writer has finished. */
int obx_demo_writers_done(struct obx_demo_writers *w);
/* Waits for the writers and frees them; returns how many failed transactions there were. */
long long obx_demo_writers_join(struct obx_demo_writers *w);

/* The demo's database (demo_db_pg.c). */

/* Migrates and creates the demo's business tables. Returns 0, or -1 with a message printed. */
int obx_demo_prepare_db(const char *database_url, const char *schema);

/* A connection for the progress line and the audit; NULL when it cannot connect. */
struct obx_demo_db;
struct obx_demo_db *obx_demo_db_open(const char *database_url, const char *schema);
void obx_demo_db_close(struct obx_demo_db *db);

/* What the progress line shows (see sql/queries/demo_counts.sql). */
struct obx_demo_counts {
    long long done, waiting, stuck; /* outbox rows of the committed events */
    long long handled;              /* handler runs the projection counted */
    long long ledger_done;          /* events the ledger marked handled */
    long long out_of_order;         /* reviews the projection saw out of their movie's order */
    int ordered;                    /* the schema numbers its events */
};

/* The counts of demo_counts.sql. 0, or -1. */
int obx_demo_db_counts(struct obx_demo_db *db, struct obx_demo_counts *out);

/* Called for every committed business row's event: its id and outbox status ("" if gone). */
typedef void (*obx_demo_audit_fn)(void *ctx, const char *event_id, const char *status);

/* Runs demo_audit.sql, calling `each` per row. 0, or -1. */
int obx_demo_db_audit(struct obx_demo_db *db, obx_demo_audit_fn each, void *ctx);

/* The consumers' handler's name: its order baseline is taken before the writers start. */
#define OBX_DEMO_HANDLER_NAME "movie_stats"

/*
 * The consumers' handler: a projection of reviews per movie, in the ledger
 * transaction. It takes every event of a movie (`*.movie.>`), so on an
 * ordered schema it runs each movie's events in their order; it counts a
 * review whose number is not the one after the movie's last as out of
 * order (the first of a run is not checked: an earlier run's numbers went
 * before it).
 */
#define OBX_DEMO_HANDLER                                                                  \
    OBX_DEMO_HANDLER_NAME                                                                 \
    "@*.movie.>=sql:"                                                                     \
    "INSERT INTO demo_movie_stats (movie_id, reviews, stars, last_seq) "                  \
    "VALUES (($1->>'aggregate_id')::uuid, 1, ($1->'payload'->>'stars')::int, "            \
    "($1->>'aggregate_seq')::bigint) "                                                    \
    "ON CONFLICT (movie_id) DO UPDATE SET reviews = demo_movie_stats.reviews + 1, "       \
    "stars = demo_movie_stats.stars + excluded.stars, last_seq = excluded.last_seq, "     \
    "out_of_order = demo_movie_stats.out_of_order + (excluded.last_seq IS DISTINCT FROM " \
    "demo_movie_stats.last_seq + 1)::int"

int obx_cmd_demo(const struct obx_config *cfg, int argc, char **argv, const char *self);

#endif
