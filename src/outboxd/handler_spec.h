/* SPDX-License-Identifier: MIT */
/*
 * handler_spec.h - handlers declared on outboxd's command line or in the
 * environment, so a consumer needs no C:
 *
 *   NAME[@SUBJECT_FILTER]=sql:STATEMENT   STATEMENT runs with $1 = the envelope
 *                                         (jsonb) inside the ledger transaction
 *   NAME[@SUBJECT_FILTER]=exec:COMMAND    COMMAND runs with the envelope on
 *                                         stdin: exit 0 done, 75 retry later,
 *                                         anything else failed
 */
#ifndef OBX_HANDLER_SPEC_H
#define OBX_HANDLER_SPEC_H

#include <stddef.h>

#include "outbox/outbox.h"

enum obx_handler_spec_kind { OBX_SPEC_SQL, OBX_SPEC_EXEC };

struct obx_handler_spec {
    char name[65];
    char *filter; /* owned; NULL: every event */
    enum obx_handler_spec_kind kind;
    char *body; /* owned: the statement or the command */
};

/* Parses `text`; OUTBOX_EINVAL names what is wrong. Free with obx_handler_spec_fini(). */
outbox_status obx_handler_spec_parse(const char *text, struct obx_handler_spec *out,
                                     outbox_error *err);
void obx_handler_spec_fini(struct obx_handler_spec *spec);

/* Prefix of the environment variables holding specs: OUTBOX_HANDLER_1, _2, ... */
#define OBX_HANDLER_ENV_PREFIX "OUTBOX_HANDLER_"

#endif
