/* SPDX-License-Identifier: MIT */
/*
 * chaos.h - what the fault tests of relays and consumers share: a fresh
 * database per test, a random seed logged so a failure can be replayed,
 * random pauses, writers, replica names and terminated backends.
 */
#ifndef OBX_TEST_CHAOS_H
#define OBX_TEST_CHAOS_H

#include <libpq-fe.h>

#include "writer_thread.h"

struct harness_proc;

/*
 * Connects to a fresh database prepared by `prepare` and seeds the random
 * pauses. `exclusive`: the test stops servers, so it needs them to itself.
 */
PGconn *chaos_begin(void (*prepare)(PGconn *conn), int exclusive); /* prepare may be NULL */
void chaos_end(PGconn **conn);

/* 1 when the test runs in its long form (OUTBOX_TEST_SOAK=1, ctest label soak). */
int chaos_soak(void);

/* A random number of milliseconds in [lo, hi], from the logged seed. */
int chaos_random_ms(int lo, int hi);

/* Starts a writer committing `events` in transactions of `per_txn`, `pause_ms` apart. */
void chaos_start_writer(struct writer_thread *w, int events, int per_txn, int pause_ms);

/* "chaos-<index+1>.<generation>": a replica's name, new for each restart. */
void chaos_replica_name(char *out, size_t cap, int index, int generation);

/*
 * The index of one of the `n` relays that holds leased rows, found by its
 * lease token in the logs; watched for up to a second (writers commit in
 * bursts), else a random one. So a kill or a stop lands mid-batch.
 */
int chaos_busy_relay(PGconn *conn, struct harness_proc *relays, int n);

/* Terminates one random client session of `conn`'s database (not `conn`'s); 1 if it did. */
long long chaos_terminate_a_backend(PGconn *conn);

#endif
