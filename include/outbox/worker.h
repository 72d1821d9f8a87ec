/* SPDX-License-Identifier: MIT */
/*
 * worker.h - relay and consumers (liboutbox-worker, which links nats.c).
 *
 * The rules of outbox.h hold here too: outbox_status returns, an optional
 * caller-owned outbox_error, borrowed arguments, x_free(NULL) is a no-op.
 */
#ifndef OUTBOX_WORKER_H
#define OUTBOX_WORKER_H

#include "outbox/outbox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- logging --------------------------------------------------------------------------- */

typedef enum outbox_log_level {
    OUTBOX_LOG_DEBUG,
    OUTBOX_LOG_INFO,
    OUTBOX_LOG_WARN,
    OUTBOX_LOG_ERROR,
} outbox_log_level;

/*
 * Receives one formatted line: a constant message followed by key=value
 * fields. `line` is valid only during the call. Called from the worker's
 * threads, so it must be thread-safe.
 */
typedef void (*outbox_log_fn)(void *ctx, outbox_log_level level, const char *line);

/*
 * Installs `fn` for the whole process (NULL: log nowhere, the default).
 * Call it once at start-up, before starting workers. The writer library
 * never logs: it returns every failure to its caller.
 */
OUTBOX_API void outbox_set_logger(outbox_log_fn fn, void *ctx, outbox_log_level min_level);

#ifdef __cplusplus
}
#endif

#endif /* OUTBOX_WORKER_H */
