/* SPDX-License-Identifier: MIT */
/*
 * buf.c - a growable byte buffer.
 *
 * Grows by doubling so appending n bytes costs O(n) overall.
 */
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "banned.h" /* last: poisons unsafe functions */

void
obx_buf_init(struct obx_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->failed = 0;
}

void
obx_buf_fini(struct obx_buf *b)
{
    free(b->data);
    obx_buf_init(b);
}

void
obx_buf_reset(struct obx_buf *b)
{
    b->len = 0;
    b->failed = 0;
    if (b->data != NULL) {
        b->data[0] = '\0';
    }
}

/* Makes room for `extra` more bytes plus the terminator. */
static int
reserve(struct obx_buf *b, size_t extra)
{
    size_t need, cap;
    char *grown;

    if (b->failed) {
        return 0;
    }
    if (extra > SIZE_MAX / 2 - b->len - 1) {
        b->failed = 1;
        return 0;
    }
    need = b->len + extra + 1;
    if (need <= b->cap) {
        return 1;
    }
    for (cap = b->cap ? b->cap : 256; cap < need;) {
        cap *= 2;
    }
    grown = realloc(b->data, cap);
    if (grown == NULL) {
        b->failed = 1;
        return 0;
    }
    b->data = grown;
    b->cap = cap;
    return 1;
}

void
obx_buf_append(struct obx_buf *b, const char *data, size_t len)
{
    if (!reserve(b, len)) {
        return;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void
obx_buf_append_str(struct obx_buf *b, const char *s)
{
    obx_buf_append(b, s, strlen(s));
}

void
obx_buf_appendf(struct obx_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n)) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

int
obx_buf_failed(const struct obx_buf *b)
{
    return b->failed;
}

char *
obx_buf_take(struct obx_buf *b)
{
    char *data = b->failed ? NULL : b->data;

    if (data == NULL && !b->failed) {
        data = calloc(1, 1);
    }
    if (b->failed) {
        free(b->data);
    }
    obx_buf_init(b);
    return data;
}
