/* SPDX-License-Identifier: MIT */
/*
 * version.c - the library's version, set by the build from project().
 */
#include "outbox/outbox.h"

#include "common/banned.h" /* last: poisons unsafe functions */

const char *
outbox_version(void)
{
    return OUTBOX_VERSION_STRING;
}
