/* SPDX-License-Identifier: MIT */
/*
 * test_feed_nats_setup.c - how the JetStream feed sets up its stream and
 * durable consumer: a missing stream is created with the relay's settings
 * (an existing one left to the relay), a missing consumer is created, an
 * existing one gets ack_wait and max_deliver updated in place with every
 * other field kept, what the server refuses is logged with the fix, and a
 * consumer deleted under a running feed is created again.
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "feed/feed.h"
#include "feed_nats_helpers.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

TestSuite(feed_nats_setup, .init = setup, .fini = teardown, .timeout = 90);

/* ---- stream and consumer setup ---------------------------------------------------------- */

Test(feed_nats_setup, creates_the_missing_stream_with_the_relay_settings)
{
    struct obx_feed_options o = options("FN_NEWSTREAM", "fnnewstream", "creator", 30);
    struct obx_feed *feed = open_feed(&o);
    jsStreamInfo *si = NULL;
    jsConsumerInfo *ci;
    jsStreamConfig *c;

    cr_assert_eq(js_GetStreamInfo(&si, js, "FN_NEWSTREAM", NULL, NULL), NATS_OK);
    c = si->Config;
    cr_assert_eq(c->SubjectsLen, 1);
    cr_assert_str_eq(c->Subjects[0], "fnnewstream.>");
    cr_assert_eq(c->Storage, js_FileStorage);
    cr_assert_eq(c->Duplicates, 3600 * NS_PER_S);
    cr_assert_eq(c->MaxAge, 7 * 86400 * NS_PER_S);
    cr_assert(c->DenyDelete && c->DenyPurge);
    jsStreamInfo_Destroy(si);
    ci = consumer_info("FN_NEWSTREAM", "creator");
    cr_assert_eq(ci->Config->AckPolicy, js_AckExplicit);
    cr_assert_eq(ci->Config->DeliverPolicy, js_DeliverAll);
    cr_assert_eq(ci->Config->AckWait, 30 * NS_PER_S);
    cr_assert_eq(ci->Config->MaxDeliver, -1);
    cr_assert_eq(ci->Config->MaxAckPending, 1000);
    cr_assert_eq(ci->Config->BackOffLen, 0, "no backoff list: it would override ack_wait");
    cr_assert_str_eq(ci->Config->FilterSubject, "fnnewstream.>");
    cr_assert(ci->Config->DeliverSubject == NULL || ci->Config->DeliverSubject[0] == '\0',
              "a pull consumer");
    jsConsumerInfo_Destroy(ci);
    cr_assert(logged("stream created stream=FN_NEWSTREAM"), "%s", log_text);
    cr_assert(logged("consumer created stream=FN_NEWSTREAM consumer=creator"), "%s", log_text);
    feed->ops->close(feed);
}

Test(feed_nats_setup, leaves_the_duplicate_window_of_an_existing_stream_to_the_relay)
{
    struct obx_feed_options o = options("FN_OLDSTREAM", "fnoldstream", "guest", 30);
    const char *subjects[] = {"fnoldstream.>"};
    jsStreamConfig cfg;
    jsStreamInfo *si = NULL;
    struct obx_feed *feed;

    jsStreamConfig_Init(&cfg);
    cfg.Name = "FN_OLDSTREAM";
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Duplicates = 120 * NS_PER_S;
    cr_assert_eq(js_AddStream(NULL, js, &cfg, NULL, NULL), NATS_OK);
    feed = open_feed(&o);
    cr_assert_eq(js_GetStreamInfo(&si, js, "FN_OLDSTREAM", NULL, NULL), NATS_OK);
    cr_assert_eq(si->Config->Duplicates, 120 * NS_PER_S);
    jsStreamInfo_Destroy(si);
    feed->ops->close(feed);
}

/* A consumer made by hand, with fields the feed must keep. */
static void
add_consumer(const char *stream, const char *name, const char *filter, int64_t ack_wait_s,
             int64_t max_deliver, int64_t *backoff, int backoff_len)
{
    jsConsumerConfig cfg;
    jsConsumerInfo *ci = NULL;
    jsErrCode code = 0;

    jsConsumerConfig_Init(&cfg);
    cfg.Durable = name;
    cfg.Description = "made by hand";
    cfg.AckPolicy = js_AckExplicit;
    cfg.AckWait = ack_wait_s * NS_PER_S;
    cfg.MaxDeliver = max_deliver;
    cfg.MaxAckPending = 77;
    cfg.FilterSubject = filter;
    cfg.BackOff = backoff;
    cfg.BackOffLen = backoff_len;
    cr_assert_eq(js_AddConsumer(&ci, js, stream, &cfg, NULL, &code), NATS_OK, "add %s: %d", name,
                 (int)code);
    jsConsumerInfo_Destroy(ci);
}

/* Makes the stream through a throwaway feed of another consumer name. */
static void
make_stream(const struct obx_feed_options *o)
{
    struct obx_feed_options other = *o;
    struct obx_feed *feed;

    other.consumer_name = "stream_maker";
    feed = open_feed(&other);
    feed->ops->close(feed);
}

