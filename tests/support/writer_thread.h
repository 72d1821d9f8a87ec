/* SPDX-License-Identifier: MIT */
/*
 * writer_thread.h - a business writer on its own thread (FAULTS.md §1
 * "wgen"): each transaction commits events through outbox.enqueue() and
 * records their ids in the `committed` table, in the same transaction, so
 * the database alone says what was committed, also when a commit's answer
 * was lost to an outage. It rides out outages by reconnecting.
 *
 * The thread never touches Criterion: the test reads the counters and
 * asserts on its own thread.
 */
#ifndef OBX_TEST_WRITER_THREAD_H
#define OBX_TEST_WRITER_THREAD_H

#include <pthread.h>
#include <stdatomic.h>

struct writer_thread {
    const char *url;      /* borrowed: the test's database */
    int target;           /* stop once this many events are known committed */
    int per_txn;          /* events per transaction */
    int pause_ms;         /* between transactions, to spread the load over time */
    atomic_int committed; /* events in transactions whose COMMIT was acknowledged */
    atomic_int failures;  /* statements lost to an outage (retried) */
    atomic_int done;      /* 1 once the thread has finished */
    atomic_int stop;      /* set by the test (writer_thread_stop): finish before the target */
    pthread_t thread;
};

/* Starts the thread; -1 if it could not be created. */
int writer_thread_start(struct writer_thread *w);

/*
 * Asks the thread to finish after its transaction in flight, short of its
 * target: for a test whose measured span is over, so it does not wait out
 * events it no longer measures. What was committed stays in `committed`.
 */
void writer_thread_stop(struct writer_thread *w);

/* Waits for the thread to finish. */
void writer_thread_join(struct writer_thread *w);

#endif
