/* SPDX-License-Identifier: MIT */
/*
 * test_audit.c - the way back after the broker lost data: `outboxctl
 * audit` finds every retained row a deleted-and-recreated stream no
 * longer holds (exit 1), `audit --repair` and `replay` publish them again
 * exactly as the relay did (same body, same headers), and consumers end
 * with 0 lost and 0 duplicate effects: a handler that had run skips the
 * copy (its ledger), a handler that never saw the events runs each once.
 * Inside the duplicate window a replay stores nothing new.
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

TestSuite(ctl_audit, .init = setup, .fini = teardown, .timeout = 240);

struct js {
    natsConnection *nc;
    jsCtx *js;
};

static void
js_open(struct js *j)
{
    cr_assert_eq(natsConnection_ConnectTo(&j->nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&j->js, j->nc, NULL), NATS_OK);
}

static void
js_close(struct js *j)
{
    jsCtx_Destroy(j->js);
    natsConnection_Destroy(j->nc);
}

static void
delete_stream(const char *name)
{
    struct js j;
    jsErrCode code = 0;

    js_open(&j);
    cr_assert_eq(js_DeleteStream(j.js, name, NULL, &code), NATS_OK, "delete: error %d", (int)code);
    js_close(&j);
}

/* Body and every header of message `seq`, as one comparable text (malloc'd). */
static char *
message_text(const char *stream, uint64_t seq)
{
    struct js j;
    natsMsg *m = NULL;
    jsErrCode code = 0;
    const char **keys = NULL;
    int count = 0;
    size_t cap = 65536, used = 0;
    char *out = malloc(cap);

    js_open(&j);
    cr_assert_eq(js_GetMsg(&m, j.js, stream, seq, NULL, &code), NATS_OK, "message %llu: %d",
                 (unsigned long long)seq, (int)code);
    cr_assert_eq(natsMsgHeader_Keys(m, &keys, &count), NATS_OK);
    used += (size_t)snprintf(out + used, cap - used, "subject=%s\n", natsMsg_GetSubject(m));
    /* Header order is not meaningful: sort the keys. */
    for (int a = 0; a < count; a++) {
        for (int b = a + 1; b < count; b++) {
            if (strcmp(keys[b], keys[a]) < 0) {
                const char *t = keys[a];

                keys[a] = keys[b];
                keys[b] = t;
            }
        }
    }
    for (int i = 0; i < count; i++) {
        const char *v = NULL;

        natsMsgHeader_Get(m, keys[i], &v);
        used += (size_t)snprintf(out + used, cap - used, "%s: %s\n", keys[i], v ? v : "");
    }
    snprintf(out + used, cap - used, "\n%.*s", natsMsg_GetDataLength(m), natsMsg_GetData(m));
    free((void *)keys);
    natsMsg_Destroy(m);
    js_close(&j);
    return out;
}

static long long
stream_seq_of(const char *id)
{
    return consume_test_ll(conn, "SELECT stream_seq FROM outbox.events WHERE id = $1::uuid", id);
}

