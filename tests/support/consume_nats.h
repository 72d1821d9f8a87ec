/* SPDX-License-Identifier: MIT */
/*
 * consume_nats.h - what consumer tests ask the NATS server itself, never a
 * consumer: a durable consumer's state and settings, the stream's
 * messages published again (the same envelope under a new Nats-Msg-Id,
 * outside the duplicate window's reach), and the server's advisories for
 * terminated messages. No Criterion here: every function returns 0, or -1
 * with the reason in `err`.
 */
#ifndef OBX_TEST_CONSUME_NATS_H
#define OBX_TEST_CONSUME_NATS_H

#include <stddef.h>
#include <stdint.h>

/* A durable consumer as the server reports it. */
struct consume_nats_state {
    uint64_t num_pending;            /* stream messages not delivered yet */
    uint64_t num_ack_pending;        /* delivered, not settled */
    uint64_t num_redelivered;        /* delivered more than once, not settled yet */
    uint64_t delivered_consumer_seq; /* deliveries so far, redeliveries included */
    uint64_t delivered_stream_seq;
    uint64_t ack_floor_stream_seq;
    int64_t ack_wait_ns;
    int64_t max_deliver;
    int64_t max_ack_pending;
    int64_t created_ns; /* when the server created it: the same after an update in place */
    char description[128];
};

int consume_nats_state_read(const char *nats_url, const char *stream, const char *consumer,
                            struct consume_nats_state *out, char *err, size_t cap);

/* The stream's max_age in seconds (0: unlimited). */
int consume_nats_stream_max_age(const char *nats_url, const char *stream, int64_t *seconds,
                                char *err, size_t cap);

/* The stream's last sequence number (0 when empty). */
int consume_nats_last_seq(const char *nats_url, const char *stream, uint64_t *out, char *err,
                          size_t cap);

/* The Nats-Msg-Id of message `seq` of `stream` ("" if it has none). */
int consume_nats_msg_id(const char *nats_url, const char *stream, uint64_t seq, char *id,
                        size_t id_cap, char *err, size_t cap);

/*
 * Publishes the body of every message of `stream` from `first_seq` to
 * `last_seq` again, on the same subject, under Nats-Msg-Id
 * "<old id>:requeue:<round>" as outboxctl dead requeue does (so the
 * duplicate window does not absorb it). `*published` counts them.
 */
int consume_nats_republish(const char *nats_url, const char *stream, uint64_t first_seq,
                           uint64_t last_seq, unsigned round, size_t *published, char *err,
                           size_t cap);

/*
 * Creates a durable pull consumer on `stream` for `filter` with `ack_wait_seconds`,
 * `description` and `max_ack_pending`, as an operator might have before any
 * consumer started.
 */
int consume_nats_create_consumer(const char *nats_url, const char *stream, const char *consumer,
                                 const char *filter, int ack_wait_seconds, const char *description,
                                 int max_ack_pending, char *err, size_t cap);

/* Creates `stream` capturing "<prefix>.>" with `max_age_seconds`, as a relay would. */
int consume_nats_create_stream(const char *nats_url, const char *stream, const char *prefix,
                               int64_t max_age_seconds, char *err, size_t cap);

/* A subscription to the server's MSG_TERMINATED advisories of one consumer. */
struct consume_nats_terms {
    void *nc;  /* natsConnection, owned */
    void *sub; /* natsSubscription, owned */
};

int consume_nats_terms_watch(struct consume_nats_terms *w, const char *nats_url, const char *stream,
                             const char *consumer, char *err, size_t cap);

/*
 * Takes the advisories that arrived (waiting up to `wait_ms` for the first)
 * and writes their stream sequences into `seqs` (at most `cap_seqs`);
 * returns how many arrived, or -1.
 */
int consume_nats_terms_take(struct consume_nats_terms *w, int wait_ms, uint64_t *seqs,
                            size_t cap_seqs);

void consume_nats_terms_close(struct consume_nats_terms *w);

#endif
