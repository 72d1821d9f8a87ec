/* SPDX-License-Identifier: MIT */
/*
 * store_helpers.h - small steps the store tests share: a store on this
 * test's fresh database, sample events from the SQL writer, counts.
 * Header-only (static inline) so each test binary stays one file.
 */
#ifndef OBX_TEST_STORE_HELPERS_H
#define OBX_TEST_STORE_HELPERS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "store/store.h"
#include "support/backoff.h"

/* A store on the database harness_pg_connect_fresh() made for this test. */
static inline struct obx_store *
helper_store_open(const char *application_name)
{
    struct obx_store_options opts = {
        .conninfo = harness_db_url(),
        .schema = "outbox",
        .application_name = application_name,
    };
    struct obx_store *store = NULL;
    outbox_error err;
    outbox_status status = obx_store_open(&opts, &store, &err);

    cr_assert_eq(status, OUTBOX_OK, "obx_store_open: %s: %s", outbox_status_name(status),
                 err.message);
    return store;
}

/* A store suite's tear-down: its store from helper_store_open(), then its connection. */
static inline void
helper_store_suite_end(PGconn **conn, struct obx_store **store)
{
    obx_store_close(*store);
    *store = NULL;
    PQfinish(*conn);
    *conn = NULL;
}

/* Another connection to this test's database; the caller PQfinish()es it. */
static inline PGconn *
helper_connect(void)
{
    PGconn *c = PQconnectdb(harness_db_url());

    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect: %s", PQerrorMessage(c));
    return c;
}

/* Inserts `n` sample events through outbox.enqueue(), in one transaction. */
static inline void
helper_enqueue(PGconn *conn, int n)
{
    char sql[256];

    snprintf(sql, sizeof(sql),
             "SELECT count(outbox.enqueue('movie', gen_random_uuid(), 'review.logged', "
             "'{\"n\":1}')) FROM generate_series(1, %d)",
             n);
    cr_assert_eq(harness_scalar_ll(conn, sql), n);
}

/* SELECT count(*) FROM outbox.events WHERE <where>. */
static inline long long
helper_count(PGconn *conn, const char *where)
{
    char sql[512];

    snprintf(sql, sizeof(sql), "SELECT count(*) FROM outbox.events WHERE %s", where);
    return harness_scalar_ll(conn, sql);
}

/* Leases and asserts the call succeeded. */
static inline void
helper_lease(struct obx_store *store, int limit, int lease_seconds, struct obx_lease *lease)
{
    outbox_error err;
    outbox_status status = obx_store_lease(store, limit, lease_seconds, 5, lease, &err);

    cr_assert_eq(status, OUTBOX_OK, "obx_store_lease: %s: %s", outbox_status_name(status),
                 err.message);
}

/* 1 if `id` is one of the lease's rows. */
static inline int
helper_lease_has(const struct obx_lease *lease, const char *id)
{
    for (size_t i = 0; i < lease->count; i++) {
        if (strcmp(obx_lease_id(lease, i), id) == 0) {
            return 1;
        }
    }
    return 0;
}

/*
 * Claims as a relay does, each claim writing the floor (relay_floor), until
 * the floor has passed every published row; fails after about 5 s. Every
 * claim that empties its window starts the next one, and the floor follows
 * the window's snapshot xmin, which any transaction of the cluster open
 * when the window began holds back (another test's, run alongside). The
 * claims may take rows: they stay claimed, open.
 */
static inline void
helper_floor_past_published(PGconn *conn, struct obx_store *store)
{
    static const char published_above[] = "published_at IS NOT NULL "
                                          "AND tx >= (SELECT tx FROM outbox.relay_floor)";
    struct obx_lease lease;

    for (int i = 0; i < 100 && helper_count(conn, published_above) > 0; i++) {
        harness_exec(conn,
                     "UPDATE outbox.relay_floor SET written_at = now() - interval '1 minute'");
        helper_lease(store, 100, 60, &lease);
        obx_lease_fini(&lease);
        harness_sleep_ms(50);
    }
    cr_assert_eq(helper_count(conn, published_above), 0,
                 "the floor never passed the published rows: a relay that lost its cursor "
                 "would read them again");
}

/* Finish options with a 1 s backoff base, so tests read delays in seconds. */
static inline struct obx_finish_options
helper_finish_options(enum obx_finish_mode mode, int max_attempts)
{
    struct obx_finish_options opts = {
        .mode = mode,
        .max_attempts = max_attempts,
        .release_delay_ms = 1500,
        .backoff_base_ms = 1000,
        .backoff_cap_ms = OBX_BACKOFF_CAP_MS,
    };

    return opts;
}

/* Finishes every row of `lease` with the same outcome and reason. */
static inline struct obx_finish_counts
helper_finish_all(struct obx_store *store, const struct obx_lease *lease,
                  enum obx_row_outcome outcome, const char *reason,
                  const struct obx_finish_options *opts)
{
    enum obx_row_outcome *outcomes = calloc(lease->count + 1, sizeof(*outcomes));
    const char **reasons = calloc(lease->count + 1, sizeof(*reasons));
    struct obx_finish_counts counts = {0};
    outbox_error err;
    outbox_status status;

    cr_assert(outcomes != NULL && reasons != NULL);
    for (size_t i = 0; i < lease->count; i++) {
        outcomes[i] = outcome;
        reasons[i] = reason;
    }
    status = obx_store_finish(store, lease, outcomes, reasons, opts, &counts, &err);
    free(outcomes);
    free(reasons);
    cr_assert_eq(status, OUTBOX_OK, "obx_store_finish: %s: %s", outbox_status_name(status),
                 err.message);
    return counts;
}

#endif
