/* SPDX-License-Identifier: MIT */
/*
 * test_feed_nats.c - the JetStream feed against a real nats-server: what a
 * fetch returns, how replicas share one durable consumer, what NAK, TERM,
 * in-progress and silence do to redelivery, and that the feed outlives
 * the server. Setup of stream and consumer: test_feed_nats_setup.c.
 *
 * Every test uses its own stream, subject prefix and consumer name.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "feed/feed.h"
#include "feed_nats_helpers.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

TestSuite(feed_nats, .init = setup, .fini = teardown, .timeout = 90);

/* ---- fetch ------------------------------------------------------------------------------ */

Test(feed_nats, fetch_returns_published_messages_with_their_id_subject_and_body)
{
    struct obx_feed_options o = options("FN_FETCH", "fnfetch", "fetcher", 30);
    struct obx_feed *feed = open_feed(&o);
    struct obx_feed_batch b;

    publish("fnfetch.movie.review.logged", "id-1");
    publish("fnfetch.movie.review.deleted", "id-2");
    fetch_some(feed, 10, 5000, &b);
    if (b.count < 2) { /* the second may come with the next pull */
        struct obx_feed_batch more;

        fetch_some(feed, 10, 5000, &more);
        cr_assert_eq(more.count, 1);
        cr_assert_str_eq(more.msgs[0].event_id, "id-2");
        settle_all(feed, &more, OBX_SETTLE_ACK, 0);
        feed->ops->batch_fini(feed, &more);
    } else {
        cr_assert_str_eq(b.msgs[1].event_id, "id-2");
        cr_assert_str_eq(b.msgs[1].subject, "fnfetch.movie.review.deleted");
    }
    cr_assert_str_eq(b.msgs[0].event_id, "id-1");
    cr_assert_str_eq(b.msgs[0].subject, "fnfetch.movie.review.logged");
    cr_assert_eq(b.msgs[0].envelope_len, strlen("{\"id\":\"id-1\"}"));
    cr_assert_eq(memcmp(b.msgs[0].envelope, "{\"id\":\"id-1\"}", b.msgs[0].envelope_len), 0);
    cr_assert_eq(b.msgs[0].deliveries, 1);
    settle_all(feed, &b, OBX_SETTLE_ACK, 0);
    feed->ops->batch_fini(feed, &b);
    expect_nothing_for(feed, 500);
    feed->ops->close(feed);
}