Test(ctl_audit, finds_what_a_recreated_stream_lost_and_repair_brings_consumers_back)
{
    struct consume_group g;
    struct harness_proc consumer;
    struct ctl_run r;
    char *probe_id, *before, *after;
    json_t *s;

    consume_group_init(&g, "jetstream", "AUDIT", NULL);
    relay_test_enqueue(conn, 40);
    consume_test_start(&consumer, &g.env, "audit-1",
                       (const char *const[]){CONSUME_EFFECT("a"), NULL});
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "a") == 40 &&
                           consume_test_nats_drained(g.stream, g.consumer),
                       30000);
    consume_test_stop(&consumer, 10000);
    probe_id = harness_scalar_text(conn, "SELECT id::text FROM outbox.events ORDER BY id "
                                         "OFFSET 4 LIMIT 1");
    before = message_text(g.stream, (uint64_t)stream_seq_of(probe_id));

    ctl_expect(&r, &g.env, 0, (const char *const[]){"audit", NULL});
    cr_assert(strstr(r.out, "40 present") != NULL, "%s", r.out);
    ctl_run_fini(&r);

    /* The stream is lost (its consumer with it); the relay makes a new one and goes on. */
    relay_test_stop(&g.relay, 10000);
    delete_stream(g.stream);
    relay_test_start(&g.relay, &g.relay_env, "relay-2");
    relay_test_enqueue(conn, 10);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 20000);

    ctl_expect(&r, &g.env, 1, (const char *const[]){"audit", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "missing"), 40, "%s", r.out);
    s = ctl_line(&r, "summary", 0);
    cr_assert_eq(ctl_int(s, "missing"), 40);
    cr_assert_eq(ctl_int(s, "present"), 10);
    ctl_run_fini(&r);
    /* A dry run of the repair reports the same and publishes nothing. */
    ctl_expect(&r, &g.env, 1, (const char *const[]){"audit", "--repair", "--dry-run", NULL});
    cr_assert(strstr(r.out, "40 missing") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    {
        char err[512] = "";

        cr_assert_eq(stream_message_count(harness_nats_url(), g.stream, err, sizeof(err)), 10);
    }

    /* A handler that never saw the lost events joins the group; a runs again too. */
    consume_test_start(&consumer, &g.env, "audit-2",
                       (const char *const[]){CONSUME_EFFECT("a"), CONSUME_EFFECT("late"), NULL});
    ctl_expect(&r, &g.env, 0, (const char *const[]){"audit", "--repair", "--json", NULL});
    cr_assert_eq(ctl_count(&r, "repaired"), 40, "%s", r.out);
    cr_assert_str_eq(ctl_str(ctl_line(&r, "repaired", 0), "outcome"), "published");
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "repaired"), 40);
    ctl_run_fini(&r);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "late") == 50 &&
                           consume_test_nats_drained(g.stream, g.consumer),
                       30000);
    consume_test_stop(&consumer, 10000);
    consume_test_expect_exactly_once(conn, "a");
    consume_test_expect_exactly_once(conn, "late");

    /* Published again exactly as the relay published it: same subject, headers and body. */
    after = message_text(g.stream, (uint64_t)stream_seq_of(probe_id));
    cr_assert_str_eq(after, before, "republished message differs from the relay's");
    ctl_expect(&r, &g.env, 0, (const char *const[]){"audit", "--json", NULL});
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "present"), 50);
    cr_assert_eq(ctl_count(&r, "missing"), 0);
    ctl_run_fini(&r);
    relay_test_check(conn, g.stream); /* every event once in the stream */
    free(after);
    free(before);
    free(probe_id);
    consume_group_fini(&g);
}

Test(ctl_audit, replay_adds_nothing_inside_the_window_and_restores_a_lost_stream)
{
    struct consume_group g;
    struct harness_proc consumer;
    struct ctl_run r;
    char err[512] = "";
    char *since;
    json_t *s;

    consume_group_init(&g, "jetstream", "REPLAY", NULL);
    since = harness_scalar_text(conn, "SELECT now()::text");
    relay_test_enqueue(conn, 20);
    relay_test_enqueue_sized(conn, 5, "rated", 0);
    consume_test_start(&consumer, &g.env, "replay-1",
                       (const char *const[]){CONSUME_EFFECT("a"), NULL});
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "a") == 25 &&
                           consume_test_nats_drained(g.stream, g.consumer),
                       30000);

    /* Inside the duplicate window: every row is a duplicate, the stream is unchanged. */
    ctl_expect(&r, &g.env, 0, (const char *const[]){"replay", "--json", NULL});
    s = ctl_line(&r, "summary", 0);
    cr_assert_eq(ctl_int(s, "rows"), 25);
    cr_assert_eq(ctl_int(s, "duplicate"), 25);
    ctl_run_fini(&r);
    cr_assert_eq(stream_message_count(harness_nats_url(), g.stream, err, sizeof(err)), 25);
    ctl_expect(&r, &g.env, 0,
               (const char *const[]){"replay", "--event-type", "rated", "--dry-run", NULL});
    cr_assert(strstr(r.out, "would replay 5 retained rows") != NULL, "%s", r.out);
    ctl_run_fini(&r);

    /* Lost: replay since a time restores it; the ledger makes every copy a skip. */
    consume_test_stop(&consumer, 10000);
    relay_test_stop(&g.relay, 10000);
    delete_stream(g.stream);
    ctl_expect(&r, &g.env, 0, (const char *const[]){"replay", "--since", since, "--json", NULL});
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "published"), 25, "%s", r.out);
    ctl_run_fini(&r);
    relay_test_start(&g.relay, &g.relay_env, "relay-2");
    consume_test_start(&consumer, &g.env, "replay-2",
                       (const char *const[]){CONSUME_EFFECT("a"), NULL});
    HARNESS_WAIT_UNTIL(consume_test_nats_drained(g.stream, g.consumer), 30000);
    consume_test_stop(&consumer, 10000);
    consume_test_expect_exactly_once(conn, "a");
    relay_test_check(conn, g.stream);
    ctl_expect(&r, &g.env, 0, (const char *const[]){"audit", NULL});
    ctl_run_fini(&r);
    free(since);
    consume_group_fini(&g);
}
