/* SPDX-License-Identifier: MIT */
/*
 * test_trace.c - `outboxctl trace EVENT_ID`: the outbox row, the message
 * at its stream_seq checked to carry the event's Nats-Msg-Id (and flagged
 * when the stream holds another message there, after the stream was
 * recreated), every handler's ledger row and the dead letters; exit 1 for
 * an event nobody knows, 2 for an id that is not one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "consume_nats.h"
#include "consume_test.h"
#include "ctl_test.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(ctl_trace, .init = setup, .fini = teardown, .timeout = 120);

static void
delete_stream(const char *name)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsErrCode code = 0;

    cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    cr_assert_eq(js_DeleteStream(js, name, NULL, &code), NATS_OK, "delete: error %d", (int)code);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

Test(ctl_trace, shows_the_row_its_stream_message_ledger_rows_and_dead_letters)
{
    struct consume_group g;
    struct harness_proc consumer;
    struct ctl_run r;
    char bad[160], *id, *other;
    json_t *line;

    consume_group_init(&g, "jetstream", "TRACE", NULL);
    relay_env_set(&g.env, "OUTBOX_MAX_ATTEMPTS", "1");
    snprintf(bad, sizeof(bad), "bad@%s.movie.>=sql:SELECT 1/0", g.prefix);
    relay_test_enqueue(conn, 1);
    id = harness_scalar_text(conn, "SELECT id::text FROM outbox.events");
    consume_test_start(&consumer, &g.env, "trace-1",
                       (const char *const[]){CONSUME_EFFECT("good"), bad, NULL});
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "good") == 1 &&
                           harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters") == 1,
                       30000);
    consume_test_stop(&consumer, 10000);

    ctl_expect(&r, &g.env, 0, (const char *const[]){"trace", id, "--json", NULL});
    line = ctl_line(&r, "event", 0);
    cr_assert_str_eq(ctl_str(line, "status"), "done");
    cr_assert_eq(ctl_int(line, "stream_seq"), 1);
    line = ctl_line(&r, "stream", 0);
    cr_assert(json_is_true(json_object_get(line, "matches")), "%s", r.out);
    cr_assert_str_eq(ctl_str(line, "msg_id"), id);
    cr_assert_eq(ctl_count(&r, "ledger"), 2);
    cr_assert_str_eq(ctl_str(ctl_line(&r, "ledger", 1), "status"), "done"); /* good */
    cr_assert_str_eq(ctl_str(ctl_line(&r, "dead_letter", 0), "handler"), "bad");
    ctl_run_fini(&r);

    ctl_expect(&r, &g.env, 0, (const char *const[]){"trace", id, NULL});
    cr_assert(strstr(r.out, "matches=true") != NULL && strstr(r.out, "dead_letter handler=bad"),
              "%s", r.out);
    ctl_run_fini(&r);

    /* The stream lost and made again: sequence 1 is another event's now. */
    relay_test_stop(&g.relay, 10000);
    relay_env_fini(&g.relay_env);
    delete_stream(g.stream);
    {
        char err[512] = "";

        cr_assert_eq(consume_nats_create_stream(harness_nats_url(), g.stream, g.prefix, 3600, err,
                                                sizeof(err)),
                     0, "%s", err);
    }
    harness_exec(conn, "TRUNCATE public.committed");
    relay_test_enqueue(conn, 1);
    other = harness_scalar_text(conn, "SELECT id::text FROM outbox.events WHERE status = "
                                      "'pending'");
    relay_test_env(&g.relay_env, g.stream, g.prefix);
    relay_test_start(&g.relay, &g.relay_env, "trace-relay");
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 20000);
    ctl_expect(&r, &g.env, 0, (const char *const[]){"trace", id, "--json", NULL});
    line = ctl_line(&r, "stream", 0);
    cr_assert(json_is_false(json_object_get(line, "matches")), "%s", r.out);
    cr_assert_str_eq(ctl_str(line, "msg_id"), other);
    ctl_run_fini(&r);

    ctl_expect(&r, &g.env, 1,
               (const char *const[]){"trace", "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b", NULL});
    cr_assert(strstr(r.out, "not found") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &g.env, 2, (const char *const[]){"trace", "not-an-id", NULL});
    ctl_run_fini(&r);
    consume_group_fini(&g);
    free(other);
    free(id);
}
