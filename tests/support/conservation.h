/* SPDX-License-Identifier: MIT */
/*
 * conservation.h - the whole checker of FAULTS.md §1 for tests that run the
 * pipeline end to end (writers, relays, consumers): relay_check's C, S, Q
 * and D sets (lost, phantom, stream_dups) plus what only the database can
 * tell after quiescence:
 *   effect_dups      = Σ(count - 1) over public.effects per (event, handler)
 *   unhandled        = committed events some listed handler has no effect for
 *   unterminated     = outbox rows still pending or leased
 *   orphan_events    = outbox rows whose business row (public.committed) is missing
 *   orphan_business  = business rows with neither their outbox row nor their message
 *                      (prune mode deletes published rows: the message stands for them)
 * It reads the stream and the database, never a component's own account.
 * Uses the harness, so only integration and fault binaries may call it.
 */
#ifndef OBX_TEST_CONSERVATION_H
#define OBX_TEST_CONSERVATION_H

#include <libpq-fe.h>

#include "relay_check.h"

struct conservation {
    struct relay_check base; /* C, S, Q, D: lost, phantom, stream_dups */
    long long effect_dups;
    long long unhandled;
    long long unterminated;
    long long orphan_events;
    long long orphan_business;
    long long outbox_rows;
};

/*
 * Measures everything above for `stream` and the NULL-terminated
 * `handlers` (NULL: no consumer ran, effects are not checked), logs it in
 * one line, and fails the test unless every count is 0. The business rows
 * are public.committed, the effects public.effects (consume_test.h).
 */
struct conservation conservation_expect_zero(PGconn *conn, const char *stream,
                                             const char *const handlers[]);

/* The same measurements without the assertions, for tests that expect a non-zero count. */
struct conservation conservation_measure(PGconn *conn, const char *stream,
                                         const char *const handlers[]);

#endif
