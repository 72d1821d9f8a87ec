/* SPDX-License-Identifier: MIT */
/*
 * chaos.c - the fault tests' shared plumbing (see chaos.h), on the harness's servers.
 */
#include "chaos.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static unsigned int seed;

PGconn *
chaos_begin(void (*prepare)(PGconn *conn), int exclusive)
{
    PGconn *conn;

    if (exclusive) {
        harness_servers_exclusive(); /* before connecting: these tests stop servers */
    }
    conn = harness_pg_connect_fresh();
    if (prepare != NULL) {
        prepare(conn);
    }
    seed = (unsigned int)time(NULL) ^ (unsigned int)harness_now_ms();
    cr_log_info("random seed %u", seed);
    return conn;
}

void
chaos_end(PGconn **conn)
{
    PQfinish(*conn);
    *conn = NULL;
}

int
chaos_soak(void)
{
    const char *v = getenv("OUTBOX_TEST_SOAK");

    return v != NULL && strcmp(v, "1") == 0;
}

int
chaos_random_ms(int lo, int hi)
{
    return lo + (int)(rand_r(&seed) % (unsigned int)(hi - lo + 1));
}

void
chaos_start_writer(struct writer_thread *w, int events, int per_txn, int pause_ms)
{
    *w = (struct writer_thread){
        .url = harness_db_url(), .target = events, .per_txn = per_txn, .pause_ms = pause_ms};
    cr_assert_eq(writer_thread_start(w), 0);
}

void
chaos_replica_name(char *out, size_t cap, int index, int generation)
{
    snprintf(out, cap, "chaos-%d.%d", index + 1, generation);
}

int
chaos_busy_relay(PGconn *conn, struct harness_proc *relays, int n)
{
    long long deadline = harness_now_ms() + 1000;

    while (harness_now_ms() < deadline) {
        /* A window claim's token (relay_claims), else a row lease's: each relay logs it. */
        char *token = harness_scalar_text(
            conn, "SELECT coalesce((SELECT max(token::text) FROM outbox.relay_claims), "
                  "(SELECT max(lease_token::text) FROM outbox.events WHERE status = 'leased'))");

        for (int i = 0; token != NULL && i < n; i++) {
            if (harness_proc_log_contains(&relays[i], token)) {
                free(token);
                return i;
            }
        }
        free(token);
        harness_sleep_ms(2);
    }
    return chaos_random_ms(0, n - 1);
}

long long
chaos_terminate_a_backend(PGconn *conn)
{
    return harness_scalar_ll(conn,
                             "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) AS t "
                             "FROM pg_stat_activity WHERE datname = current_database() "
                             "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
                             "ORDER BY random() LIMIT 1) AS k WHERE t");
}
