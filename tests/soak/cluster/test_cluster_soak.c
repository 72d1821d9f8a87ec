/* SPDX-License-Identifier: MIT */
/*
 * test_cluster_soak.c - the long form of tests/fault/cluster: the four
 * node faults in turn, again and again (one at a time, each once every
 * replica is current again), under a writer that commits throughout. The
 * same checks afterwards, and the publishing pause of every fault in the
 * log (CLUSTER_FAULT lines). ctest label soak: `scripts/test --soak`.
 */
#include <criterion/criterion.h>

#include "chaos.h"
#include "cluster_test.h"
#include "consume_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { ROUNDS = 16, EVENTS_PER_ROUND = 2500 };

static PGconn *conn;

static void
setup(void)
{
    conn = chaos_begin(consume_test_prepare, 0);
}

static void
teardown(void)
{
    chaos_end(&conn);
}

TestSuite(cluster_soak, .init = setup, .fini = teardown, .timeout = 1200);

Test(cluster_soak, every_node_fault_again_and_again_loses_nothing_and_spends_nothing)
{
    cluster_run(conn, "soak", CLUSTER_KILL_STREAM_LEADER, 1, ROUNDS, ROUNDS * EVENTS_PER_ROUND);
}
