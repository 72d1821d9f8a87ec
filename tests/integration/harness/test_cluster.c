/* SPDX-License-Identifier: MIT */
/*
 * test_cluster.c - the harness's three-node JetStream cluster: every node
 * answers JetStream, an R3 stream gets a leader and two current replicas,
 * a SIGKILLed node is gone and comes back on its own port with its copy.
 */
#include <criterion/criterion.h>
#include <nats/nats.h>

#include "cluster_nats.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* 1 if JetStream answers an account info request on `url`. */
static int
jetstream_answers(const char *url)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsAccountInfo *ai = NULL;
    int ok = natsConnection_ConnectTo(&nc, url) == NATS_OK &&
             natsConnection_JetStream(&js, nc, NULL) == NATS_OK &&
             js_GetAccountInfo(&ai, js, NULL, NULL) == NATS_OK;

    jsAccountInfo_Destroy(ai);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return ok;
}

static void
add_r3_stream(const char *urls, const char *name, const char *subject)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsStreamConfig cfg;
    const char *subjects[] = {subject};
    jsErrCode code = 0;

    cr_assert_eq(natsConnection_ConnectTo(&nc, urls), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    jsStreamConfig_Init(&cfg);
    cfg.Name = name;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = 3;
    /*
     * Every node answering is not yet a meta group that knows its peers:
     * right after the boot, placing three replicas can fail with 10005 (no
     * suitable peers), seen once in CI. Asked again for up to 10 s.
     */
    for (int tries = 0;; tries++) {
        code = 0;
        if (js_AddStream(NULL, js, &cfg, NULL, &code) == NATS_OK) {
            break;
        }
        cr_assert(code == 10005 && tries < 100, "add stream: %d", (int)code);
        harness_sleep_ms(100);
    }
    cr_assert_eq(js_Publish(NULL, js, "hxc.one", "1", 1, NULL, &code), NATS_OK, "%d", (int)code);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

Test(a_cluster, has_three_nodes_that_replicate_and_survive_a_node_restart)
{
    struct harness_cluster c;
    struct cluster_view v;
    char err[512] = "";
    int follower;

    harness_cluster_start(&c, "hxc");
    for (int k = 0; k < HARNESS_CLUSTER_NODES; k++) {
        cr_assert(jetstream_answers(c.node_url[k]), "n%d: JetStream does not answer", k + 1);
    }
    add_r3_stream(c.urls, "HXC", "hxc.>");
    HARNESS_WAIT_UNTIL(cluster_stream_current(c.urls, "HXC", 3), 30000);
    harness_sleep_ms(2000); /* 2.9.10: no kill right after creating a stream (FACTS 18) */
    cr_assert_eq(cluster_stream_view(c.urls, "HXC", &v, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(v.replicas, 2);
    follower = harness_cluster_node(v.replica[0].name);
    cr_assert_geq(follower, 0, "%s", v.replica[0].name);

    harness_cluster_kill(&c, follower);
    cr_assert(!jetstream_answers(c.node_url[follower]), "a killed node still answers");
    harness_cluster_restart(&c, follower);
    cr_assert(jetstream_answers(c.node_url[follower]), "the node did not come back on its port");
    HARNESS_WAIT_UNTIL(cluster_stream_current(c.urls, "HXC", 3), 30000);
    cr_assert_eq(cluster_stream_view(c.urls, "HXC", &v, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(v.messages, 1);
    harness_cluster_stop(&c);
}
