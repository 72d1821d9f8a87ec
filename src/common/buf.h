/* SPDX-License-Identifier: MIT */
/*
 * buf.h - a growable byte buffer, always NUL-terminated.
 *
 * Caller memory with _init/_fini. After an allocation failure the buffer
 * is marked failed and further appends do nothing, so a sequence of
 * appends needs one check at the end (obx_buf_failed), not one per call.
 */
#ifndef OBX_BUF_H
#define OBX_BUF_H

#include <stddef.h>

struct obx_buf {
    char *data; /* owned; NULL until the first append */
    size_t len; /* bytes used, without the terminator */
    size_t cap; /* bytes allocated */
    int failed; /* an allocation failed; contents are incomplete */
};

void obx_buf_init(struct obx_buf *b);
void obx_buf_fini(struct obx_buf *b);
void obx_buf_reset(struct obx_buf *b); /* keeps the memory, empties the text */
void obx_buf_append(struct obx_buf *b, const char *data, size_t len);
void obx_buf_append_str(struct obx_buf *b, const char *s);
void obx_buf_appendf(struct obx_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int obx_buf_failed(const struct obx_buf *b);

/* Hands the text over; the buffer is left empty. NULL if it failed. */
char *obx_buf_take(struct obx_buf *b);

#endif