Test(feed_nats_setup, updates_ack_wait_and_max_deliver_in_place_and_keeps_every_other_field)
{
    struct obx_feed_options o = options("FN_UPDATE", "fnupdate", "handmade", 5);
    struct obx_feed *feed;
    jsConsumerInfo *ci;
    struct obx_feed_batch b;

    make_stream(&o);
    add_consumer("FN_UPDATE", "handmade", "fnupdate.>", 30, 9, NULL, 0);
    feed = open_feed(&o);
    ci = consumer_info("FN_UPDATE", "handmade");
    cr_assert_eq(ci->Config->AckWait, 5 * NS_PER_S, "ours to change");
    cr_assert_eq(ci->Config->MaxDeliver, -1, "ours to change");
    cr_assert_str_eq(ci->Config->Description, "made by hand");
    cr_assert_eq(ci->Config->MaxAckPending, 77, "an operator's sizing is kept");
    jsConsumerInfo_Destroy(ci);
    cr_assert(logged("consumer updated stream=FN_UPDATE consumer=handmade field=ack_wait "
                     "from=30s to=5s"),
              "%s", log_text);
    cr_assert(logged("consumer updated stream=FN_UPDATE consumer=handmade field=max_deliver "
                     "from=9 to=-1"),
              "%s", log_text);
    cr_assert(logged("consumer max_ack_pending is below the configured value consumer=handmade "
                     "want=1000 have=77"),
              "%s", log_text);
    publish("fnupdate.movie.review.logged", "upd-1");
    fetch_some(feed, 1, 5000, &b);
    settle_all(feed, &b, OBX_SETTLE_ACK, 0);
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

Test(feed_nats_setup, logs_the_fix_and_keeps_running_when_the_server_refuses_a_consumer_setting)
{
    struct obx_feed_options o = options("FN_REFUSE", "fnrefuse", "stubborn", 60);
    int64_t backoff[] = {1 * NS_PER_S, 2 * NS_PER_S, 3 * NS_PER_S};
    struct obx_feed *feed;
    struct obx_feed_batch b;

    make_stream(&o);
    /* A backoff list makes the server hold ack_wait at its first step, and a
     * max_deliver not above the list's length is refused. */
    add_consumer("FN_REFUSE", "stubborn", "fnrefuse.>", 1, 5, backoff, 3);
    o.max_deliver = 2;
    feed = open_feed(&o);
    cr_assert(logged("consumer settings differ and could not be updated consumer=stubborn "
                     "field=ack_wait want=1m have=1s"),
              "%s", log_text);
    cr_assert(logged("fix=\"nats consumer edit FN_REFUSE stubborn --wait 1m\""), "%s", log_text);
    cr_assert(logged("consumer settings differ and could not be updated consumer=stubborn "
                     "field=max_deliver want=2 have=5"),
              "%s", log_text);
    cr_assert(logged("fix=\"nats consumer edit FN_REFUSE stubborn --max-deliver=2\""), "%s",
              log_text);
    cr_assert(logged("consumer has a backoff list"), "%s", log_text);
    publish("fnrefuse.movie.review.logged", "ref-1");
    fetch_some(feed, 1, 5000, &b);
    settle_all(feed, &b, OBX_SETTLE_ACK, 0);
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

Test(feed_nats_setup, refuses_a_push_consumer_of_the_same_name)
{
    struct obx_feed_options o = options("FN_PUSH", "fnpush", "pushy", 30);
    jsConsumerConfig cfg;
    jsConsumerInfo *ci = NULL;
    struct obx_feed *feed = NULL;
    outbox_error err = {0};

    make_stream(&o);
    jsConsumerConfig_Init(&cfg);
    cfg.Durable = "pushy";
    cfg.AckPolicy = js_AckExplicit;
    cfg.DeliverSubject = "fnpush_deliver";
    cr_assert_eq(js_AddConsumer(&ci, js, "FN_PUSH", &cfg, NULL, NULL), NATS_OK);
    jsConsumerInfo_Destroy(ci);
    cr_assert_eq(obx_feed_nats_open(&o, &feed, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "push consumer") != NULL, "%s", err.message);
    cr_assert_null(feed);
}

Test(feed_nats_setup, recreates_a_consumer_deleted_while_it_runs)
{
    struct obx_feed_options o = options("FN_GONE", "fngone", "deleted", 30);
    struct obx_feed *feed = open_feed(&o);
    struct obx_feed_batch b;

    cr_assert_eq(js_DeleteConsumer(js, "FN_GONE", "deleted", NULL, NULL), NATS_OK);
    publish("fngone.movie.review.logged", "gone-1");
    /* 2.9 does not answer pulls for a deleted consumer: found by the periodic check. */
    fetch_some(feed, 1, 25000, &b);
    cr_assert_str_eq(b.msgs[0].event_id, "gone-1");
    settle_all(feed, &b, OBX_SETTLE_ACK, 0);
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}
