/* SPDX-License-Identifier: MIT */
/*
 * ext_kind.c - the ext kind: a C callback (outbox_consumer_add_ext_handler)
 * run outside any transaction, in the consumer's own thread, so one at a
 * time: start() runs it to its end, wait() reports that end.
 */
#include <string.h>

#include "handler.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
start(void *ctx, unsigned long tag, const outbox_delivery *d)
{
    struct obx_ext_kind *k = ctx;

    memset(&k->end, 0, sizeof(k->end));
    k->end.tag = tag;
    k->end.result = k->fn(k->ctx, d, &k->end.err);
    k->have = 1;
}

static size_t
wait_ends(void *ctx, int timeout_ms, struct obx_run_end *ends, size_t max)
{
    struct obx_ext_kind *k = ctx;

    (void)timeout_ms; /* the run already ended in start() */
    if (!k->have || max == 0) {
        return 0;
    }
    ends[0] = k->end;
    k->have = 0;
    return 1;
}

static void
stop(void *ctx, unsigned long tag)
{
    /* The callback ended before start() returned; it watches its claim itself. */
    (void)ctx;
    (void)tag;
}

const struct obx_handler_ops obx_ext_kind = {
    .kind = "ext", .start = start, .wait = wait_ends, .stop = stop};

int
obx_handler_is_external(const struct obx_handler *h)
{
    return h->ops->start != NULL;
}
