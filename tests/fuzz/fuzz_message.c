/* SPDX-License-Identifier: MIT */
/*
 * fuzz_message.c - a message on the stream as the consumer receives it:
 * anyone with publish rights chooses its headers and body, and its reply
 * subject carries the delivery's metadata.
 *
 * Input: the subject, a newline, the reply subject, a newline, then the
 * message as the server sends it after its HMSG line: a header block
 * ("NATS/1.0\r\n" ... "\r\n\r\n") if the input starts with one, then the
 * body. nats.c builds the message (natsMsg_create, as its protocol reader
 * does) and lifts the headers; the feed reads it (obx_nats_feed_describe)
 * and the consumer parses the body as an envelope.
 */
#include <stdint.h>
#include <string.h>

#include <nats/nats.h>

#include "consume/message_check.h"
#include "envelope/envelope.h"
#include "envelope/subject.h"
#include "feed/feed_nats_int.h"
#include "fuzz.h"

/*
 * nats.c's own constructor for a received message, and what
 * natsMsg_Destroy() ends in: exported, not in nats.h. natsMsg_Destroy()
 * hands the message to nats.c's collector thread once the library is open,
 * and a free in another thread makes libFuzzer scan for leaks after every
 * input; natsMsg_free() frees it here and now.
 */
natsStatus natsMsg_create(natsMsg **newMsg, const char *subject, int subjLen, const char *reply,
                          int replyLen, const char *buf, int bufLen, int hdrLen);
void natsMsg_free(void *object);

#define HEADER_START "NATS/1.0"

/* The line of `*p` up to a newline (or the end); advances past it. */
static const char *
take_line(const char **p, const char *end, int *len)
{
    const char *start = *p, *nl = memchr(start, '\n', (size_t)(end - start));

    *len = (int)((nl != NULL ? nl : end) - start);
    *p = nl != NULL ? nl + 1 : end;
    return start;
}

static int
header_length(const char *buf, size_t len)
{
    const char *p;

    if (len < strlen(HEADER_START) || memcmp(buf, HEADER_START, strlen(HEADER_START)) != 0) {
        return 0;
    }
    for (p = buf; p + 4 <= buf + len; p++) {
        if (memcmp(p, "\r\n\r\n", 4) == 0) {
            return (int)(p + 4 - buf);
        }
    }
    return 0;
}

int
obx_fuzz_message(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size, *subject, *reply;
    int subject_len, reply_len, body_len;
    natsMsg *msg = NULL;
    struct obx_feed_msg m = {0};
    struct obx_envelope env = {0};
    outbox_error err = {0};

    if (size > 1 << 20) {
        return 0; /* the server's max_payload is 1 MiB by default */
    }
    subject = take_line(&p, end, &subject_len);
    reply = take_line(&p, end, &reply_len);
    body_len = (int)(end - p);
    if (natsMsg_create(&msg, subject, subject_len, reply, reply_len, p, body_len,
                       header_length(p, (size_t)body_len)) != NATS_OK) {
        return 0;
    }
    obx_nats_feed_describe(msg, &m);
    obx_fuzz_require(m.event_id != NULL && m.subject != NULL && m.envelope != NULL,
                     "a described message lacks a field");
    obx_fuzz_require(m.deliveries >= 1, "a message was delivered fewer than once");
    (void)obx_subject_matches("events.>", m.subject);
    /* The consumer's own gate: accepted, the envelope is parsed; refused, a reason says why. */
    if (obx_message_check(&m, "events", &env, &err) == OBX_ACCEPTED) {
        obx_fuzz_require(env.head.id != NULL, "an accepted message's envelope has no id");
    } else {
        obx_fuzz_require(err.message[0] != '\0', "a refused message has no reason");
    }
    obx_envelope_fini(&env);
    natsMsg_free(msg);
    return 0;
}
