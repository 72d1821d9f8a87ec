/* SPDX-License-Identifier: MIT */
/*
 * ledger_handlers_pg.c - a consumer's bindings into the handlers table
 * (see ledger.h), for `outboxctl subjects`.
 *
 * Names are the ledger's ([A-Za-z0-9_.-]) and filters subject tokens with
 * `*` and `>`, checked here again, so the arrays travel as text literals
 * that need no quoting.
 */
#include "ledger.h"

#include <string.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/text.h"
#include "envelope/subject.h"
#include "ledger_int.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static outbox_status
check_binding(const struct obx_ledger_binding *b, outbox_error *err)
{
    char quoted[160];

    if (!obx_ledger_handler_name_valid(b->name)) {
        obx_quote_for_message(b->name ? b->name : "", quoted, sizeof(quoted));
        return obx_fail(err, OUTBOX_EINVAL, "handler %s must be 1 to 64 of [A-Za-z0-9_.-]", quoted);
    }
    if (b->subject_filter == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "handler %s: a subject filter is required", b->name);
    }
    return obx_subject_filter_check(b->subject_filter, err);
}

/* `{a,b,...}` of the names (`filters` 0) or of the filters (1). */
static void
build_array(const struct obx_ledger_registration *r, int filters, struct obx_buf *out)
{
    obx_buf_append_str(out, "{");
    for (size_t i = 0; i < r->count; i++) {
        const struct obx_ledger_binding *b = &r->bindings[i];

        obx_buf_appendf(out, "%s%s", filters ? b->subject_filter : b->name,
                        i + 1 < r->count ? "," : "");
    }
    obx_buf_append_str(out, "}");
}

outbox_status
obx_ledger_register(struct obx_ledger *ledger, const struct obx_ledger_registration *r,
                    outbox_error *err)
{
    struct obx_buf names, filters;
    outbox_status status = OUTBOX_OK;

    obx_error_reset(err);
    for (size_t i = 0; i < r->count && status == OUTBOX_OK; i++) {
        status = check_binding(&r->bindings[i], err);
    }
    if (status != OUTBOX_OK || r->count == 0) {
        return status;
    }
    obx_buf_init(&names);
    obx_buf_init(&filters);
    build_array(r, 0, &names);
    build_array(r, 1, &filters);
    if (obx_buf_failed(&names) || obx_buf_failed(&filters)) {
        status = obx_fail(err, OUTBOX_ENOMEM, "register handlers: out of memory");
    } else {
        const char *params[] = {names.data, filters.data, r->consumer_group,
                                r->backend, r->stream,    r->replica};

        status = obx_pg_session_require(&ledger->pg, err);
        if (status == OUTBOX_OK) {
            status = obx_pg_session_run(&ledger->pg, OBX_LEDGER_REGISTER, params, 6,
                                        "register handlers", err);
        }
        if (status == OUTBOX_OK) {
            /* Where each new handler's per-aggregate order starts (migration 0017). */
            status = obx_pg_session_run(&ledger->pg, OBX_LEDGER_ORDER_BASELINE, params, 1,
                                        "take order baselines", err);
        }
    }
    obx_buf_fini(&filters);
    obx_buf_fini(&names);
    return status;
}
