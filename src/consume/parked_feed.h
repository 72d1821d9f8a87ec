/* SPDX-License-Identifier: MIT */
/*
 * parked_feed.h - one handler's parked events (migration 0017) as a feed,
 * so a sweep runs them through the same delivery path as a delivered
 * message: fetch leases the parked events whose predecessor is now done
 * or skipped, ack (and terminate) removes a parked row, nak gives it back
 * to be taken again after the delay, in_progress extends the lease.
 *
 * It borrows the consumer's ledger connection and belongs to the same
 * thread; it is opened for one sweep and closed after it.
 */
#ifndef OBX_PARKED_FEED_H
#define OBX_PARKED_FEED_H

#include "feed/feed.h"
#include "ledger/ledger.h"

/*
 * NULL when out of memory. `handler` and `ledger` are borrowed until close.
 * The lease on what it takes is `ledger_lease_seconds`, but at most 10 s: a
 * replica that dies holding it holds those aggregates up that long, and two
 * sweeps that meet on one event are kept apart by its claim anyway.
 */
struct obx_feed *obx_parked_feed_open(struct obx_ledger *ledger, const char *handler,
                                      int ledger_lease_seconds);

#endif
