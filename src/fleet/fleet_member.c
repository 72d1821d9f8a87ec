/* SPDX-License-Identifier: MIT */
/*
 * fleet_member.c - one database's owner thread and relay thread.
 */
#include "fleet_member.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "config/config.h"
#include "fleet_lock.h"
#include "fleet_window.h"
#include "relay/relay_gate.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { CHECK_MS = 250 }; /* how soon a lost lock stops the relay */

static __thread const char *thread_database;

const char *
obx_fleet_thread_database(void)
{
    return thread_database;
}

struct obx_fleet_member {
    struct obx_fleet_entry entry;  /* owned copy */
    outbox_config *cfg;            /* the relay's configuration for this database */
    struct obx_fleet_share *share; /* its place in the replica's publish window */
    char lock_app[192];            /* application_name of the lock's session */
    long long try_ms;
    int drain_timeout_seconds;
    unsigned seed; /* jitter of the try interval, so replicas do not try in step */

    pthread_t owner_thread;
    int owner_started;

    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cond;
    int stop;
    int owned;
    outbox_relay *relay; /* while owned */
    int relay_done;      /* the relay thread returned */
    int abandoned;       /* a relay thread outlived its drain: it still uses the member */
    unsigned long long takeovers;
};

static void
copy_entry(struct obx_fleet_entry *dst, const struct obx_fleet_entry *src, outbox_error *err,
           outbox_status *st)
{
    *dst = *src;
    dst->database_url = strdup(src->database_url);
    dst->schema = strdup(src->schema);
    dst->stream = strdup(src->stream);
    dst->subject_prefix = strdup(src->subject_prefix);
    if (!dst->database_url || !dst->schema || !dst->stream || !dst->subject_prefix) {
        *st = obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
}

/*
 * The relay settings of this database: the base ones with the line's values,
 * and its bus window and batch within its cap in the replica's window.
 */
static outbox_status
member_config(struct obx_fleet_member *m, const struct obx_config *base, const char *replica,
              long long cap, outbox_error *err)
{
    struct obx_config *v;
    char name[160];
    outbox_status st;

    m->cfg = outbox_config_new(OUTBOX_CONFIG_RELAY);
    if (m->cfg == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    v = &m->cfg->values;
    snprintf(name, sizeof(name), "%s.%s", replica, m->entry.name);
    st = obx_config_copy(v, base, err);
    if (st == OUTBOX_OK) {
        st = obx_config_set_key(v, "database_url", m->entry.database_url, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_config_set_key(v, "schema", m->entry.schema, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_config_set_key(v, "stream", m->entry.stream, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_config_set_key(v, "subject_prefix", m->entry.subject_prefix, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_config_set_key(v, "name", name, err);
    }
    /*
     * Unset, a database's batch stays at 100 (not a lone relay's 500): with
     * the defaults ten databases each have a whole batch in the shared
     * window at once (docs/relays.md). A batch is granted whole
     * (fleet_window.c), so none may exceed the cap.
     */
    v->max_in_flight = cap;
    if (v->batch_size == 0) {
        v->batch_size = OBX_FLEET_BATCH_DEFAULT;
    }
    if (v->batch_size > cap) {
        v->batch_size = cap;
    }
    snprintf(m->lock_app, sizeof(m->lock_app), "%s fleet-lock", name);
    return st;
}

/* The shared window's gate, as the relay calls it. */
static size_t
gate_acquire(void *ctx, size_t n, atomic_int *stop)
{
    return obx_fleet_share_acquire(ctx, n, stop);
}

static void
gate_release(void *ctx, size_t n)
{
    obx_fleet_share_release(ctx, n);
}

outbox_status
obx_fleet_member_new(const struct obx_fleet_entry *entry, const struct obx_config *base,
                     const char *replica, struct obx_fleet_window *window,
                     struct obx_fleet_member **out, outbox_error *err)
{
    struct obx_fleet_member *m = calloc(1, sizeof(*m));
    outbox_status st = OUTBOX_OK;
    /* Both settings are at least 1, so the cap is too. */
    long long cap = base->fleet_database_in_flight < base->max_in_flight
                        ? base->fleet_database_in_flight
                        : base->max_in_flight;

    *out = NULL;
    if (m == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    copy_entry(&m->entry, entry, err, &st);
    if (st == OUTBOX_OK) {
        st = member_config(m, base, replica, cap, err);
    }
    if (st == OUTBOX_OK) {
        m->share = obx_fleet_window_join(window, (size_t)cap);
        if (m->share == NULL) {
            st = obx_fail(err, OUTBOX_ENOMEM, "out of memory");
        }
    }
    m->try_ms = base->fleet_try_ms;
    m->drain_timeout_seconds = (int)base->drain_timeout_seconds;
    m->seed = (unsigned)getpid() ^ (unsigned)entry->line * 2654435761u;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cond, NULL);
    if (st != OUTBOX_OK) {
        obx_fleet_member_free(m);
        return st;
    }
    *out = m;
    return OUTBOX_OK;
}

/* Sleeps up to `ms` or until stopped; returns the stop flag. Holds `mu` on entry and exit. */
static int
wait_locked(struct obx_fleet_member *m, long long ms)
{
    struct timespec deadline;

    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    while (!m->stop && !(m->relay != NULL && m->relay_done)) {
        if (pthread_cond_timedwait(&m->cond, &m->mu, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    return m->stop;
}

static int
wait_ms(struct obx_fleet_member *m, long long ms)
{
    int stop;

    pthread_mutex_lock(&m->mu);
    stop = wait_locked(m, ms);
    pthread_mutex_unlock(&m->mu);
    return stop;
}

static void *
relay_main(void *arg)
{
    struct obx_fleet_member *m = arg;
    outbox_error err = {0};
    outbox_relay *relay;

    thread_database = m->entry.name;
    pthread_mutex_lock(&m->mu);
    relay = m->relay;
    pthread_mutex_unlock(&m->mu);
    if (outbox_relay_run(relay, &err) != OUTBOX_OK) {
        obx_log(OUTBOX_LOG_ERROR, "fleet relay failed database=%s error=\"%s\"", m->entry.name,
                err.message);
    }
    pthread_mutex_lock(&m->mu);
    m->relay_done = 1;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* Waits up to the drain timeout for the relay thread; 1 if it returned. */
static int
wait_relay_done(struct obx_fleet_member *m)
{
    long long waited = 0, limit = (long long)m->drain_timeout_seconds * 1000;
    int done;

    pthread_mutex_lock(&m->mu);
    while (!m->relay_done && waited < limit) {
        struct timespec t = {0, 50 * 1000000L};

        pthread_mutex_unlock(&m->mu);
        nanosleep(&t, NULL);
        waited += 50;
        pthread_mutex_lock(&m->mu);
    }
    done = m->relay_done;
    pthread_mutex_unlock(&m->mu);
    return done;
}

/* Owns the database: runs its relay until the lock is lost, the relay ends or a stop. */
static void
serve(struct obx_fleet_member *m, struct obx_fleet_lock *lock)
{
    outbox_error err = {0};
    outbox_relay *relay = NULL;
    pthread_t thread;
    const char *why = "stop";

    if (outbox_relay_new(m->cfg, &relay, &err) != OUTBOX_OK) {
        obx_log(OUTBOX_LOG_ERROR, "fleet relay refused database=%s error=\"%s\"", m->entry.name,
                err.message);
        wait_ms(m, m->try_ms);
        return;
    }
    obx_relay_set_gate(relay, &(struct obx_relay_gate){.acquire = gate_acquire,
                                                       .release = gate_release,
                                                       .ctx = m->share});
    pthread_mutex_lock(&m->mu);
    m->relay = relay;
    m->relay_done = 0;
    m->owned = 1;
    m->takeovers++;
    pthread_mutex_unlock(&m->mu);
    if (pthread_create(&thread, NULL, relay_main, m) != 0) {
        obx_log(OUTBOX_LOG_ERROR, "cannot start fleet relay thread database=%s", m->entry.name);
        pthread_mutex_lock(&m->mu);
        m->relay_done = 1;
        pthread_mutex_unlock(&m->mu);
    } else {
        obx_log(OUTBOX_LOG_INFO, "fleet database owned database=%s schema=%s stream=%s",
                m->entry.name, m->entry.schema, m->entry.stream);
        for (;;) {
            int stop, done;

            pthread_mutex_lock(&m->mu);
            stop = wait_locked(m, CHECK_MS);
            done = m->relay_done;
            pthread_mutex_unlock(&m->mu);
            if (stop || done) {
                why = stop ? "stop" : "relay ended";
                break;
            }
            if (obx_fleet_lock_check(lock, &err) != OUTBOX_OK) {
                why = "lock lost";
                break;
            }
        }
        if (strcmp(why, "lock lost") == 0) {
            obx_log(OUTBOX_LOG_WARN, "fleet database released database=%s reason=%s error=%s",
                    m->entry.name, why, err.message);
        } else {
            obx_log(strcmp(why, "stop") == 0 ? OUTBOX_LOG_INFO : OUTBOX_LOG_WARN,
                    "fleet database released database=%s reason=%s", m->entry.name, why);
        }
        outbox_relay_stop(relay);
        if (!wait_relay_done(m)) {
            /* Abandoned like a daemon's worker at the drain timeout: its row leases
             * expire and the next owner takes them over. */
            obx_log(OUTBOX_LOG_WARN, "fleet relay drain timeout exceeded database=%s",
                    m->entry.name);
            pthread_detach(thread);
            relay = NULL; /* still in use by its thread, and so is the member */
            pthread_mutex_lock(&m->mu);
            m->abandoned = 1;
            pthread_mutex_unlock(&m->mu);
        } else {
            pthread_join(thread, NULL);
        }
    }
    pthread_mutex_lock(&m->mu);
    m->relay = NULL;
    m->owned = 0;
    m->relay_done = 0; /* so the waits before the next try wait */
    pthread_mutex_unlock(&m->mu);
    outbox_relay_free(relay);
}

static void *
owner_main(void *arg)
{
    struct obx_fleet_member *m = arg;
    int was_unavailable = 0;

    thread_database = m->entry.name;
    for (;;) {
        outbox_error err = {0};
        struct obx_fleet_lock *lock = NULL;
        outbox_status st =
            obx_fleet_lock_take(m->entry.database_url, m->lock_app, m->entry.schema, &lock, &err);
        long long jitter = m->try_ms / 5 > 0 ? rand_r(&m->seed) % (m->try_ms / 5) : 0;

        if (st != OUTBOX_OK) {
            if (!was_unavailable) {
                obx_log(OUTBOX_LOG_WARN, "fleet database unavailable database=%s error=\"%s\"",
                        m->entry.name, err.message);
            }
            was_unavailable = 1;
        } else if (lock != NULL) {
            was_unavailable = 0;
            serve(m, lock);
            obx_fleet_lock_release(lock);
        } else {
            was_unavailable = 0;
        }
        if (wait_ms(m, m->try_ms + jitter)) {
            break;
        }
    }
    return NULL;
}

outbox_status
obx_fleet_member_start(struct obx_fleet_member *m, outbox_error *err)
{
    if (pthread_create(&m->owner_thread, NULL, owner_main, m) != 0) {
        return obx_fail(err, OUTBOX_ENOMEM, "cannot start the thread of database %s",
                        m->entry.name);
    }
    m->owner_started = 1;
    return OUTBOX_OK;
}

void
obx_fleet_member_stop(struct obx_fleet_member *m)
{
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->mu);
}

void
obx_fleet_member_free(struct obx_fleet_member *m)
{
    if (m == NULL) {
        return;
    }
    if (m->owner_started) {
        obx_fleet_member_stop(m);
        pthread_join(m->owner_thread, NULL);
    }
    if (m->abandoned) {
        return; /* its relay thread may still touch it (and its share) until the process exits */
    }
    obx_fleet_share_leave(m->share);
    outbox_config_free(m->cfg);
    free(m->entry.database_url);
    free(m->entry.schema);
    free(m->entry.stream);
    free(m->entry.subject_prefix);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int
same(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

int
obx_fleet_member_matches(const struct obx_fleet_member *m, const struct obx_fleet_entry *e)
{
    return same(m->entry.name, e->name) && same(m->entry.database_url, e->database_url) &&
           same(m->entry.schema, e->schema) && same(m->entry.stream, e->stream) &&
           same(m->entry.subject_prefix, e->subject_prefix);
}

const char *
obx_fleet_member_name(const struct obx_fleet_member *m)
{
    return m->entry.name;
}

void
obx_fleet_member_visit(struct obx_fleet_member *m,
                       void (*visit)(void *ctx, const struct obx_fleet_view *view), void *ctx)
{
    struct obx_fleet_view view;
    struct obx_fleet_share_view share;

    obx_fleet_share_view(m->share, &share);
    pthread_mutex_lock(&m->mu);
    view = (struct obx_fleet_view){.name = m->entry.name,
                                   .owned = m->owned,
                                   .relay = m->relay,
                                   .takeovers = m->takeovers,
                                   .window_wait_seconds = share.wait_seconds};
    visit(ctx, &view);
    pthread_mutex_unlock(&m->mu);
}

int
obx_fleet_member_owned(struct obx_fleet_member *m)
{
    int owned;

    pthread_mutex_lock(&m->mu);
    owned = m->owned;
    pthread_mutex_unlock(&m->mu);
    return owned;
}
