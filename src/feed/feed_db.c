/* SPDX-License-Identifier: MIT */
/*
 * feed_db.c - the DB-only feed (OUTBOX_BUS=db): consumers lease outbox rows
 * themselves, with the relay's lease rules, instead of reading a stream.
 *
 * A batch is one lease. Settling is one obx_store_finish() for the whole
 * lease: ACK and TERM finish the row as done (TERM's dead letter is the
 * consumer's, in dead_letters), NAK releases it with its own delay.
 *
 * A row whose envelope fails the relay's checks is never delivered: the
 * consumer could not route it either. It rides along in the lease and is
 * set invalid, with the reason, by the batch's finish; a lease of nothing
 * but such rows is finished at once and the fetch goes on leasing, so bad
 * rows never hold up the rows behind them.
 */
#include "feed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "envelope/envelope.h"
#include "envelope/subject.h"
#include "store/store.h"
#include "support/log.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* The relay's crash-loop quarantine: a row whose lease runs out this often goes dead. */
#define MAX_LEASE_EXPIRIES 5
/* No broker limits the size here; the writer's largest max_envelope_bytes does. */
#define MAX_ENVELOPE_BYTES ((size_t)64 * 1024 * 1024)
#define MAX_LEASE_ROWS     10000

struct db_feed {
    struct obx_store *store;
    char *prefix;
    char *name;
    int lease_seconds;
    int prune;
    int broken; /* the store lost its connection: reconnect before the next call */
};

/* Per lease row unless said otherwise. */
struct db_batch {
    struct obx_lease lease;
    size_t *row_of; /* per message: its lease row */
    char (*subjects)[OBX_SUBJECT_CAP];
    char **invalid;                 /* owned reason, or NULL for a delivered row */
    enum obx_row_outcome *outcomes; /* filled by settle */
    long long *delays_ms;           /* filled by settle */
};

/* Remembers a lost connection, so the next call reconnects first. */
static outbox_status
note(struct db_feed *f, outbox_status st)
{
    if (st == OUTBOX_EUNAVAILABLE) {
        f->broken = 1;
    }
    return st;
}

static outbox_status
ensure_connected(struct db_feed *f, outbox_error *err)
{
    if (!f->broken) {
        return OUTBOX_OK;
    }
    if (obx_store_reconnect(f->store, err) != OUTBOX_OK) {
        return err->code;
    }
    f->broken = 0;
    return OUTBOX_OK;
}

static void
batch_free(struct db_batch *b)
{
    if (b == NULL) {
        return;
    }
    for (size_t i = 0; b->invalid != NULL && i < b->lease.count; i++) {
        free(b->invalid[i]);
    }
    free(b->invalid);
    free(b->row_of);
    free(b->subjects);
    free(b->outcomes);
    free(b->delays_ms);
    obx_lease_fini(&b->lease);
    free(b);
}

static outbox_status
batch_alloc(struct db_batch *b, struct obx_feed_msg **msgs, outbox_error *err)
{
    size_t n = b->lease.count;

    b->row_of = calloc(n, sizeof(*b->row_of));
    b->subjects = calloc(n, sizeof(*b->subjects));
    b->invalid = calloc(n, sizeof(*b->invalid));
    b->outcomes = calloc(n, sizeof(*b->outcomes));
    b->delays_ms = calloc(n, sizeof(*b->delays_ms));
    *msgs = calloc(n, sizeof(**msgs));
    if (!b->row_of || !b->subjects || !b->invalid || !b->outcomes || !b->delays_ms || !*msgs) {
        return obx_fail(err, OUTBOX_ENOMEM, "db feed: out of memory for a batch");
    }
    return OUTBOX_OK;
}

/* The relay's checks: a v1 envelope, its id the row's, a routable subject. NULL: valid. */
static char *
check_row(struct db_feed *f, struct db_batch *b, size_t i)
{
    struct obx_envelope env;
    struct obx_envelope_row columns;
    outbox_error e = {0};
    size_t len = 0;
    const char *json = obx_lease_envelope(&b->lease, i, &len);
    char *reason = NULL;

    if (obx_envelope_parse(json, len, MAX_ENVELOPE_BYTES, &env, &e) != OUTBOX_OK) {
        return strdup(e.message);
    }
    obx_lease_row(&b->lease, i, &columns);
    if (strcmp(env.head.id, obx_lease_id(&b->lease, i)) != 0) {
        reason = strdup("envelope id differs from the row id");
    } else if (obx_envelope_match_row(&env.head, &columns, &e) != OUTBOX_OK) {
        reason = strdup(e.message);
    } else if (obx_subject_build(f->prefix, env.head.aggregate_type, env.head.event_type,
                                 b->subjects[i], &e) != OUTBOX_OK) {
        reason = strdup(e.message);
    }
    obx_envelope_fini(&env);
    return reason;
}

