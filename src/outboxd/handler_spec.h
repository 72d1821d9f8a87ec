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
 *   NAME[@SUBJECT_FILTER]=http:URL        each event POSTed to URL as a
 *                                         CloudEvent (docs/consumers.md)
 *
 * exec and http take options between brackets before the colon, comma
 * separated: exec[in_flight=4,timeout=30]:COMMAND,
 * http[in_flight=16,token_file=/run/t,header=X-Tenant: eu]:https://...
 */
#ifndef OBX_HANDLER_SPEC_H
#define OBX_HANDLER_SPEC_H

#include <stddef.h>

#include "outbox/outbox.h"

enum obx_handler_spec_kind { OBX_SPEC_SQL, OBX_SPEC_EXEC, OBX_SPEC_HTTP };

enum {
    OBX_SPEC_DEFAULT_IN_FLIGHT = 8, /* exec: children at once (http: OBX_HTTP_DEFAULT_IN_FLIGHT) */
    OBX_SPEC_MAX_HEADERS = 16,
};

struct obx_handler_spec {
    char name[65];
    char *filter; /* owned; NULL: every event */
    enum obx_handler_spec_kind kind;
    char *body;          /* owned: the statement, the command or the URL */
    int in_flight;       /* exec, http: runs at once (1..256) */
    int timeout_seconds; /* exec, http: 0: OUTBOX_HANDLER_TIMEOUT_SECONDS */
    int structured;      /* http: CloudEvents structured mode (mode=structured) */
    char *token_file;    /* http: owned; the bearer token's file; NULL: none */
    char *ca_file;       /* http: owned; the CA bundle for https; NULL: the system's */
    char *headers[OBX_SPEC_MAX_HEADERS]; /* http: owned, "Name: value" */
    size_t header_count;
};

/* Parses `text`; OUTBOX_EINVAL names what is wrong. Free with obx_handler_spec_fini(). */
outbox_status obx_handler_spec_parse(const char *text, struct obx_handler_spec *out,
                                     outbox_error *err);
void obx_handler_spec_fini(struct obx_handler_spec *spec);

/* Prefix of the environment variables holding specs: OUTBOX_HANDLER_1, _2, ... */
#define OBX_HANDLER_ENV_PREFIX "OUTBOX_HANDLER_"

#endif
