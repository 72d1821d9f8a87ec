/* SPDX-License-Identifier: MIT */
/*
 * demo_writers_pg.c - the demo's service: each transaction inserts a
 * review and enqueues its `movie.review.logged` event, so the two commit
 * together or not at all. Paced to the demo's rate.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uuid/uuid.h>

#include "demo.h"
#include "demo_pg.h"
#include "outbox/outbox.h"

#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { MAX_WRITERS = 32 };

struct obx_demo_writers {
    const char *database_url; /* borrowed from the caller */
    outbox_writer *writer;    /* the configured schema and envelope limit, shared */
    double rate_each;         /* events per second per writer */
    double seconds;
    int count;
    atomic_llong committed;
    atomic_llong failed;
    atomic_int finished;
    pthread_t threads[MAX_WRITERS];
};

static double
now_s(void)
{
    return (double)obx_monotonic_ms() / 1000.0;
}

/* One business transaction: the review and its event, committed together. */
static int
write_review(const outbox_writer *writer, PGconn *conn)
{
    char review_id[37], movie_id[37], stars[4], payload[200];
    const char *params[] = {review_id, movie_id, stars, NULL};
    outbox_event *ev = outbox_event_new();
    outbox_error err;
    uuid_t u;
    int ok;

    uuid_generate_random(u);
    uuid_unparse_lower(u, review_id);
    /* Fifty movies, so the consumers' projection aggregates. */
    snprintf(movie_id, sizeof(movie_id), "00000000-0000-4000-8000-0000000000%02u",
             (unsigned)rand() % 50u);
    snprintf(stars, sizeof(stars), "%d", 1 + rand() % 5);
    snprintf(payload, sizeof(payload), "{\"review_id\":\"%s\",\"stars\":%s}", review_id, stars);
    params[3] = ev != NULL ? outbox_event_id(ev) : NULL;
    ok = ev != NULL && obx_demo_exec_ok(conn, "BEGIN", 0, NULL) &&
         obx_demo_exec_ok(conn,
                          "INSERT INTO demo_reviews (id, movie_id, stars, body, event_id) "
                          "VALUES ($1, $2, $3, 'A fine film.', $4)",
                          4, params) &&
         outbox_event_set_route(ev, "movie", "review.logged", &err) == OUTBOX_OK &&
         outbox_event_set_aggregate_id(ev, movie_id, &err) == OUTBOX_OK &&
         outbox_event_set_payload_json(ev, payload, strlen(payload), &err) == OUTBOX_OK &&
         outbox_writer_enqueue(writer, conn, ev, &err) == OUTBOX_OK &&
         obx_demo_exec_ok(conn, "COMMIT", 0, NULL);
    if (!ok) {
        PQclear(PQexec(conn, "ROLLBACK"));
    }
    outbox_event_free(ev);
    return ok;
}

static void *
writer_main(void *arg)
{
    struct obx_demo_writers *w = arg;
    PGconn *conn = PQconnectdb(w->database_url);
    double start = now_s();

    for (long long i = 0; PQstatus(conn) == CONNECTION_OK; i++) {
        double due = start + (double)i / w->rate_each, wait = due - now_s();

        if (due - start >= w->seconds) {
            break;
        }
        if (wait > 0) {
            struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};

            nanosleep(&ts, NULL);
        }
        if (write_review(w->writer, conn)) {
            atomic_fetch_add(&w->committed, 1);
        } else {
            atomic_fetch_add(&w->failed, 1);
        }
    }
    PQfinish(conn);
    atomic_fetch_add(&w->finished, 1);
    return NULL;
}

struct obx_demo_writers *
obx_demo_writers_start(const char *database_url, const outbox_config *wc, int writers, int rate,
                       double seconds)
{
    struct obx_demo_writers *w = calloc(1, sizeof(*w));
    outbox_error err;

    if (w == NULL) {
        return NULL;
    }
    if (outbox_writer_new(wc, &w->writer, &err) != OUTBOX_OK) {
        fprintf(stderr, "outboxd demo: %s\n", err.message);
        free(w);
        return NULL;
    }
    w->database_url = database_url;
    w->count = writers < MAX_WRITERS ? writers : MAX_WRITERS;
    w->rate_each = (double)rate / w->count;
    w->seconds = seconds;
    for (int i = 0; i < w->count; i++) {
        if (pthread_create(&w->threads[i], NULL, writer_main, w) != 0) {
            w->count = i; /* the writers that did start are the whole set, joined as such */
            break;
        }
    }
    return w;
}

long long
obx_demo_writers_committed(struct obx_demo_writers *w)
{
    return atomic_load(&w->committed);
}

int
obx_demo_writers_done(struct obx_demo_writers *w)
{
    return atomic_load(&w->finished) == w->count;
}

long long
obx_demo_writers_join(struct obx_demo_writers *w)
{
    long long failed;

    for (int i = 0; i < w->count; i++) {
        pthread_join(w->threads[i], NULL);
    }
    failed = atomic_load(&w->failed);
    outbox_writer_free(w->writer);
    free(w);
    return failed;
}
