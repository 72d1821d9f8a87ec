/* SPDX-License-Identifier: MIT */
/*
 * relay_options.c - relay defaults, checks and owned copies.
 *
 * Every bound is checked here once, so the loop can trust its options;
 * a bad value is OUTBOX_EINVAL naming the option and its accepted range.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "owned_strings.h"
#include "relay_internal.h"
#include "sql.h"
#include "subject.h"

#include "banned.h" /* last: poisons unsafe functions */

void
outbox_relay_options_init(outbox_relay_options *o)
{
    memset(o, 0, sizeof(*o));
    o->schema = "outbox";
    o->nats_url = "nats://127.0.0.1:4222";
    o->bus = OUTBOX_BUS_JETSTREAM;
    o->mode = OUTBOX_RELAY_MARK;
    o->stream = "EVENTS";
    o->subject_prefix = "events";
    o->ce_source = "pgoutbox";
    o->batch_size = 100;
    o->lease_seconds = 60;
    o->max_attempts = 10;
    o->max_lease_expiries = 5;
    o->publish_timeout_ms = 5000;
    o->max_in_flight = 1024;
    o->poll_max_ms = 1000;
    o->listen = 1;
    o->backoff_base_ms = 5000;
    o->backoff_cap_ms = 300000;
    o->retention_seconds = 86400;
    o->drain_timeout_ms = 10000;
    o->stream_max_age_seconds = 7LL * 24 * 3600;
    o->stream_max_bytes = -1;
    o->duplicate_window_seconds = 3600;
}

/* NATS stream names: no whitespace, dots or wildcards (they become API subjects). */
static int
stream_name_valid(const char *name)
{
    size_t len = name ? strlen(name) : 0;

    return len > 0 && len <= 32 && obx_token_valid(name, len);
}

static outbox_status
check_numbers(const outbox_relay_options *o, outbox_error *err)
{
    const struct obx_range ranges[] = {
        {"batch_size", o->batch_size, 1, 10000},
        {"lease_seconds", o->lease_seconds, 1, 3600},
        {"max_attempts", o->max_attempts, 1, 1000},
        {"max_lease_expiries", o->max_lease_expiries, 1, 1000},
        {"publish_timeout_ms", o->publish_timeout_ms, 100, 600000},
        {"max_in_flight", o->max_in_flight, 1, 65536},
        {"poll_max_ms", o->poll_max_ms, 10, 60000},
        {"backoff_base_ms", o->backoff_base_ms, 1, 3600000},
        {"backoff_cap_ms", o->backoff_cap_ms, o->backoff_base_ms, 86400000},
        {"retention_seconds", o->retention_seconds, 0, 365LL * 86400},
        {"drain_timeout_ms", o->drain_timeout_ms, 0, 600000},
        {"stream_max_age_seconds", o->stream_max_age_seconds, 0, 100LL * 365 * 86400},
        {"stream_max_bytes", o->stream_max_bytes, -1, 1LL << 62},
        {"duplicate_window_seconds", o->duplicate_window_seconds, 1, 7 * 86400},
    };
    return obx_check_ranges(ranges, sizeof(ranges) / sizeof(ranges[0]), err);
}

static outbox_status
check_options(const outbox_relay_options *o, outbox_error *err)
{
    outbox_status st;

    if (o->database_url == NULL || o->database_url[0] == '\0') {
        return obx_fail(err, OUTBOX_EINVAL, "database_url is required");
    }
    if (o->bus == OUTBOX_BUS_DB) {
        return obx_fail(err, OUTBOX_EINVAL,
                        "bus db needs no relay: consumers read the outbox table directly");
    }
    st = outbox_schema_name_check(o->schema, err);
    if (st == OUTBOX_OK) {
        st = obx_subject_prefix_check(o->subject_prefix, err);
    }
    if (st == OUTBOX_OK && !stream_name_valid(o->stream)) {
        st = obx_fail(err, OUTBOX_EINVAL, "stream \"%s\" must be 1 to 32 of [A-Za-z0-9_-]",
                      o->stream ? o->stream : "");
    }
    if (st == OUTBOX_OK && (o->nats_url == NULL || o->nats_url[0] == '\0')) {
        st = obx_fail(err, OUTBOX_EINVAL, "nats_url is required");
    }
    return st == OUTBOX_OK ? check_numbers(o, err) : st;
}

outbox_status
obx_relay_options_adopt(struct outbox_relay *relay, const outbox_relay_options *opts,
                        outbox_error *err)
{
    outbox_relay_options *o = &relay->opts;
    const char **const strings[] = {&o->database_url,
                                    &o->schema,
                                    &o->nats_url,
                                    &o->stream,
                                    &o->subject_prefix,
                                    &o->ce_source,
                                    &o->name,
                                    &o->nats_creds_file,
                                    &o->nats_tls_ca_file,
                                    &o->nats_tls_cert_file,
                                    &o->nats_tls_key_file,
                                    &o->crash_on_event_type};
    outbox_status st = check_options(opts, err);

    if (st != OUTBOX_OK) {
        return st;
    }
    *o = *opts;
    if (obx_owned_strings_adopt(&relay->owned, strings, sizeof(strings) / sizeof(strings[0])) !=
        0) {
        return obx_fail(err, OUTBOX_ENOMEM, "relay options: out of memory");
    }
    if (o->name == NULL) {
        obx_default_replica_name(relay->default_name, sizeof(relay->default_name));
        o->name = relay->default_name;
    }
    return OUTBOX_OK;
}

void
obx_relay_options_release(struct outbox_relay *relay)
{
    obx_owned_strings_fini(&relay->owned);
}
