/* SPDX-License-Identifier: MIT */
/*
 * fleet_window.c - the shared publish window and its deficit round-robin.
 *
 * One mutex guards the window and every share in it. The waiting shares
 * form a ring, head first: the head has the turn. schedule() runs whenever
 * a request arrives or room comes back, and grants from the head on until
 * the head finds no room.
 */
#include "fleet_window.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "common/clock.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { STOP_CHECK_MS = 10 }; /* how soon a waiting relay notices its stop */

struct obx_fleet_share {
    struct obx_fleet_window *w;
    size_t cap;
    size_t in_flight;
    size_t want;    /* > 0 while waiting */
    size_t deficit; /* messages earned in turns; counts only while waiting */
    int topped;     /* the current turn's quantum was added */
    int granted;
    struct obx_fleet_share *next; /* in the ring while waiting */
    pthread_cond_t cond;
    double wait_seconds;
};

struct obx_fleet_window {
    pthread_mutex_t mu;
    size_t capacity, in_flight;
    size_t members, quantum;
    struct obx_fleet_share *head, *tail; /* the waiting ring, in turn order */
    size_t waiting;
    int closed; /* obx_fleet_window_free() was called */
};

struct obx_fleet_window *
obx_fleet_window_new(size_t capacity)
{
    struct obx_fleet_window *w = calloc(1, sizeof(*w));

    if (w == NULL) {
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    w->capacity = capacity > 0 ? capacity : 1;
    w->quantum = w->capacity;
    return w;
}

static void
destroy(struct obx_fleet_window *w)
{
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void
obx_fleet_window_free(struct obx_fleet_window *w)
{
    int last;

    if (w == NULL) {
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->closed = 1;
    last = w->members == 0;
    pthread_mutex_unlock(&w->mu);
    if (last) {
        destroy(w);
    }
}

/* Each member's even part of the window: what a waiting database earns per turn. */
static void
set_quantum(struct obx_fleet_window *w)
{
    w->quantum = w->members > 0 ? w->capacity / w->members : w->capacity;
    if (w->quantum == 0) {
        w->quantum = 1;
    }
}

struct obx_fleet_share *
obx_fleet_window_join(struct obx_fleet_window *w, size_t cap)
{
    struct obx_fleet_share *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        return NULL;
    }
    s->w = w;
    pthread_cond_init(&s->cond, NULL);
    pthread_mutex_lock(&w->mu);
    /* A request larger than the window could never be granted. */
    s->cap = cap == 0 ? 1 : cap > w->capacity ? w->capacity : cap;
    w->members++;
    set_quantum(w);
    pthread_mutex_unlock(&w->mu);
    return s;
}

static void
pop_head(struct obx_fleet_window *w)
{
    struct obx_fleet_share *s = w->head;

    w->head = s->next;
    if (w->head == NULL) {
        w->tail = NULL;
    }
    s->next = NULL;
    w->waiting--;
}

static void
push_tail(struct obx_fleet_window *w, struct obx_fleet_share *s)
{
    s->next = NULL;
    if (w->tail != NULL) {
        w->tail->next = s;
    } else {
        w->head = s;
    }
    w->tail = s;
    w->waiting++;
}

static void
unlink_share(struct obx_fleet_window *w, struct obx_fleet_share *s)
{
    struct obx_fleet_share **at = &w->head, *prev = NULL;

    while (*at != NULL && *at != s) {
        prev = *at;
        at = &(*at)->next;
    }
    if (*at == NULL) {
        return;
    }
    *at = s->next;
    if (w->tail == s) {
        w->tail = prev;
    }
    s->next = NULL;
    w->waiting--;
}

/*
 * Grants in turn order while the head's request fits. A head whose deficit
 * does not yet cover its request goes to the back with what it earned; a
 * head with enough deficit but no room stops the round and keeps its turn.
 * Turns are taken only while there is room: rounds with nothing to hand
 * out would let a lone waiter earn its whole deficit before the others
 * queue behind it. Ends: every pass adds a quantum (>= 1) to a deficit.
 */
static void
schedule(struct obx_fleet_window *w)
{
    while (w->head != NULL && w->in_flight < w->capacity) {
        struct obx_fleet_share *s = w->head;

        if (!s->topped) {
            s->deficit += w->quantum;
            s->topped = 1;
        }
        if (s->deficit < s->want) {
            s->topped = 0;
            pop_head(w);
            push_tail(w, s);
            continue;
        }
        if (w->capacity - w->in_flight < s->want) {
            return;
        }
        pop_head(w);
        w->in_flight += s->want;
        s->in_flight += s->want;
        s->deficit = 0;
        s->topped = 0;
        s->granted = 1;
        pthread_cond_signal(&s->cond);
    }
}

size_t
obx_fleet_share_acquire(struct obx_fleet_share *s, size_t n, atomic_int *stop)
{
    struct obx_fleet_window *w = s->w;
    double started;
    size_t got;

    if (n > s->cap) {
        n = s->cap; /* a member's batch never exceeds its cap; this only keeps the counts whole */
    }
    if (n == 0) {
        return 0;
    }
    pthread_mutex_lock(&w->mu);
    if (w->head == NULL && w->capacity - w->in_flight >= n) {
        w->in_flight += n;
        s->in_flight += n;
        pthread_mutex_unlock(&w->mu);
        return n;
    }
    started = obx_monotonic_seconds();
    s->want = n;
    s->granted = 0;
    push_tail(w, s);
    schedule(w);
    while (!s->granted) {
        struct timespec until;

        if (atomic_load(stop)) {
            unlink_share(w, s);
            s->deficit = 0;
            s->topped = 0;
            schedule(w); /* it may have been the head that held the others back */
            break;
        }
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += STOP_CHECK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cond, &w->mu, &until);
    }
    got = s->granted ? n : 0;
    s->granted = 0;
    s->want = 0;
    s->wait_seconds += obx_monotonic_seconds() - started;
    pthread_mutex_unlock(&w->mu);
    return got;
}

void
obx_fleet_share_release(struct obx_fleet_share *s, size_t n)
{
    struct obx_fleet_window *w = s->w;

    pthread_mutex_lock(&w->mu);
    n = n > s->in_flight ? s->in_flight : n;
    s->in_flight -= n;
    w->in_flight -= n;
    schedule(w);
    pthread_mutex_unlock(&w->mu);
}

void
obx_fleet_share_leave(struct obx_fleet_share *s)
{
    struct obx_fleet_window *w;
    int last;

    if (s == NULL) {
        return;
    }
    w = s->w;
    pthread_mutex_lock(&w->mu);
    unlink_share(w, s); /* never waiting by contract; kept safe anyway */
    w->in_flight -= s->in_flight;
    w->members--;
    set_quantum(w);
    schedule(w);
    last = w->closed && w->members == 0;
    pthread_mutex_unlock(&w->mu);
    pthread_cond_destroy(&s->cond);
    free(s);
    if (last) {
        destroy(w);
    }
}

void
obx_fleet_window_view(struct obx_fleet_window *w, struct obx_fleet_window_view *out)
{
    pthread_mutex_lock(&w->mu);
    *out = (struct obx_fleet_window_view){.capacity = w->capacity,
                                          .in_flight = w->in_flight,
                                          .waiting = w->waiting,
                                          .quantum = w->quantum};
    pthread_mutex_unlock(&w->mu);
}

void
obx_fleet_share_view(struct obx_fleet_share *s, struct obx_fleet_share_view *out)
{
    pthread_mutex_lock(&s->w->mu);
    *out =
        (struct obx_fleet_share_view){.in_flight = s->in_flight, .wait_seconds = s->wait_seconds};
    pthread_mutex_unlock(&s->w->mu);
}