/* Splits the lease into messages to deliver and invalid rows to quarantine. */
static outbox_status
batch_fill(struct db_feed *f, struct db_batch *b, struct obx_feed_batch *out, outbox_error *err)
{
    struct obx_feed_msg *msgs = NULL;
    size_t k = 0;
    outbox_status st = batch_alloc(b, &msgs, err);

    for (size_t i = 0; st == OUTBOX_OK && i < b->lease.count; i++) {
        b->invalid[i] = check_row(f, b, i);
        if (b->invalid[i] != NULL) {
            b->outcomes[i] = OBX_ROW_INVALID;
            continue;
        }
        b->row_of[k] = i;
        msgs[k].event_id = obx_lease_id(&b->lease, i);
        msgs[k].subject = b->subjects[i];
        msgs[k].envelope = obx_lease_envelope(&b->lease, i, &msgs[k].envelope_len);
        msgs[k].deliveries = 1 + (long long)obx_lease_expiries(&b->lease, i);
        k++;
    }
    if (st != OUTBOX_OK) {
        free(msgs);
        return st;
    }
    out->count = k;
    out->msgs = msgs;
    out->impl = b;
    return OUTBOX_OK;
}

static void
log_finish(struct db_feed *f, const struct db_batch *b, const struct obx_finish_counts *c)
{
    for (size_t i = 0; i < b->lease.count; i++) {
        if (b->invalid[i] != NULL) {
            obx_log(OUTBOX_LOG_WARN, "row quarantined as invalid feed=%s event_id=%s reason=\"%s\"",
                    f->name, obx_lease_id(&b->lease, i), b->invalid[i]);
        }
    }
    if (c->lost > 0) {
        obx_log(OUTBOX_LOG_WARN, "lease lost before settle feed=%s rows=%zu", f->name, c->lost);
    }
}

/* One finish for the whole lease; after a lost connection, reconnects and tries once more. */
static outbox_status
finish(struct db_feed *f, struct db_batch *b, outbox_error *err)
{
    struct obx_finish_options fo = {
        .mode = f->prune ? OBX_FINISH_PRUNE : OBX_FINISH_MARK,
        .max_attempts = 1, /* no RETRY outcomes here: attempts are the ledger's */
        .release_delays_ms = b->delays_ms,
    };
    struct obx_finish_counts counts = {0};
    outbox_status st = ensure_connected(f, err);

    if (st == OUTBOX_OK) {
        st = note(f, obx_store_finish(f->store, &b->lease, b->outcomes,
                                      (const char *const *)b->invalid, &fo, &counts, err));
    }
    if (st == OUTBOX_EUNAVAILABLE && ensure_connected(f, err) == OUTBOX_OK) {
        st = note(f, obx_store_finish(f->store, &b->lease, b->outcomes,
                                      (const char *const *)b->invalid, &fo, &counts, err));
    }
    if (st == OUTBOX_OK) {
        log_finish(f, b, &counts);
    }
    return st;
}

/* Leases once. An empty batch with *leased set means only invalid rows came (finished). */
static outbox_status
lease_once(struct db_feed *f, int limit, struct obx_feed_batch *out, int *leased, outbox_error *err)
{
    struct db_batch *b = calloc(1, sizeof(*b));
    outbox_status st;

    *leased = 0;
    if (b == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "db feed: out of memory for a batch");
    }
    st = obx_store_lease(f->store, limit, f->lease_seconds, MAX_LEASE_EXPIRIES, &b->lease, err);
    st = note(f, st);
    if (st == OUTBOX_OK && b->lease.count > 0) {
        *leased = 1;
        st = batch_fill(f, b, out, err);
        if (st == OUTBOX_OK && out->count > 0) {
            return OUTBOX_OK; /* the batch owns b now */
        }
        if (st == OUTBOX_OK) {
            st = finish(f, b, err);
        }
        free(out->msgs);
        memset(out, 0, sizeof(*out));
    }
    batch_free(b);
    return st;
}

static outbox_status
db_fetch(struct obx_feed *feed, size_t max, int timeout_ms, struct obx_feed_batch *out,
         outbox_error *err)
{
    struct db_feed *f = feed->impl;
    long long deadline_ms = obx_monotonic_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    int limit = max > MAX_LEASE_ROWS ? MAX_LEASE_ROWS : (int)max;
    outbox_status st;

    obx_error_reset(err);
    memset(out, 0, sizeof(*out));
    if (max == 0) {
        return OUTBOX_OK;
    }
    st = ensure_connected(f, err);
    for (;;) {
        int leased = 0, woken = 0;
        long long left_ms;

        if (st == OUTBOX_OK) {
            st = lease_once(f, limit, out, &leased, err);
        }
        if (st != OUTBOX_OK || out->count > 0) {
            return st;
        }
        if (leased) {
            continue; /* only invalid rows came: the rows behind them may be due */
        }
        left_ms = deadline_ms - obx_monotonic_ms();
        if (left_ms <= 0) {
            return OUTBOX_OK;
        }
        /* Woken or not, lease again: rows released with a delay notify nobody. */
        st = note(f, obx_store_wait(f->store, (int)left_ms, &woken, err));
    }
}

