/* SPDX-License-Identifier: MIT */
/*
 * test_nats_permissions.c - the least-privilege users of
 * deploy/nats-permissions.conf, included as shipped by a real nats-server:
 * a relay signed in as `relay` and a consumer signed in as `consumer`
 * deliver every event exactly once with exactly these permissions, and the
 * consumer's user cannot publish an event (nor create a stream): the
 * server refuses it and the stream keeps its count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "consume_test.h"
#include "ctl_test.h"
#include "harness.h"
#include "relay_test.h"
#include "trust_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define RELAY_PASSWORD    "relay-pw-Lk4t"
#define CONSUMER_PASSWORD "consumer-pw-W8cd"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(nats_permissions, .init = setup, .fini = teardown, .timeout = 180);

/* A server with the shipped users, their passwords in its environment as the file expects. */
static void
permissions_server(struct trust_nats *n)
{
    char link[500];
    char *env[] = {"OUTBOX_NATS_RELAY_PASSWORD=" RELAY_PASSWORD,
                   "OUTBOX_NATS_CONSUMER_PASSWORD=" CONSUMER_PASSWORD, NULL};

    trust_nats_init(n);
    snprintf(link, sizeof(link), "%s/nats-permissions.conf", n->dir);
    cr_assert_eq(symlink(OBX_SOURCE_DIR "/deploy/nats-permissions.conf", link), 0);
    trust_nats_run(n, "include ./nats-permissions.conf", env);
}

/* Settings signed in as `user` with its password in a file. */
static void
signed_in(struct relay_env *env, const struct trust_nats *n, const char *user, const char *pw)
{
    char name[40];
    char *file;

    snprintf(name, sizeof(name), "%s-password", user);
    file = trust_nats_write(n, name, pw);
    relay_env_set(env, "OUTBOX_NATS_URL", n->url);
    relay_env_set(env, "OUTBOX_NATS_USER", user);
    relay_env_set(env, "OUTBOX_NATS_PASSWORD_FILE", file);
    free(file);
}

/* Messages in stream EVENTS, read as the relay (which may look the stream up). */
static long long
stream_messages(const struct trust_nats *n)
{
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsStreamInfo *si = NULL;
    long long count = -1;

    cr_assert_eq(natsOptions_Create(&o), NATS_OK);
    natsOptions_SetURL(o, n->url);
    natsOptions_SetUserInfo(o, "relay", RELAY_PASSWORD);
    if (natsConnection_Connect(&nc, o) == NATS_OK &&
        natsConnection_JetStream(&js, nc, NULL) == NATS_OK &&
        js_GetStreamInfo(&si, js, "EVENTS", NULL, NULL) == NATS_OK) {
        count = (long long)si->State.Msgs;
    }
    jsStreamInfo_Destroy(si);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    natsOptions_Destroy(o);
    return count;
}

/* What the consumer's user may not do: publish an event, create a stream. */
static void
expect_consumer_user_cannot_publish(const struct trust_nats *n)
{
    natsOptions *o = NULL;
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsPubAck *ack = NULL;
    jsStreamInfo *si = NULL;
    jsStreamConfig sc;
    jsOptions jo;
    jsErrCode jerr = 0;
    const char *subjects[] = {"forged.>"};
    natsStatus s;

    cr_assert_eq(natsOptions_Create(&o), NATS_OK);
    natsOptions_SetURL(o, n->url);
    natsOptions_SetUserInfo(o, "consumer", CONSUMER_PASSWORD);
    cr_assert_eq(natsConnection_Connect(&nc, o), NATS_OK, "the consumer's user cannot connect");
    /* A refused publish gets no answer: wait 1 s, not nats.c's default 5 s. */
    jsOptions_Init(&jo);
    jo.Wait = 1000;
    cr_assert_eq(natsConnection_JetStream(&js, nc, &jo), NATS_OK);
    s = js_Publish(&ack, js, "events.movie.forged", "{}", 2, NULL, &jerr);
    cr_assert_neq(s, NATS_OK, "the consumer's user published an event");
    jsStreamConfig_Init(&sc);
    sc.Name = "FORGED";
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    s = js_AddStream(&si, js, &sc, NULL, &jerr);
    cr_assert_neq(s, NATS_OK, "the consumer's user created a stream");
    jsPubAck_Destroy(ack);
    jsStreamInfo_Destroy(si);
    natsConnection_Close(nc);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    natsOptions_Destroy(o);
}

Test(nats_permissions, the_daemons_work_with_the_shipped_users_and_a_consumer_cannot_publish)
{
    static const char *const handlers[] = {CONSUME_EFFECT("effect"), NULL};
    struct trust_nats n;
    struct relay_env renv, cenv;
    struct harness_proc relay, consumer;
    long long before;

    permissions_server(&n);
    /* The defaults the file is written for: stream EVENTS, events.>, durable outbox. */
    relay_test_env(&renv, "EVENTS", "events");
    signed_in(&renv, &n, "relay", RELAY_PASSWORD);
    consume_test_env(&cenv, "jetstream", "EVENTS", "events", "outbox");
    signed_in(&cenv, &n, "consumer", CONSUMER_PASSWORD);
    relay_test_start(&relay, &renv, "relay-perm");
    /* Only the relay may create the stream: a consumer started first waits for it. */
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&relay, "stream ready"), 30000);
    consume_test_start(&consumer, &cenv, "consumer-perm", handlers);
    relay_test_enqueue(conn, 100);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "effect") == 100, 30000);
    consume_test_expect_exactly_once(conn, "effect");
    cr_assert(!harness_proc_log_contains(&n.proc, "Violation"),
              "a daemon needed a permission the file does not give:\n%s",
              harness_proc_log(&n.proc));

    before = stream_messages(&n);
    cr_assert_eq(before, 100);
    expect_consumer_user_cannot_publish(&n);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&n.proc, "Publish Violation"), 5000);
    cr_assert_eq(stream_messages(&n), before, "an event forged by the consumer's user got in");
    consume_test_stop(&consumer, 10000);
    relay_test_stop(&relay, 10000);
    relay_env_fini(&cenv);
    relay_env_fini(&renv);
    trust_nats_stop(&n);
}
