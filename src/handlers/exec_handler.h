/* SPDX-License-Identifier: MIT */
/*
 * exec_handler.h - the exec: handlers outboxd hosts from declarations (see
 * outboxd/handler_spec.h) and outbox-bench measures: a command run with
 * the envelope on stdin. The sql: ones are the worker library's own
 * (outbox_consumer_add_sql_handler).
 */
#ifndef OBX_EXEC_HANDLER_H
#define OBX_EXEC_HANDLER_H

#include "consume/handler.h"
#include "outbox/worker.h"

/* The most children one exec handler runs at once. */
enum { OBX_EXEC_MAX_CHILDREN = OBX_MAX_IN_FLIGHT };

struct child;

/*
 * What an exec handler runs, and its children while they run. Set
 * `command` and `timeout_ms`, zero the rest; borrowed for the consumer's
 * lifetime; obx_exec_handler_fini() kills what still runs.
 */
struct obx_exec_handler {
    const char *command;     /* passed to /bin/sh -c */
    int timeout_ms;          /* then SIGKILL, and the run counts as failed */
    struct child **children; /* OBX_EXEC_MAX_CHILDREN, allocated at the first run */
    size_t count;
    unsigned long lost_tag; /* a run that found no memory to start, reported next */
    int lost;
};

/* The exec kind, for obx_consumer_add_external: ctx is a struct obx_exec_handler. */
extern const struct obx_handler_ops obx_exec_kind;

/* One run at a time, as an ext callback (outbox-bench): ctx is a struct obx_exec_handler. */
outbox_handler_result obx_exec_handler(void *ctx, const outbox_delivery *d, outbox_error *err);

void obx_exec_handler_fini(struct obx_exec_handler *h);

/* Exit status of an exec handler that means "retry later, spend no attempt" (EX_TEMPFAIL). */
#define OBX_EXEC_RETRY_STATUS 75

#endif
