/* SPDX-License-Identifier: MIT */
/*
 * relay_claim_switch.h - the bench's switch back to the two-write claim.
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

/*
 * Nonzero: lease and finish as two committed writes per event, and run no
 * upkeep thread (gauges, retention): its queries are this release's, for
 * this release's indexes. Call before outbox_relay_run.
 */
void obx_relay_use_two_writes(outbox_relay *relay, int on);

#endif
