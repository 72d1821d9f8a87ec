/* SPDX-License-Identifier: MIT */
/*
 * error.c - filling an outbox_error.
 *
 * The failure path allocates nothing: the error has fixed buffers, and a
 * message that does not fit is cut, never grown.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "banned.h" /* last: poisons unsafe functions */

void
obx_error_reset(outbox_error *err)
{
    if (err != NULL) {
        err->code = OUTBOX_OK;
        err->sqlstate[0] = '\0';
        err->message[0] = '\0';
    }
}

outbox_status
obx_fail(outbox_error *err, outbox_status code, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || err->code != OUTBOX_OK) {
        return code;
    }
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return code;
}

int
obx_error_is_sqlstate(const outbox_error *err, const char *sqlstate)
{
    return err != NULL && err->code == OUTBOX_EDB && strcmp(err->sqlstate, sqlstate) == 0;
}

const char *
outbox_status_name(outbox_status status)
{
    switch (status) {
    case OUTBOX_OK:
        return "OUTBOX_OK";
    case OUTBOX_EINVAL:
        return "OUTBOX_EINVAL";
    case OUTBOX_ENOMEM:
        return "OUTBOX_ENOMEM";
    case OUTBOX_ENOTXN:
        return "OUTBOX_ENOTXN";
    case OUTBOX_EUNAVAILABLE:
        return "OUTBOX_EUNAVAILABLE";
    case OUTBOX_EDB:
        return "OUTBOX_EDB";
    case OUTBOX_EREJECTED:
        return "OUTBOX_EREJECTED";
    case OUTBOX_ECONFLICT:
        return "OUTBOX_ECONFLICT";
    }
    return "OUTBOX_UNKNOWN";
}