Test(feed_nats, an_empty_fetch_waits_about_its_timeout_and_is_not_an_error)
{
    struct obx_feed_options o = options("FN_EMPTY", "fnempty", "idle", 30);
    struct obx_feed *feed = open_feed(&o);
    struct obx_feed_batch b;
    long long t0 = harness_now_ms();

    cr_assert_eq(fetch(feed, 10, 300, &b), OUTBOX_OK);
    cr_assert_eq(b.count, 0);
    cr_assert_geq(harness_now_ms() - t0, 250, "returned before its timeout");
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

Test(feed_nats, reads_the_event_id_header_whatever_its_case)
{
    struct obx_feed_options o = options("FN_CASE", "fncase", "cased", 30);
    struct obx_feed *feed = open_feed(&o);
    struct obx_feed_batch b;

    publish_with("fncase.movie.review.logged", "nats-msg-id", "lower-case-id", "{}");
    fetch_some(feed, 10, 5000, &b);
    cr_assert_str_eq(b.msgs[0].event_id, "lower-case-id");
    settle_all(feed, &b, OBX_SETTLE_ACK, 0);
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

Test(feed_nats, delivers_a_message_without_an_id_or_json_as_it_came)
{
    struct obx_feed_options o = options("FN_RAW", "fnraw", "raw", 30);
    struct obx_feed *feed = open_feed(&o);
    struct obx_feed_batch b;

    publish_with("fnraw.movie.review.logged", NULL, NULL, "not json at all");
    fetch_some(feed, 10, 5000, &b);
    cr_assert_str_eq(b.msgs[0].event_id, "", "no Nats-Msg-Id: an empty id, not NULL");
    cr_assert_eq(b.msgs[0].envelope_len, strlen("not json at all"));
    cr_assert_eq(memcmp(b.msgs[0].envelope, "not json at all", b.msgs[0].envelope_len), 0);
    settle_all(feed, &b, OBX_SETTLE_TERM, 0);
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

/* ---- sharing and redelivery ------------------------------------------------------------- */

static int
seen_index(char ids[][16], int n, const char *id)
{
    for (int i = 0; i < n; i++) {
        if (strcmp(ids[i], id) == 0) {
            return i;
        }
    }
    return -1;
}

Test(feed_nats, two_feeds_with_one_consumer_name_share_the_messages_without_overlap)
{
    enum { N = 40 };
    struct obx_feed_options o = options("FN_SHARE", "fnshare", "shared", 30);
    struct obx_feed *feeds[2];
    char ids[N][16];
    int seen = 0, per_feed[2] = {0, 0};
    long long deadline = harness_now_ms() + 20000;

    feeds[0] = open_feed(&o);
    feeds[1] = open_feed(&o);
    for (int i = 0; i < N; i++) {
        char id[16];

        snprintf(id, sizeof(id), "m-%d", i);
        publish("fnshare.movie.review.logged", id);
    }
    for (int turn = 0; seen < N; turn++) {
        struct obx_feed *feed = feeds[turn % 2];
        struct obx_feed_batch b;

        cr_assert(harness_now_ms() < deadline, "only %d of %d messages came", seen, N);
        cr_assert_eq(fetch(feed, 7, 200, &b), OUTBOX_OK);
        for (size_t i = 0; i < b.count; i++) {
            cr_assert_eq(seen_index(ids, seen, b.msgs[i].event_id), -1, "%s came twice",
                         b.msgs[i].event_id);
            snprintf(ids[seen++], sizeof(ids[0]), "%s", b.msgs[i].event_id);
        }
        per_feed[turn % 2] += (int)b.count;
        settle_all(feed, &b, OBX_SETTLE_ACK, 0);
        feed->ops->batch_fini(feed, &b);
    }
    cr_assert(per_feed[0] > 0 && per_feed[1] > 0, "both replicas got work: %d and %d", per_feed[0],
              per_feed[1]);
    expect_nothing_for(feeds[0], 300);
    expect_nothing_for(feeds[1], 300);
    feeds[0]->ops->close(feeds[0]);
    feeds[1]->ops->close(feeds[1]);
}

Test(feed_nats, a_nak_with_a_delay_redelivers_after_that_delay_as_the_second_delivery)
{
    struct obx_feed_options o = options("FN_NAK", "fnnak", "nakker", 30);
    struct obx_feed *feed = open_feed(&o);
    struct obx_feed_batch b;
    long long naked_at, elapsed;

    publish("fnnak.movie.review.logged", "nak-1");
    fetch_some(feed, 1, 5000, &b);
    settle_all(feed, &b, OBX_SETTLE_NAK, 1000);
    naked_at = harness_now_ms();
    feed->ops->batch_fini(feed, &b);
    fetch_some(feed, 1, 5000, &b);
    elapsed = harness_now_ms() - naked_at;
    cr_assert_geq(elapsed, 900, "redelivered after %lld ms, before the 1000 ms delay", elapsed);
    cr_assert_leq(elapsed, 3000, "redelivered only after %lld ms", elapsed);
    cr_assert_str_eq(b.msgs[0].event_id, "nak-1");
    cr_assert_eq(b.msgs[0].deliveries, 2);
    settle_all(feed, &b, OBX_SETTLE_ACK, 0);
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

Test(feed_nats, a_terminated_message_is_never_redelivered)
{
    struct obx_feed_options o = options("FN_TERM", "fnterm", "terminator", 1);
    struct obx_feed *feed = open_feed(&o);
    struct obx_feed_batch b;

    publish("fnterm.movie.review.logged", "term-1");
    fetch_some(feed, 1, 5000, &b);
    settle_all(feed, &b, OBX_SETTLE_TERM, 0);
    feed->ops->batch_fini(feed, &b);
    expect_nothing_for(feed, 2500); /* more than twice the 1 s ack_wait */
    feed->ops->close(feed);
}

Test(feed_nats, a_message_left_unsettled_is_redelivered_after_ack_wait)
{
    struct obx_feed_options o = options("FN_WAIT", "fnwait", "silent", 1);
    struct obx_feed *feed = open_feed(&o);
    struct obx_feed_batch b;
    long long fetched_at, elapsed;

    publish("fnwait.movie.review.logged", "wait-1");
    fetch_some(feed, 1, 5000, &b);
    fetched_at = harness_now_ms();
    feed->ops->batch_fini(feed, &b); /* a crashed handler: no settle */
    fetch_some(feed, 1, 5000, &b);
    elapsed = harness_now_ms() - fetched_at;
    cr_assert_geq(elapsed, 900, "redelivered after %lld ms, before the 1 s ack_wait", elapsed);
    cr_assert_str_eq(b.msgs[0].event_id, "wait-1");
    cr_assert_eq(b.msgs[0].deliveries, 2);
    settle_all(feed, &b, OBX_SETTLE_ACK, 0);
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

Test(feed_nats, in_progress_keeps_a_long_running_message_from_being_redelivered)
{
    struct obx_feed_options o = options("FN_PROG", "fnprog", "slow", 2);
    struct obx_feed *worker = open_feed(&o);
    struct obx_feed *other = open_feed(&o);
    struct obx_feed_batch held, b;
    outbox_error err = {0};
    long long stop_at;

    publish("fnprog.movie.review.logged", "prog-1");
    fetch_some(worker, 1, 5000, &held);
    stop_at = harness_now_ms() + 5000; /* two and a half ack_waits */
    while (harness_now_ms() < stop_at) {
        cr_assert_eq(worker->ops->in_progress(worker, &held, 0, &err), OUTBOX_OK, "%s",
                     err.message);
        cr_assert_eq(fetch(other, 1, 500, &b), OUTBOX_OK);
        cr_assert_eq(b.count, 0, "redelivered while in progress was reported");
        other->ops->batch_fini(other, &b);
    }
    worker->ops->batch_fini(worker, &held); /* stops reporting: ack_wait runs out */
    fetch_some(other, 1, 5000, &b);
    cr_assert_str_eq(b.msgs[0].event_id, "prog-1");
    cr_assert_eq(b.msgs[0].deliveries, 2);
    settle_all(other, &b, OBX_SETTLE_ACK, 0);
    other->ops->batch_fini(other, &b);
    worker->ops->close(worker);
    other->ops->close(other);
}

/* ---- outages ---------------------------------------------------------------------------- */

Test(feed_nats, survives_a_nats_server_restart)
{
    struct obx_feed_options o = options("FN_RESTART", "fnrestart", "survivor", 30);
    struct obx_feed *feed;
    struct obx_feed_batch b;
    outbox_error err = {0};
    outbox_status st;
    long long t0;

    harness_servers_exclusive();
    feed = open_feed(&o);
    publish("fnrestart.movie.review.logged", "before");
    /* SIGTERM, not SIGKILL: 2.9 writes its file store behind the publish ack, so a
     * message published just before a SIGKILL may be lost by the broker itself. To
     * the feed both look alike: the connection drops. */
    harness_nats_kill(SIGTERM);
    t0 = harness_now_ms();
    st = feed->ops->fetch(feed, 10, 1000, &b, &err);
    cr_assert(st == OUTBOX_EUNAVAILABLE || (st == OUTBOX_OK && b.count == 0),
              "while the server is away: %s %s", outbox_status_name(st), err.message);
    cr_assert_leq(harness_now_ms() - t0, 3000, "a fetch while disconnected must not hang");
    feed->ops->batch_fini(feed, &b);
    harness_nats_start();
    fetch_some(feed, 10, 30000, &b);
    cr_assert_str_eq(b.msgs[0].event_id, "before", "kept in the file store across the restart");
    settle_all(feed, &b, OBX_SETTLE_ACK, 0);
    feed->ops->batch_fini(feed, &b);
    teardown(); /* the test's own connection saw the restart too: a fresh one */
    setup();
    publish("fnrestart.movie.review.logged", "after");
    fetch_some(feed, 10, 10000, &b);
    cr_assert_str_eq(b.msgs[0].event_id, "after");
    settle_all(feed, &b, OBX_SETTLE_ACK, 0);
    feed->ops->batch_fini(feed, &b);
    feed->ops->close(feed);
}

Test(feed_nats, opening_while_nats_is_unreachable_is_unavailable_not_an_error)
{
    struct obx_feed_options o = options("FN_DOWN", "fndown", "nobody", 30);
    struct obx_feed *feed = NULL;
    outbox_error err = {0};

    o.nats_url = "nats://127.0.0.1:1"; /* nothing listens on port 1 */
    cr_assert_eq(obx_feed_nats_open(&o, &feed, &err), OUTBOX_EUNAVAILABLE, "%s", err.message);
    cr_assert_null(feed);
}
