/* SPDX-License-Identifier: MIT */
/*
 * relay_claim_switch.h - the bench's switches back to the two-write claim
 * and off the upkeep thread.
 *
 * A relay claims fresh rows by commit window, writing nothing to them, and
 * its finish deletes (prune) or marks (mark) them: one write per event.
 * The earlier claim leased every row in a committed statement (a row
 * update) and finished it in a second one. outbox-bench
 * runs both in one process to report the new claim's PostgreSQL cost
 * against the old one's; nothing else calls this.
 */
#ifndef OBX_RELAY_CLAIM_SWITCH_H
#define OBX_RELAY_CLAIM_SWITCH_H

#include "outbox/worker.h"

/* Nonzero: lease and finish as two committed writes per event. Call before outbox_relay_run. */
void obx_relay_use_two_writes(outbox_relay *relay, int on);

/*
 * Nonzero: run no upkeep thread (gauges, retention). Its queries are this
 * release's, for this release's indexes: on the two-write claim's release
 * table, which lacks them, its sample read every waiting row (0.3-1.1 s a
 * call), and a baseline measured with it would pay for a missing index,
 * not for its claim. Call before outbox_relay_run.
 */
void obx_relay_skip_upkeep(outbox_relay *relay, int on);

#endif
