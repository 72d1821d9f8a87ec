/* SPDX-License-Identifier: MIT */
/*
 * fleet.c - the members kept in step with the fleet file.
 *
 * A reload compares the file with the members by name: a database that
 * left the file is stopped (drained, then its lock released, so another
 * replica may take it at once), a new one is started, and one whose line
 * changed is stopped and started again. Members whose line is unchanged
 * keep running untouched. A file that does not parse changes nothing.
 */
#include "fleet.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "config/config.h"
#include "fleet_member.h"
#include "fleet_window.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

struct obx_fleet {
    struct obx_config base;          /* every setting; fleet_file among them */
    char replica[128];               /* this replica's name: members are replica.NAME */
    struct obx_fleet_list pending;   /* the file as read by obx_fleet_new(), for the first run */
    struct obx_fleet_window *window; /* OUTBOX_MAX_IN_FLIGHT, shared by the members' relays */
    pthread_mutex_t mu;              /* guards members and count */
    struct obx_fleet_member **members;
    size_t count;
    atomic_int stop; /* set from another thread (the daemon's signal loop) */
};

outbox_status
obx_fleet_new(const struct obx_config *base, struct obx_fleet **out, outbox_error *err)
{
    struct obx_fleet *f = calloc(1, sizeof(*f));
    outbox_status st;

    *out = NULL;
    if (f == NULL || obx_config_init(&f->base, OBX_FOR_ALL, err) != OUTBOX_OK) {
        free(f);
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    st = obx_config_copy(&f->base, base, err);
    if (st == OUTBOX_OK) {
        st = obx_fleet_file_load(base->fleet_file, base, &f->pending, err);
    }
    if (st != OUTBOX_OK) {
        obx_config_fini(&f->base);
        free(f);
        return st;
    }
    f->window = obx_fleet_window_new((size_t)base->max_in_flight);
    if (f->window == NULL) {
        obx_fleet_list_fini(&f->pending);
        obx_config_fini(&f->base);
        free(f);
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    obx_config_replica_name(base, f->replica, sizeof(f->replica));
    pthread_mutex_init(&f->mu, NULL);
    *out = f;
    return OUTBOX_OK;
}

static int
listed(const struct obx_fleet_list *list, const struct obx_fleet_member *m)
{
    for (size_t i = 0; i < list->count; i++) {
        if (obx_fleet_member_matches(m, &list->items[i])) {
            return 1;
        }
    }
    return 0;
}

static int
running(struct obx_fleet *f, const struct obx_fleet_entry *e)
{
    for (size_t i = 0; i < f->count; i++) {
        if (obx_fleet_member_matches(f->members[i], e)) {
            return 1;
        }
    }
    return 0;
}

/* Makes the members what `list` says; members that stay keep running. */
static void
apply(struct obx_fleet *f, const struct obx_fleet_list *list)
{
    struct obx_fleet_member **next = calloc(list->count + 1, sizeof(*next));
    struct obx_fleet_member **gone = calloc(f->count + 1, sizeof(*gone));
    size_t kept = 0, dropped = 0, added = 0;

    if (next == NULL || gone == NULL) {
        obx_log(OUTBOX_LOG_ERROR, "fleet reload failed error=\"out of memory\"");
        free(next);
        free(gone);
        return;
    }
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->count; i++) {
        if (listed(list, f->members[i])) {
            next[kept++] = f->members[i];
        } else {
            obx_fleet_member_stop(f->members[i]);
            gone[dropped++] = f->members[i];
        }
    }
    f->count = 0; /* so running() below sees only the kept ones */
    free(f->members);
    f->members = next;
    f->count = kept;
    pthread_mutex_unlock(&f->mu);

    /* Drained outside the lock: /metrics keeps answering meanwhile. */
    for (size_t i = 0; i < dropped; i++) {
        obx_log(OUTBOX_LOG_INFO, "fleet database removed database=%s",
                obx_fleet_member_name(gone[i]));
        obx_fleet_member_free(gone[i]);
    }
    free(gone);

    for (size_t i = 0; i < list->count; i++) {
        struct obx_fleet_member *m = NULL;
        outbox_error err = {0};

        if (running(f, &list->items[i])) {
            continue;
        }
        if (obx_fleet_member_new(&list->items[i], &f->base, f->replica, f->window, &m, &err) !=
                OUTBOX_OK ||
            obx_fleet_member_start(m, &err) != OUTBOX_OK) {
            obx_log(OUTBOX_LOG_ERROR, "fleet database not started database=%s error=\"%s\"",
                    list->items[i].name, err.message);
            obx_fleet_member_free(m);
            continue;
        }
        pthread_mutex_lock(&f->mu);
        f->members[f->count++] = m;
        pthread_mutex_unlock(&f->mu);
        added++;
    }
    obx_log(OUTBOX_LOG_INFO, "fleet members databases=%zu added=%zu removed=%zu", f->count, added,
            dropped);
}

void
obx_fleet_reload(struct obx_fleet *f)
{
    struct obx_fleet_list list;
    outbox_error err = {0};

    if (obx_fleet_file_load(f->base.fleet_file, &f->base, &list, &err) != OUTBOX_OK) {
        obx_log(OUTBOX_LOG_ERROR, "fleet file refused, members unchanged error=\"%s\"",
                err.message);
        return;
    }
    apply(f, &list);
    obx_fleet_list_fini(&list);
}

outbox_status
obx_fleet_run(struct obx_fleet *f)
{
    struct obx_fleet_member **members;
    size_t count;
    sigset_t hup;
    struct timespec tick = {0, 200 * 1000000L};

    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    obx_log(OUTBOX_LOG_INFO, "fleet starting replica=%s file=%s", f->replica, f->base.fleet_file);
    apply(f, &f->pending);
    obx_fleet_list_fini(&f->pending);
    while (!atomic_load(&f->stop)) {
        if (sigtimedwait(&hup, NULL, &tick) == SIGHUP) {
            obx_log(OUTBOX_LOG_INFO, "fleet file re-read signal=SIGHUP file=%s",
                    f->base.fleet_file);
            obx_fleet_reload(f);
        }
    }
    /* Stop every member first, then wait: their drains run side by side. */
    pthread_mutex_lock(&f->mu);
    members = f->members;
    count = f->count;
    f->members = NULL;
    f->count = 0;
    pthread_mutex_unlock(&f->mu);
    for (size_t i = 0; i < count; i++) {
        obx_fleet_member_stop(members[i]);
    }
    for (size_t i = 0; i < count; i++) {
        obx_fleet_member_free(members[i]);
    }
    free(members);
    obx_log(OUTBOX_LOG_INFO, "fleet stopped replica=%s", f->replica);
    return OUTBOX_OK;
}

void
obx_fleet_stop(struct obx_fleet *f)
{
    atomic_store(&f->stop, 1);
}

void
obx_fleet_visit(struct obx_fleet *f, void (*visit)(void *ctx, const struct obx_fleet_view *view),
                void *ctx)
{
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < f->count; i++) {
        obx_fleet_member_visit(f->members[i], visit, ctx);
    }
    pthread_mutex_unlock(&f->mu);
}

void
obx_fleet_counts(struct obx_fleet *f, size_t *members, size_t *owned)
{
    pthread_mutex_lock(&f->mu);
    *members = f->count;
    *owned = 0;
    for (size_t i = 0; i < f->count; i++) {
        *owned += (size_t)obx_fleet_member_owned(f->members[i]);
    }
    pthread_mutex_unlock(&f->mu);
}

void
obx_fleet_window_state(struct obx_fleet *f, size_t *capacity, size_t *in_flight, size_t *waiting)
{
    struct obx_fleet_window_view v;

    obx_fleet_window_view(f->window, &v);
    *capacity = v.capacity;
    *in_flight = v.in_flight;
    *waiting = v.waiting;
}

void
obx_fleet_free(struct obx_fleet *f)
{
    if (f == NULL) {
        return;
    }
    for (size_t i = 0; i < f->count; i++) {
        obx_fleet_member_free(f->members[i]);
    }
    free(f->members);
    obx_fleet_list_fini(&f->pending);
    obx_fleet_window_free(f->window); /* at once, or when an abandoned relay's share leaves */
    obx_config_fini(&f->base);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
