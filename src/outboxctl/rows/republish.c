/* SPDX-License-Identifier: MIT */
/*
 * republish.c - outboxctl's publishes, through the relay's own code (see
 * republish.h). A batch is the rows of one statement: leased-row shaped
 * (id, envelope), prepared by obx_relay_batch_prepare() as the relay
 * prepares a lease, sent and collected through the bus, its results mapped
 * by obx_relay_batch_apply_results(). No row is finished: outboxctl only
 * publishes copies; the rows stay as they are.
 */
#include "republish.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/bus.h"
#include "bus/stream.h"
#include "common/buf.h"
#include "common/error.h"
#include "relay/relay_batch.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

struct obx_ctl_publisher {
    struct obx_bus *bus;
    const char *prefix; /* borrowed from the configuration */
    const char *schema; /* borrowed from the configuration */
};

static outbox_status
ensure_stream(const struct obx_config *cfg, struct obx_bus *bus, outbox_error *err)
{
    struct obx_stream_options so;

    obx_stream_options_init(&so);
    so.name = cfg->stream;
    so.subjects_prefix = cfg->subject_prefix;
    so.max_age_seconds = cfg->stream_max_age_seconds;
    so.max_bytes = cfg->stream_max_bytes;
    so.replicas = (int)cfg->stream_replicas;
    so.duplicate_window_seconds = cfg->duplicate_window_seconds;
    so.check_only = 1; /* the relay owns duplicate_window: create what is missing, change nothing */
    return obx_stream_ensure(bus, &so, err);
}

outbox_status
obx_ctl_publisher_open(const struct obx_config *cfg, struct obx_ctl_publisher **out,
                       outbox_error *err)
{
    struct obx_ctl_publisher *p = calloc(1, sizeof(*p));
    struct obx_bus_options bo;
    outbox_status st;

    if (p == NULL) {
        return obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    }
    obx_bus_options_from_config(&bo, cfg, "outboxctl");
    bo.kind = OBX_BUS_JETSTREAM; /* republishing needs acks, whatever OUTBOX_BUS says */
    p->prefix = cfg->subject_prefix;
    p->schema = cfg->schema;
    st = obx_bus_open(&bo, &p->bus, err);
    if (st == OUTBOX_OK) {
        st = ensure_stream(cfg, p->bus, err);
    }
    if (st != OUTBOX_OK) {
        obx_ctl_publisher_close(p);
        return st;
    }
    *out = p;
    return OUTBOX_OK;
}

void
obx_ctl_publisher_close(struct obx_ctl_publisher *p)
{
    if (p != NULL) {
        obx_bus_close(p->bus);
        free(p);
    }
}

static const char *
outcome_name(const struct obx_relay_row *row)
{
    switch (row->outcome) {
    case OBX_ROW_DONE:
        return row->duplicate ? "duplicate" : "published";
    case OBX_ROW_INVALID:
        return "invalid";
    case OBX_ROW_RETRY:
    case OBX_ROW_RELEASE:
        break;
    }
    return "failed";
}

/* The batch's outcome per row, appended to `results`. */
static void
append_results(const struct obx_relay_batch *b, json_t *rows, json_t *results)
{
    for (size_t i = 0; i < b->count; i++) {
        const struct obx_relay_row *row = &b->rows[i];
        json_t *src = json_array_get(rows, i);
        const char *msg_id = json_string_value(json_object_get(src, "msg_id"));
        json_t *r = json_pack("{s:O, s:s?, s:s}", "id", json_object_get(src, "id"), "msg_id",
                              msg_id, "outcome", outcome_name(row));

        json_object_set_new(r, "stream_seq",
                            row->stream_seq > 0 ? json_integer(row->stream_seq) : json_null());
        if (row->outcome != OBX_ROW_DONE && row->reason[0] != '\0') {
            json_object_set_new(r, "reason", json_string(row->reason));
        }
        json_array_append_new(results, r);
    }
}

outbox_status
obx_ctl_republish(struct obx_ctl_publisher *p, PGconn *conn, const struct obx_ctl_stmt *stmt,
                  json_t *results, outbox_error *err)
{
    size_t max_body = obx_bus_body_limit(obx_bus_max_payload(p->bus));
    struct obx_relay_batch b;
    struct obx_lease lease;
    json_t *rows = NULL;
    outbox_status st;

    st = obx_ctl_query_lease(conn, p->schema, stmt, &lease, &rows, err);
    if (st != OUTBOX_OK) {
        return st;
    }
    st = obx_relay_batch_prepare(&b, &lease, p->prefix, max_body, err);
    if (st == OUTBOX_OK) {
        for (size_t k = 0; k < b.msg_count; k++) {
            json_t *src = json_array_get(rows, b.msg_row[k]);

            b.msgs[k].msg_id = json_string_value(json_object_get(src, "msg_id"));
        }
        if (b.msg_count > 0) {
            st = obx_bus_send(p->bus, b.msgs, b.msg_count, err);
        }
        if (st == OUTBOX_OK && b.msg_count > 0) {
            st = obx_bus_collect(p->bus, b.results, b.msg_count, err);
        }
        if (st == OUTBOX_OK) {
            obx_relay_batch_apply_results(&b);
            append_results(&b, rows, results);
        }
        obx_relay_batch_fini(&b);
    }
    obx_lease_fini(&lease);
    json_decref(rows);
    return st;
}

int
obx_ctl_result_stored(json_t *result)
{
    const char *outcome = json_string_value(json_object_get(result, "outcome"));

    return outcome != NULL &&
           (strcmp(outcome, "published") == 0 || strcmp(outcome, "duplicate") == 0);
}

outbox_status
obx_ctl_record_seqs(PGconn *conn, const char *schema, json_t *results, outbox_error *err)
{
    struct obx_buf ids, seqs;
    size_t i, n = 0;
    json_t *r;
    outbox_status st = OUTBOX_OK;

    obx_buf_init(&ids);
    obx_buf_init(&seqs);
    json_array_foreach(results, i, r)
    {
        json_t *seq = json_object_get(r, "stream_seq");

        if (obx_ctl_result_stored(r) && json_is_integer(seq)) {
            obx_buf_appendf(&ids, "%s%s", n ? "," : "{",
                            json_string_value(json_object_get(r, "id")));
            obx_buf_appendf(&seqs, "%s%lld", n ? "," : "{", (long long)json_integer_value(seq));
            n++;
        }
    }
    obx_buf_append_str(&ids, "}");
    obx_buf_append_str(&seqs, "}");
    if (obx_buf_failed(&ids) || obx_buf_failed(&seqs)) {
        st = obx_fail(err, OUTBOX_ENOMEM, "out of memory");
    } else if (n > 0) {
        const char *params[] = {ids.data, seqs.data};
        struct obx_ctl_stmt stmt = {obx_sql_events_record_seq, params, 2};
        json_t *none = NULL;

        st = obx_ctl_query(conn, schema, &stmt, &none, err);
        json_decref(none);
    }
    obx_buf_fini(&seqs);
    obx_buf_fini(&ids);
    return st;
}
