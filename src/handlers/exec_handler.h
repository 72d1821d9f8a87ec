/* SPDX-License-Identifier: MIT */
/*
 * exec_handler.h - the exec: handlers outboxd hosts from declarations (see
 * outboxd/handler_spec.h) and outbox-bench measures: a command run with
 * the envelope on stdin. The sql: ones are the worker library's own
 * (outbox_consumer_add_sql_handler).
 */
#ifndef OBX_EXEC_HANDLER_H
#define OBX_EXEC_HANDLER_H

#include "outbox/worker.h"

/* What an exec handler runs. Borrowed for the consumer's lifetime. */
struct obx_exec_handler {
    const char *command; /* passed to /bin/sh -c */
    int timeout_ms;      /* then SIGKILL, and the run counts as failed */
};

/* ctx: a struct obx_exec_handler. */
outbox_handler_result obx_exec_handler(void *ctx, const outbox_delivery *d, outbox_error *err);

/* Exit status of an exec handler that means "retry later, spend no attempt" (EX_TEMPFAIL). */
#define OBX_EXEC_RETRY_STATUS 75

#endif
