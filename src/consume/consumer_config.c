/* SPDX-License-Identifier: MIT */
/*
 * consumer_config.c - what a consumer checks in its configuration before it
 * takes it (the rules that need more than one setting; each setting's own
 * range was checked when it was set), and the handler registry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "config/config.h"
#include "consumer_internal.h"
#include "envelope/subject.h"

#include "common/banned.h" /* last: poisons unsafe functions */

outbox_status
obx_consumer_config_check(const struct obx_config *c, outbox_error *err)
{
    if (c->parts != OBX_FOR_CONSUMER) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "a consumer needs a consumer configuration "
                        "(outbox_config_new(OUTBOX_CONFIG_CONSUMER))");
    }
    if (c->database_url == NULL || c->database_url[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL,
                        "database_url is required (OUTBOX_DATABASE_URL): the ledger lives there");
    }
    if (c->bus != OUTBOX_BUS_JETSTREAM && c->bus != OUTBOX_BUS_DB) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "consumers read from jetstream or db; nats-core has no consumer side");
    }
    if (c->backoff_cap_ms < c->backoff_base_ms) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "backoff_cap_ms %lld is below backoff_base_ms %lld: the cap must be "
                        "at least the first delay",
                        c->backoff_cap_ms, c->backoff_base_ms);
    }
    /* A duplicate that outlives its ledger row would run its handlers again. */
    if (c->bus == OUTBOX_BUS_JETSTREAM &&
        c->ledger_retention_days * 86400 < c->stream_max_age_seconds) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "ledger retention %lld s is shorter than the stream's max age %lld s: "
                        "a redelivered event could run its handlers again",
                        c->ledger_retention_days * 86400, c->stream_max_age_seconds);
    }
    return OUTBOX_OK;
}

void
obx_consumer_set_test_hooks(outbox_consumer *c, const struct obx_consumer_test_hooks *hooks)
{
    c->hooks = *hooks;
}

static outbox_status
add_handler(outbox_consumer *c, const char *name, const char *filter, struct obx_handler *h,
            outbox_error *err)
{
    obx_error_reset(err);
    if (!obx_ledger_handler_name_valid(name)) {
        return obx_fail(err, OUTBOX_EINVAL, "handler name \"%s\" must be 1 to 64 of [A-Za-z0-9_.-]",
                        name ? name : "");
    }
    for (int i = 0; i < c->handler_count; i++) {
        if (strcmp(c->handlers[i].name, name) == 0) {
            return obx_fail(err, OUTBOX_EINVAL, "handler \"%s\" is registered twice", name);
        }
    }
    if (c->handler_count >= OBX_MAX_HANDLERS) {
        return obx_fail(err, OUTBOX_EINVAL, "at most %d handlers per consumer", OBX_MAX_HANDLERS);
    }
    if (filter != NULL && obx_subject_filter_check(filter, err) != OUTBOX_OK) {
        return OUTBOX_EINVAL;
    }
    snprintf(h->name, sizeof(h->name), "%s", name);
    h->filter = filter ? strdup(filter) : NULL;
    if (filter != NULL && h->filter == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    c->handlers[c->handler_count++] = *h;
    return OUTBOX_OK;
}

outbox_status
outbox_consumer_add_tx_handler(outbox_consumer *c, const char *name, const char *subject_filter,
                               outbox_tx_handler_fn fn, void *ctx, outbox_error *err)
{
    struct obx_handler h = {.ops = &obx_tx_kind, .tx = fn, .ctx = ctx};

    return add_handler(c, name, subject_filter, &h, err);
}

outbox_status
outbox_consumer_add_ext_handler(outbox_consumer *c, const char *name, const char *subject_filter,
                                outbox_ext_handler_fn fn, void *ctx, outbox_error *err)
{
    struct obx_ext_kind *k = calloc(1, sizeof(*k));
    struct obx_handler h = {.ops = &obx_ext_kind, .ctx = k, .owned_ctx = k, .in_flight = 1};
    outbox_status st;

    if (k == NULL) {
        obx_error_reset(err);
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    *k = (struct obx_ext_kind){.fn = fn, .ctx = ctx};
    st = add_handler(c, name, subject_filter, &h, err);
    if (st != OUTBOX_OK) {
        free(k);
    }
    return st;
}

outbox_status
outbox_consumer_add_sql_handler(outbox_consumer *c, const char *name, const char *subject_filter,
                                const char *statement, outbox_error *err)
{
    struct obx_handler h = {.ops = &obx_sql_kind};
    outbox_status st;

    if (statement == NULL || statement[strspn(statement, " \t\r\n")] == '\0') {
        obx_error_reset(err);
        return obx_fail(err, OUTBOX_EINVAL, "handler \"%s\": the statement is empty",
                        name ? name : "");
    }
    h.statement = strdup(statement);
    if (h.statement == NULL) {
        obx_error_reset(err);
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    st = add_handler(c, name, subject_filter, &h, err);
    if (st != OUTBOX_OK) {
        free(h.statement);
    }
    return st;
}

outbox_status
obx_consumer_add_external(outbox_consumer *c, const char *name, const char *subject_filter,
                          const struct obx_handler_ops *ops, void *ctx, size_t in_flight,
                          outbox_error *err)
{
    struct obx_handler h = {.ops = ops, .ctx = ctx, .in_flight = in_flight};

    if (ops == NULL || ops->start == NULL || ops->wait == NULL || ops->stop == NULL ||
        in_flight < 1 || in_flight > OBX_MAX_IN_FLIGHT) {
        obx_error_reset(err);
        return obx_fail(err, OUTBOX_EINVAL, "handler \"%s\": in flight %zu must be 1 to %d",
                        name ? name : "", in_flight, (int)OBX_MAX_IN_FLIGHT);
    }
    return add_handler(c, name, subject_filter, &h, err);
}
