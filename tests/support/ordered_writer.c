/* SPDX-License-Identifier: MIT */
/*
 * ordered_writer.c - overlapping transactions over a fixed set of
 * aggregates, some rolled back, until a target of committed events.
 */
#include "ordered_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <libpq-fe.h>

enum { MAX_STEPS = 16 };

#define INSERT_SQL                                                                          \
    "INSERT INTO public.committed SELECT outbox.enqueue($1::text, $2::uuid, 'step.taken', " \
    "jsonb_build_object('n', g)) FROM generate_series(1, $3::int) AS g"

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* The server's "terminating connection" warnings are expected here. */
static void
ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* A connection that answers, retried every 50 ms while the server is away. */
static PGconn *
connect_retrying(const char *url)
{
    for (;;) {
        PGconn *c = PQconnectdb(url);

        if (PQstatus(c) == CONNECTION_OK) {
            PQsetNoticeProcessor(c, ignore_notice, NULL);
            PQclear(PQexec(c, "SET application_name = '" ORDERED_WRITER_APP "'"));
            return c;
        }
        PQfinish(c);
        sleep_ms(50);
    }
}

void
ordered_writer_aggregate_id(int i, char out[37])
{
    snprintf(out, 37, "00000000-0000-4000-8000-%012d", i + 1);
}

/* 0 if `sql` (with `n` text parameters) succeeded. */
static int
run(PGconn *c, const char *sql, int n, const char *const *params)
{
    PGresult *res = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);

    PQclear(res);
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : -1;
}

/* `n` distinct aggregate indices in ascending order: the lock order of every transaction. */
static int
pick_aggregates(struct ordered_writer *w, int picked[MAX_STEPS])
{
    int n = 1 + (int)(rand_r(&w->seed) % (unsigned int)w->max_aggregates_per_txn);
    int count = 0;

    n = n > w->aggregates ? w->aggregates : n;
    n = n > MAX_STEPS ? MAX_STEPS : n;
    while (count < n) {
        int a = (int)(rand_r(&w->seed) % (unsigned int)w->aggregates), at = count;

        for (int k = 0; k < count; k++) {
            at = picked[k] == a ? -1 : at;
        }
        if (at < 0) {
            continue;
        }
        while (at > 0 && picked[at - 1] > a) {
            picked[at] = picked[at - 1];
            at--;
        }
        picked[at] = a;
        count++;
    }
    return n;
}

/* One step: `events` events of aggregate `index`, then a hold of the counter row. */
static int
write_step(struct ordered_writer *w, PGconn *c, int index, int events)
{
    char id[37], count[16], hold[32];
    const char *params[] = {w->aggregate_type, id, count};
    const char *hold_params[] = {hold};

    ordered_writer_aggregate_id(w->first_aggregate + index, id);
    snprintf(count, sizeof(count), "%d", events);
    if (run(c, INSERT_SQL, 3, params) != 0) {
        return -1;
    }
    if (w->hold_max_ms > 0) {
        snprintf(hold, sizeof(hold), "%.3f",
                 (double)(rand_r(&w->seed) % (unsigned int)(w->hold_max_ms + 1)) / 1000.0);
        return run(c, "SELECT pg_sleep($1::float8)", 1, hold_params);
    }
    return 0;
}

/* One transaction; the events it committed (0 when rolled back or failed). */
static int
write_transaction(struct ordered_writer *w, PGconn *c)
{
    int picked[MAX_STEPS], n = pick_aggregates(w, picked), events = 0;
    int rollback = (int)(rand_r(&w->seed) % 100U) < w->rollback_pct;

    if (run(c, "BEGIN", 0, NULL) != 0) {
        atomic_fetch_add(&w->failures, 1);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        int k = 1 + (int)(rand_r(&w->seed) % (unsigned int)w->max_events_per_step);

        if (write_step(w, c, picked[i], k) != 0) {
            /* Committed or not, the database will say: the ids are in `committed` or absent. */
            atomic_fetch_add(&w->failures, 1);
            run(c, "ROLLBACK", 0, NULL);
            return 0;
        }
        events += k;
    }
    if (rollback) {
        /* Gives the numbers back: the next transaction of these aggregates reuses them. */
        atomic_fetch_add(&w->rolled_back, events);
        run(c, "ROLLBACK", 0, NULL);
        return 0;
    }
    if (run(c, "COMMIT", 0, NULL) != 0) {
        atomic_fetch_add(&w->failures, 1);
        return 0;
    }
    return events;
}

static void *
writer_main(void *arg)
{
    struct ordered_writer *w = arg;
    PGconn *c = connect_retrying(w->url);

    while (atomic_load(&w->committed) < w->target) {
        atomic_fetch_add(&w->committed, write_transaction(w, c));
        if (PQstatus(c) != CONNECTION_OK) {
            PQfinish(c);
            c = connect_retrying(w->url);
        }
        if (w->pause_ms > 0) {
            sleep_ms(w->pause_ms);
        }
    }
    PQfinish(c);
    atomic_store(&w->done, 1);
    return NULL;
}

int
ordered_writer_start(struct ordered_writer *w)
{
    if (w->aggregates < 1 || w->max_aggregates_per_txn < 1 || w->max_events_per_step < 1 ||
        w->hold_max_ms < 0) {
        return -1;
    }
    atomic_store(&w->committed, 0);
    atomic_store(&w->rolled_back, 0);
    atomic_store(&w->failures, 0);
    atomic_store(&w->done, 0);
    return pthread_create(&w->thread, NULL, writer_main, w) == 0 ? 0 : -1;
}

void
ordered_writer_join(struct ordered_writer *w)
{
    pthread_join(w->thread, NULL);
}
