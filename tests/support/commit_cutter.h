/* SPDX-License-Identifier: MIT */
/*
 * commit_cutter.h - a loopback TCP proxy that loses one COMMIT's answer.
 *
 * Forwards 127.0.0.1:<port> to 127.0.0.1:<target_port> (PostgreSQL or
 * PgBouncer) until a client first sends bytes holding the word COMMIT (any
 * case). It then closes that connection, both sides, either after passing
 * those bytes on (the server commits; the client never hears so) or
 * instead of passing them (the server sees its client gone and aborts).
 * Every later connection is forwarded untouched, so the client can ask,
 * over a new connection, what became of the transaction: what docs/writing-events.md's
 * "When a COMMIT's answer is lost" tells a writer to do. A writer example
 * needs no test hook to show it.
 */
#ifndef OBX_TEST_COMMIT_CUTTER_H
#define OBX_TEST_COMMIT_CUTTER_H

#include <pthread.h>

enum commit_cut {
    CUT_AFTER_COMMIT,  /* COMMIT reaches the server, its answer is lost: committed */
    CUT_BEFORE_COMMIT, /* COMMIT is lost on the way: the server aborts */
};

struct commit_cutter {
    int port;        /* where clients connect */
    int target_port; /* 127.0.0.1:target_port */
    enum commit_cut when;
    int listen_fd;
    int wake_fd[2]; /* a byte here stops the thread */
    int cuts;       /* 0 or 1; read after commit_cutter_stop() */
    pthread_t thread;
};

/* Starts forwarding; returns the port, or -1 (with errno) if it cannot listen. */
int commit_cutter_start(struct commit_cutter *c, int target_port, enum commit_cut when);

/* Stops the thread and closes every connection. */
void commit_cutter_stop(struct commit_cutter *c);

#endif
