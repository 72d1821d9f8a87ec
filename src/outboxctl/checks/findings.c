/* SPDX-License-Identifier: MIT */
/*
 * findings.c - outboxctl doctor's findings (see doctor.h).
 */
#include "doctor.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/banned.h" /* last: poisons unsafe functions */

void
obx_doctor_add(struct obx_doctor *d, const char *check, const char *level, const char *fix,
               const char *fmt, ...)
{
    char saw[600];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(saw, sizeof(saw), fmt, ap);
    va_end(ap);
    json_array_append_new(d->findings, json_pack("{s:s, s:s, s:s, s:s?}", "check", check, "level",
                                                 level, "saw", saw, "fix", fix));
    d->errors += strcmp(level, "error") == 0;
    d->warnings += strcmp(level, "warn") == 0;
}
