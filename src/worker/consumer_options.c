/* SPDX-License-Identifier: MIT */
/*
 * consumer_options.c - consumer defaults, checks, owned copies, and the
 * handler registry.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer_internal.h"
#include "error.h"
#include "sql.h"
#include "subject.h"

#include "banned.h" /* last: poisons unsafe functions */

void
outbox_consumer_options_init(outbox_consumer_options *o)
{
    memset(o, 0, sizeof(*o));
    o->schema = "outbox";
    o->bus = OUTBOX_BUS_JETSTREAM;
    o->nats_url = "nats://127.0.0.1:4222";
    o->stream = "EVENTS";
    o->subject_prefix = "events";
    o->consumer_name = "outbox";
    o->batch_size = 100;
    o->ack_wait_seconds = 60;
    o->max_deliver = -1;
    o->lease_seconds = 60;
    o->ledger_lease_seconds = 1800;
    o->max_attempts = 10;
    o->backoff_base_ms = 5000;
    o->backoff_cap_ms = 300000;
    o->poll_max_ms = 1000;
    o->mode = OUTBOX_RELAY_MARK;
    o->ledger_retention_seconds = 30LL * 86400;
    o->retention_seconds = 86400;
    o->stream_max_age_seconds = 7LL * 86400;
}

static outbox_status
check_numbers(const outbox_consumer_options *o, outbox_error *err)
{
    const struct obx_range ranges[] = {
        {"batch_size", o->batch_size, 1, 10000},
        {"ack_wait_seconds", o->ack_wait_seconds, 1, 86400},
        {"max_deliver", o->max_deliver, -1, 1000000000},
        {"lease_seconds", o->lease_seconds, 1, 3600},
        {"ledger_lease_seconds", o->ledger_lease_seconds, 1, 86400},
        {"max_attempts", o->max_attempts, 1, 1000},
        {"backoff_base_ms", o->backoff_base_ms, 1, 3600000},
        {"backoff_cap_ms", o->backoff_cap_ms, o->backoff_base_ms, 86400000},
        {"poll_max_ms", o->poll_max_ms, 10, 60000},
        {"ledger_retention_seconds", o->ledger_retention_seconds, 1, 3650LL * 86400},
        {"retention_seconds", o->retention_seconds, 0, 365LL * 86400},
    };
    return obx_check_ranges(ranges, sizeof(ranges) / sizeof(ranges[0]), err);
}

static outbox_status
check_options(const outbox_consumer_options *o, outbox_error *err)
{
    outbox_status st = OUTBOX_OK;

    if (o->database_url == NULL || o->database_url[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "database_url is required (the ledger lives there)");
    }
    if (o->bus != OUTBOX_BUS_JETSTREAM && o->bus != OUTBOX_BUS_DB) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "consumers read from jetstream or db; nats-core has no consumer side");
    }
    st = outbox_schema_name_check(o->schema, err);
    if (st == OUTBOX_OK) {
        st = obx_subject_prefix_check(o->subject_prefix, err);
    }
    if (st == OUTBOX_OK && (o->consumer_name == NULL ||
                            !obx_token_valid(o->consumer_name, strlen(o->consumer_name)))) {
        st = obx_fail(err, OUTBOX_EINVAL, "consumer_name \"%s\" must be one token of [A-Za-z0-9_-]",
                      o->consumer_name ? o->consumer_name : "");
    }
    if (st == OUTBOX_OK) {
        st = check_numbers(o, err);
    }
    /* A duplicate that outlives its ledger row would run its handlers again. */
    if (st == OUTBOX_OK && o->bus == OUTBOX_BUS_JETSTREAM &&
        o->ledger_retention_seconds < o->stream_max_age_seconds) {
        st = obx_fail(err, OUTBOX_EINVAL,
                      "ledger retention %lld s is shorter than the stream's max age %lld s: "
                      "a redelivered event could run its handlers again",
                      o->ledger_retention_seconds, o->stream_max_age_seconds);
    }
    return st;
}

outbox_status
obx_consumer_options_adopt(struct outbox_consumer *c, const outbox_consumer_options *opts,
                           outbox_error *err)
{
    outbox_consumer_options *o = &c->opts;
    const char **const strings[] = {&o->database_url,
                                    &o->schema,
                                    &o->nats_url,
                                    &o->stream,
                                    &o->subject_prefix,
                                    &o->consumer_name,
                                    &o->name,
                                    &o->nats_creds_file,
                                    &o->nats_tls_ca_file,
                                    &o->nats_tls_cert_file,
                                    &o->nats_tls_key_file};
    outbox_status st = check_options(opts, err);

    if (st != OUTBOX_OK) {
        return st;
    }
    *o = *opts;
    if (obx_owned_strings_adopt(&c->owned, strings, sizeof(strings) / sizeof(strings[0])) != 0) {
        return obx_fail(err, OUTBOX_ENOMEM, "consumer options: out of memory");
    }
    if (o->name == NULL) {
        obx_default_replica_name(c->default_name, sizeof(c->default_name));
        o->name = c->default_name;
    }
    return OUTBOX_OK;
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
    struct obx_handler h = {.kind = OBX_HANDLER_TX, .tx = fn, .ctx = ctx};

    return add_handler(c, name, subject_filter, &h, err);
}

outbox_status
outbox_consumer_add_ext_handler(outbox_consumer *c, const char *name, const char *subject_filter,
                                outbox_ext_handler_fn fn, void *ctx, outbox_error *err)
{
    struct obx_handler h = {.kind = OBX_HANDLER_EXT, .ext = fn, .ctx = ctx};

    return add_handler(c, name, subject_filter, &h, err);
}

outbox_status
outbox_consumer_add_sql_handler(outbox_consumer *c, const char *name, const char *subject_filter,
                                const char *statement, outbox_error *err)
{
    struct obx_handler h = {.kind = OBX_HANDLER_SQL};
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
