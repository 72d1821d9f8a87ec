/* SPDX-License-Identifier: MIT */
/*
 * error.h - filling an outbox_error.
 *
 * Public entry points clear `err` once with obx_error_reset(); everything
 * below them reports with obx_fail(). Only the first failure is kept: the
 * root cause is worth more than the cleanup errors that follow it.
 */
#ifndef OBX_ERROR_H
#define OBX_ERROR_H

#include "outbox/outbox.h"

void obx_error_reset(outbox_error *err);

/* Returns `code`, so callers can write `return obx_fail(err, ...);`. */
outbox_status obx_fail(outbox_error *err, outbox_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* True if `err` holds a database error with exactly this SQLSTATE. */
int obx_error_is_sqlstate(const outbox_error *err, const char *sqlstate);

#endif
