/* SPDX-License-Identifier: MIT */
/*
 * probe.h - what outboxctl doctor can only learn by using its own session
 * as a client would (probe_pg.c): whether session state survives from one
 * statement to the next (a transaction-mode pooler hands each statement to
 * whichever server connection is free; a second session of ours lands on
 * the process our first statement just gave back), whether LISTEN hears its own
 * NOTIFY, and how far this host's clock is from the database's.
 */
#ifndef OBX_CTL_PROBE_H
#define OBX_CTL_PROBE_H

#include <libpq-fe.h>

#include "outbox/outbox.h"

struct obx_ctl_session_probe {
    char client_port[16]; /* the port this connection went to ("" for a socket) */
    char server_port[16]; /* the port the server listens on */
    int backend_changed;  /* two statements ran on different server processes */
    int setting_lost;     /* a session setting did not survive to the next statement */
    int backend_shared;   /* a second session's statement ran on this session's process */
    char pooler[64];      /* "PgBouncer 1.18.0", "PgBouncer" or "" (not identified) */
};

outbox_status obx_ctl_probe_session(PGconn *conn, struct obx_ctl_session_probe *out,
                                    outbox_error *err);

/*
 * Session settings the server process running this statement carries from
 * an earlier client: a transaction-mode pooler hands a server connection to
 * the next client with whatever a SET (or set_config(..., false)) left on
 * it. `settings` gets "name=value, ..." ("" when none); *sync_off is 1 when
 * synchronous_commit=off is among them. Settings the pooler or outboxctl's
 * own connection set, and the outbox.* probe settings, are not counted.
 */
outbox_status obx_ctl_probe_inherited(PGconn *conn, char *settings, size_t cap, int *sync_off,
                                      outbox_error *err);

/* LISTENs on a channel of its own, NOTIFYs it and waits up to `wait_ms`; *heard 1 if it came. */
outbox_status obx_ctl_probe_notify(PGconn *conn, int wait_ms, int *heard, outbox_error *err);

/* The database's clock minus this host's, in milliseconds (half the round trip is the error). */
outbox_status obx_ctl_probe_clock(PGconn *conn, long long *skew_ms, long long *rtt_ms,
                                  outbox_error *err);

#endif
