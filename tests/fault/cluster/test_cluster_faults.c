/* SPDX-License-Identifier: MIT */
/*
 * test_cluster_faults.c - one node fault on a three-node JetStream cluster
 * (R3 file stream) while two relays publish and two consumers consume:
 * the stream leader SIGKILLed, a follower SIGKILLed, the consumer's leader
 * SIGKILLed, a graceful leader stepdown. Each: every node's copy holds
 * each committed id once, every handler effect happened once, no attempt
 * spent, no relay or consumer restarted (cluster_test.h). The long form,
 * every fault again and again, is tests/soak/cluster.
 */
#include <criterion/criterion.h>

#include "chaos.h"
#include "cluster_test.h"
#include "consume_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

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

TestSuite(cluster_faults, .init = setup, .fini = teardown, .timeout = 150);

Test(cluster_faults, stream_leader_killed_mid_stream_loses_nothing_and_spends_nothing)
{
    cluster_run(conn, "lead", CLUSTER_KILL_STREAM_LEADER, 0, 1, 1500);
}

Test(cluster_faults, follower_killed_loses_nothing_and_spends_nothing)
{
    cluster_run(conn, "foll", CLUSTER_KILL_FOLLOWER, 0, 1, 1500);
}

Test(cluster_faults, consumer_leader_killed_loses_nothing_and_spends_nothing)
{
    cluster_run(conn, "cons", CLUSTER_KILL_CONSUMER_LEADER, 0, 1, 1500);
}

Test(cluster_faults, leader_stepdown_loses_nothing_and_spends_nothing)
{
    cluster_run(conn, "step", CLUSTER_STEPDOWN, 0, 1, 1500);
}
