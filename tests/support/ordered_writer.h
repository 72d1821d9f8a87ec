/* SPDX-License-Identifier: MIT */
/*
 * ordered_writer.h - a business writer on its own thread for the ordering
 * tests (issue 22 item 6, FAULTS.md T29): each transaction writes a few
 * events to each of a few aggregates of a fixed set, holding each
 * aggregate's counter row (migration 0014) a moment before going on, so
 * that writers of the same aggregate queue up behind each other's open
 * transactions; some transactions roll back, giving their numbers back.
 * Every committed event's id is in public.committed, written in the same
 * transaction (as writer_thread.h does). Its sessions are named
 * ORDERED_WRITER_APP (application_name), so a test can see them queue.
 *
 * Aggregates are ordered_writer_aggregate_id(i), i in [0, aggregates): the
 * test knows them without asking the database. A transaction locks its
 * aggregates in index order, so writers never deadlock on counter rows.
 *
 * The thread never touches Criterion: the test reads the counters and
 * asserts on its own thread.
 */
#ifndef OBX_TEST_ORDERED_WRITER_H
#define OBX_TEST_ORDERED_WRITER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#define ORDERED_WRITER_APP "ordered_writer"

struct ordered_writer {
    const char *url;            /* borrowed: the test's database */
    const char *aggregate_type; /* borrowed, e.g. "order" */
    int aggregates;             /* aggregates 0 .. aggregates-1 */
    int first_aggregate;        /* offset of aggregate 0's index, so writers can keep apart */
    int target;                 /* stop once this many of its events are committed */
    int max_aggregates_per_txn; /* 1 .. this many aggregates per transaction */
    int max_events_per_step;    /* 1 .. this many events per aggregate per transaction */
    int hold_max_ms;            /* 0 .. this long holding each aggregate before the next */
    int rollback_pct;           /* this share of transactions ends in ROLLBACK */
    int pause_ms;               /* between transactions, to spread the load over time */
    unsigned int seed;          /* its own random stream */
    atomic_int committed;       /* events in transactions whose COMMIT was acknowledged */
    atomic_int rolled_back;     /* events in transactions rolled back on purpose */
    atomic_int failures;        /* statements lost to an error or an outage (rolled back) */
    atomic_int done;            /* 1 once the thread has finished */
    pthread_t thread;
};

/* Aggregate i's id, a UUID made from i (36 characters and a NUL). */
void ordered_writer_aggregate_id(int i, char out[37]);

/* Starts the thread; -1 if it could not be created. */
int ordered_writer_start(struct ordered_writer *w);

/* Waits for the thread to finish. */
void ordered_writer_join(struct ordered_writer *w);

#endif
