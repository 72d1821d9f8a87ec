/* SPDX-License-Identifier: MIT */
/*
 * relay_test.h - steps the relay tests share: a committed-ids table,
 * events written through outbox.enqueue(), outboxd relay replicas, and the
 * checker with its assertions. Header-only (static inline) because it
 * calls the harness, which only the integration and fault binaries link.
 *
 * Every event a test commits is also recorded in its `committed` table in
 * the same transaction (the business table of FAULTS.md §1), so C is known
 * even in prune mode, and after a crash or an ambiguous commit.
 */
#ifndef OBX_TEST_RELAY_TEST_H
#define OBX_TEST_RELAY_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "harness.h"
#include "relay_check.h"
#include "stream_reader_nats.h"

#define RELAY_COMMITTED_SQL "SELECT id::text FROM committed"

/* Creates the committed-ids table in the test's database. */
static inline void
relay_test_prepare(PGconn *conn)
{
    harness_exec(conn, "CREATE TABLE committed (id uuid PRIMARY KEY)");
}

/*
 * Commits `n` events of aggregate "movie" and `event_type`, each with a
 * payload of `payload_bytes` filler characters, in transactions of at most
 * 2000 events, and records their ids.
 */
static inline void
relay_test_enqueue_sized(PGconn *conn, int n, const char *event_type, int payload_bytes)
{
    char sql[512];

    for (int done = 0; done < n;) {
        int chunk = n - done > 2000 ? 2000 : n - done;

        snprintf(sql, sizeof(sql),
                 "WITH e AS (INSERT INTO committed "
                 "SELECT outbox.enqueue('movie', gen_random_uuid(), '%s', "
                 "jsonb_build_object('n', g, 'fill', repeat('x', %d))) "
                 "FROM generate_series(1, %d) AS g RETURNING 1) SELECT count(*) FROM e",
                 event_type, payload_bytes, chunk);
        cr_assert_eq(harness_scalar_ll(conn, sql), chunk);
        done += chunk;
    }
}

static inline void
relay_test_enqueue(PGconn *conn, int n)
{
    relay_test_enqueue_sized(conn, n, "review.logged", 0);
}

/* Starts `outboxd relay` named `name` with `env` (its OUTBOX_NAME is set here). */
static inline void
relay_test_start(struct harness_proc *p, struct relay_env *env, const char *name)
{
    char *argv[] = {(char *)harness_bin("outboxd"), "relay", NULL};

    cr_assert_eq(relay_env_set(env, "OUTBOX_NAME", name), 0);
    harness_spawn(p, argv, env->vars);
}

/*
 * Every relay test connects with a password in both URLs, and
 * relay_test_stop() fails the test if a log line carries it: no path,
 * outages and reconnects included, may print a conninfo or URL unredacted.
 * The harness's servers do not check passwords (trust, no NATS auth), so
 * the URLs still work; URLs that bring their own credentials are kept.
 */
#define RELAY_TEST_SECRET "pw-7Hq2-never-logged"

/*
 * What a daemon logs when its exit guard ended it (src/outboxd/service/
 * exit_guard.c): something after its worker stalled. The guard keeps the
 * stop bounded; the stops below still fail on it, so a stall is seen.
 */
#define DAEMON_EXIT_STALLED "exit stalled after the stop"

/* `url` with RELAY_TEST_SECRET as its password unless it has one; malloc'd. */
static inline char *
relay_test_db_url_with_secret(const char *url)
{
    PQconninfoOption *opts = PQconninfoParse(url, NULL);
    int has_password = 0;
    size_t len = strlen(url) + sizeof("?password=" RELAY_TEST_SECRET);
    char *out = malloc(len);

    cr_assert(opts != NULL && out != NULL);
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        has_password |= strcmp(o->keyword, "password") == 0 && o->val != NULL && o->val[0];
    }
    PQconninfoFree(opts);
    snprintf(out, len, "%s%s", url,
             has_password               ? ""
             : strchr(url, '?') != NULL ? "&password=" RELAY_TEST_SECRET
                                        : "?password=" RELAY_TEST_SECRET);
    return out;
}

/* nats://relay:RELAY_TEST_SECRET@host:port unless the URL has credentials; malloc'd. */
static inline char *
relay_test_nats_url_with_secret(const char *url)
{
    size_t len = strlen(url) + sizeof("relay:" RELAY_TEST_SECRET "@");
    char *out = malloc(len);

    cr_assert_not_null(out);
    if (strncmp(url, "nats://", 7) == 0 && strchr(url, '@') == NULL && strchr(url, ',') == NULL) {
        snprintf(out, len, "nats://relay:" RELAY_TEST_SECRET "@%s", url + 7);
    } else {
        snprintf(out, len, "%s", url);
    }
    return out;
}

