/* SPDX-License-Identifier: MIT */
/*
 * test_handlers.c - consumers record their bindings in the handlers table
 * when they start: each handler's name, its subject filter ({prefix}.> for
 * a handler without one), the consumer group, the backend and, for
 * JetStream, the stream; a replica started again refreshes last_seen
 * instead of adding rows. `outboxctl subjects` reads this table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "consume_test.h"
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

TestSuite(handlers, .init = setup, .fini = teardown, .timeout = 120);

static void
registered_by_consumers(const char *bus)
{
    struct consume_group g;
    struct harness_proc consumer;
    char movies[200], every[200], want[600], *rows, *seen_before, *seen_after;
    const char *sql = "SELECT string_agg(format('%s|%s|%s|%s|%s', name, subject_filter, "
                      "consumer_group, backend, coalesce(stream, '-')), ';' ORDER BY name) "
                      "FROM outbox.handlers";

    consume_group_init(&g, bus, "REG", NULL);
    snprintf(movies, sizeof(movies),
             "movies@%s.movie.>=sql:INSERT INTO public.effects (event_id, handler) VALUES "
             "(($1->>'id')::uuid, 'movies')",
             g.prefix);
    snprintf(every, sizeof(every), "%s", CONSUME_EFFECT("every"));
    consume_test_start(&consumer, &g.env, "reg-1", (const char *const[]){movies, every, NULL});
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.handlers") == 2, 20000);
    rows = harness_scalar_text(conn, sql);
    snprintf(want, sizeof(want), "every|%s.>|%s|%s|%s;movies|%s.movie.>|%s|%s|%s", g.prefix,
             g.consumer, bus, g.jetstream ? g.stream : "-", g.prefix, g.consumer, bus,
             g.jetstream ? g.stream : "-");
    cr_assert_str_eq(rows, want);
    seen_before = harness_scalar_text(conn, "SELECT max(last_seen)::text FROM outbox.handlers");
    consume_test_stop(&consumer, 10000);

    consume_test_start(&consumer, &g.env, "reg-2", (const char *const[]){movies, every, NULL});
    HARNESS_WAIT_UNTIL(
        harness_scalar_ll(conn, "SELECT count(*) FROM outbox.handlers WHERE replica = 'reg-2'") ==
            2,
        20000);
    seen_after = harness_scalar_text(conn, "SELECT min(last_seen)::text FROM outbox.handlers");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.handlers"), 2,
                 "a restarted replica must refresh its rows, not add new ones");
    cr_assert(strcmp(seen_after, seen_before) > 0, "last_seen %s did not move past %s", seen_after,
              seen_before);
    consume_test_stop(&consumer, 10000);
    free(seen_after);
    free(seen_before);
    free(rows);
    consume_group_fini(&g);
}

Test(handlers, jetstream_consumers_register_their_bindings)
{
    registered_by_consumers("jetstream");
}

Test(handlers, db_consumers_register_their_bindings)
{
    registered_by_consumers("db");
}
