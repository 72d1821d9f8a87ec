/* SPDX-License-Identifier: MIT */
/*
 * writer_thread.c - commits events with their ids in `committed`, until a
 * target, reconnecting through outages.
 */
#include "writer_thread.h"

#include <stdio.h>
#include <time.h>

#include <libpq-fe.h>

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
            return c;
        }
        PQfinish(c);
        sleep_ms(50);
    }
}

static void *
writer_main(void *arg)
{
    struct writer_thread *w = arg;
    PGconn *c = connect_retrying(w->url);
    char sql[384];

    snprintf(sql, sizeof(sql),
             "INSERT INTO committed SELECT outbox.enqueue('movie', gen_random_uuid(), "
             "'review.logged', jsonb_build_object('n', g)) FROM generate_series(1, %d) AS g",
             w->per_txn);
    while (atomic_load(&w->committed) < w->target && !atomic_load(&w->stop)) {
        PGresult *res = PQexec(c, sql);

        if (PQresultStatus(res) == PGRES_COMMAND_OK) {
            atomic_fetch_add(&w->committed, w->per_txn);
        } else {
            /* Committed or not, the database will say: the ids are in `committed` or absent. */
            atomic_fetch_add(&w->failures, 1);
            if (PQstatus(c) != CONNECTION_OK) {
                PQfinish(c);
                c = connect_retrying(w->url);
            }
        }
        PQclear(res);
        if (w->pause_ms > 0) {
            sleep_ms(w->pause_ms);
        }
    }
    PQfinish(c);
    atomic_store(&w->done, 1);
    return NULL;
}

int
writer_thread_start(struct writer_thread *w)
{
    atomic_store(&w->committed, 0);
    atomic_store(&w->failures, 0);
    atomic_store(&w->done, 0);
    atomic_store(&w->stop, 0);
    return pthread_create(&w->thread, NULL, writer_main, w) == 0 ? 0 : -1;
}

void
writer_thread_stop(struct writer_thread *w)
{
    atomic_store(&w->stop, 1);
}

void
writer_thread_join(struct writer_thread *w)
{
    pthread_join(w->thread, NULL);
}