/* Settings for this test's database and the run's NATS server, with passwords. */
static inline void
relay_test_env(struct relay_env *env, const char *stream, const char *prefix)
{
    char *db_url = relay_test_db_url_with_secret(harness_db_url());
    char *nats_url = relay_test_nats_url_with_secret(harness_nats_url());

    relay_env_init(env, db_url, nats_url, stream, prefix);
    free(nats_url);
    free(db_url);
}

/* SELECT count(*) FROM outbox.events WHERE <where>. */
static inline long long
relay_test_count(PGconn *conn, const char *where)
{
    char sql[1024];

    snprintf(sql, sizeof(sql), "SELECT count(*) FROM outbox.events WHERE %s", where);
    return harness_scalar_ll(conn, sql);
}

/* Rows a relay still has to handle: pending (due or not) or leased. */
static inline long long
relay_test_unfinished(PGconn *conn)
{
    return relay_test_count(conn, "status IN ('pending', 'leased')");
}

/* Fails the test if the relay `p` exited; names its status and log tail otherwise. */
static inline void
relay_test_assert_running(struct harness_proc *p, const char *what)
{
    int status = harness_proc_wait(p, 0);

    if (status != -1) {
        char *log = harness_proc_log(p);
        size_t len = log != NULL ? strlen(log) : 0;

        cr_assert_fail("%s exited with %d; its log ends with:\n%s", what, status,
                       log != NULL ? log + (len > 3000 ? len - 3000 : 0) : "");
    }
}

/*
 * SIGTERM, and the relay must exit 0 (LeakSanitizer included) within
 * `timeout_ms`. A relay started a moment ago is first given time to take
 * over its signals ("relay starting" is logged after that): before, SIGTERM
 * simply ends the process, which holds nothing yet.
 */
static inline void
relay_test_stop(struct harness_proc *p, int timeout_ms)
{
    int status;

    HARNESS_WAIT_UNTIL(
        harness_proc_log_contains(p, "relay starting") || harness_proc_wait(p, 0) != -1, 20000);
    status = harness_proc_stop(p, timeout_ms);

    if (status != 0) {
        char *log = harness_proc_log(p);
        size_t len = log != NULL ? strlen(log) : 0;

        cr_assert_fail("relay exited with %d on SIGTERM; its log ends with:\n%s", status,
                       log != NULL ? log + (len > 3000 ? len - 3000 : 0) : "");
    }
    cr_assert(!harness_proc_log_contains(p, RELAY_TEST_SECRET), "the relay logged a password:\n%s",
              harness_proc_log(p));
    cr_assert(!harness_proc_log_contains(p, DAEMON_EXIT_STALLED),
              "the relay's exit stalled after its stop; its log ends with:\n%s",
              harness_proc_log(p));
}

/* Adds the lease lines of relay `p`'s log so far to `out`. */
static inline void
relay_test_scan_leases(const struct harness_proc *p, struct lease_log *out)
{
    char *log = harness_proc_log(p);

    lease_log_scan(log, out);
    free(log);
}

/*
 * Reads `stream` from sequence 1 and compares it with the database; fails
 * the test unless lost, phantom and stream_dups are all 0.
 */
static inline struct relay_check
relay_test_check(PGconn *conn, const char *stream)
{
    struct relay_check chk;
    struct id_set s;
    char err[512] = "";

    id_set_init(&s);
    cr_assert_eq(stream_read_ids(harness_nats_url(), stream, &s, err, sizeof(err)), 0,
                 "reading stream %s: %s", stream, err);
    cr_assert_eq(relay_check_run(conn, RELAY_COMMITTED_SQL, &s, &chk, err, sizeof(err)), 0,
                 "checker: %s", err);
    id_set_fini(&s);
    cr_log_info("checker %s: committed=%zu stream=%zu quarantined=%zu dead=%zu lost=%zu "
                "phantom=%zu stream_dups=%zu",
                stream, chk.committed, chk.stream, chk.quarantined, chk.dead, chk.lost, chk.phantom,
                chk.stream_dups);
    cr_assert_eq(chk.lost, 0,
                 "%zu committed events neither in the stream nor quarantined nor "
                 "dead, e.g. %s",
                 chk.lost, chk.lost_example);
    cr_assert_eq(chk.phantom, 0, "%zu ids in the stream were never committed, e.g. %s", chk.phantom,
                 chk.phantom_example);
    cr_assert_eq(chk.stream_dups, 0, "%zu ids are in the stream more than once, e.g. %s",
                 chk.stream_dups, chk.dup_example);
    return chk;
}

#endif