static outbox_status
db_in_progress(struct obx_feed *feed, struct obx_feed_batch *batch, size_t i, outbox_error *err)
{
    struct db_feed *f = feed->impl;
    struct db_batch *b = batch->impl;
    outbox_status st;

    obx_error_reset(err);
    if (i >= batch->count) {
        return obx_fail(err, OUTBOX_EINVAL, "in_progress: message %zu of %zu", i, batch->count);
    }
    st = ensure_connected(f, err);
    if (st != OUTBOX_OK) {
        return st;
    }
    return note(f, obx_store_extend(f->store, &b->lease, b->row_of[i], f->lease_seconds, err));
}

static outbox_status
db_settle(struct obx_feed *feed, struct obx_feed_batch *batch, const enum obx_settle *what,
          const long long *delay_ms, outbox_error *err)
{
    struct db_batch *b = batch->impl;

    obx_error_reset(err);
    if (b == NULL) {
        return OUTBOX_OK;
    }
    if (what == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "settle: no outcome for %zu messages", batch->count);
    }
    for (size_t k = 0; k < batch->count; k++) {
        size_t i = b->row_of[k];

        b->outcomes[i] = what[k] == OBX_SETTLE_NAK ? OBX_ROW_RELEASE : OBX_ROW_DONE;
        b->delays_ms[i] = what[k] == OBX_SETTLE_NAK && delay_ms != NULL ? delay_ms[k] : 0;
    }
    return finish(feed->impl, b, err);
}

static void
db_batch_fini(struct obx_feed *feed, struct obx_feed_batch *batch)
{
    (void)feed;
    if (batch == NULL) {
        return;
    }
    batch_free(batch->impl);
    free(batch->msgs);
    memset(batch, 0, sizeof(*batch));
}

static void
db_close(struct obx_feed *feed)
{
    struct db_feed *f;

    if (feed == NULL) {
        return;
    }
    f = feed->impl;
    if (f != NULL) {
        obx_store_close(f->store);
        free(f->prefix);
        free(f->name);
        free(f);
    }
    free(feed);
}

static const struct obx_feed_ops db_ops = {
    .fetch = db_fetch,
    .in_progress = db_in_progress,
    .settle = db_settle,
    .batch_fini = db_batch_fini,
    .close = db_close,
};

static outbox_status
check_options(const struct obx_feed_options *o, outbox_error *err)
{
    if (o->database_url == NULL || o->database_url[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "db feed: database_url is required");
    }
    if (o->lease_seconds < 1 || o->lease_seconds > 3600) {
        return obx_fail(err, OUTBOX_EINVAL, "db feed: lease_seconds %d is outside 1 to 3600",
                        o->lease_seconds);
    }
    return obx_subject_prefix_check(o->subject_prefix, err);
}

outbox_status
obx_feed_db_open(const struct obx_feed_options *opts, struct obx_feed **out, outbox_error *err)
{
    struct obx_store_options so = {
        .conninfo = opts->database_url,
        .schema = opts->schema != NULL ? opts->schema : "outbox",
        .application_name = "outboxd-consumer",
    };
    struct obx_feed *feed;
    struct db_feed *f;
    outbox_status st;

    obx_error_reset(err);
    st = check_options(opts, err);
    if (st != OUTBOX_OK) {
        return st;
    }
    feed = obx_feed_alloc(&db_ops, sizeof(*f));
    if (feed == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "db feed: out of memory");
    }
    f = feed->impl;
    f->lease_seconds = opts->lease_seconds;
    feed->held_seconds = opts->lease_seconds;
    f->prune = opts->prune;
    f->prefix = strdup(opts->subject_prefix);
    f->name = strdup(opts->name != NULL ? opts->name : "-");
    if (f->prefix == NULL || f->name == NULL) {
        st = obx_fail(err, OUTBOX_ENOMEM, "db feed: out of memory");
    }
    if (st == OUTBOX_OK) {
        st = obx_store_open(&so, &f->store, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_store_listen(f->store, err);
    }
    if (st != OUTBOX_OK) {
        db_close(feed);
        return st;
    }
    *out = feed;
    return OUTBOX_OK;
}
