/* SPDX-License-Identifier: MIT */
/*
 * feed.c - what both feeds share: the feed object and its backend state,
 * allocated together so a half-built feed is closed like any other.
 */
#include "feed.h"

#include <stdlib.h>

#include "common/banned.h" /* last: poisons unsafe functions */

struct obx_feed *
obx_feed_alloc(const struct obx_feed_ops *ops, size_t impl_size)
{
    struct obx_feed *feed = calloc(1, sizeof(*feed));

    if (feed == NULL) {
        return NULL;
    }
    feed->ops = ops;
    feed->impl = calloc(1, impl_size);
    if (feed->impl == NULL) {
        free(feed);
        return NULL;
    }
    return feed;
}
