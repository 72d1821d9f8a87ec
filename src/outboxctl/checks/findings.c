/* SPDX-License-Identifier: MIT */
/*
 * findings.c - outboxctl doctor's findings (see doctor.h).
 */
#include "doctor.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/secret.h"

#include "common/banned.h" /* last: poisons unsafe functions */

void
obx_doctor_add(struct obx_doctor *d, const char *check, const char *level, const char *fix,
               const char *fmt, ...)
{
    char text[600], saw[700];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    /* What a check saw may quote a server's or a library's message about a URL. */
    obx_mask_secrets(text, saw, sizeof(saw));
    json_array_append_new(d->findings, json_pack("{s:s, s:s, s:s, s:s?}", "check", check, "level",
                                                 level, "saw", saw, "fix", fix));
    d->errors += strcmp(level, "error") == 0;
    d->warnings += strcmp(level, "warn") == 0;
}
