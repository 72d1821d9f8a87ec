/* SPDX-License-Identifier: MIT */
/*
 * consume_test.h - steps the consumer tests share: `outboxd consume`
 * replicas with declared handlers, on JetStream (fed by `outboxd relay`)
 * or on the outbox table (OUTBOX_BUS=db); the effects table the sql:
 * handlers write and the checks on it; a scratch directory for exec:
 * handlers; a trigger log of every ledger write in database time.
 * Header-only (static inline) because it calls the harness, which only
 * the integration and fault binaries link.
 *
 * Outcomes are read from the database and the NATS server, never from a
 * consumer's own account: `effects` has no unique constraint, so a
 * handler that ran twice for one event leaves two rows to count.
 */
#ifndef OBX_TEST_CONSUME_TEST_H
#define OBX_TEST_CONSUME_TEST_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_nats.h"
#include "harness.h"
#include "relay_check.h"
#include "relay_test.h"

/* A sql: handler spec that records one effect row per run, in the ledger transaction. */
#define CONSUME_EFFECT(name)                                                                     \
    name "=sql:INSERT INTO public.effects (event_id, handler) VALUES (($1->>'id')::uuid, '" name \
         "')"

/*
 * The effects table (no unique constraint: duplicates stay countable), the
 * committed-ids table of relay_test.h, and ledger_log: one row per write on
 * processed_events (its new values, and the owner token it replaced),
 * stamped with the writing transaction's now() and the database's clock.
 */
static inline void
consume_test_prepare(PGconn *conn)
{
    relay_test_prepare(conn);
    harness_exec(conn, "CREATE TABLE public.effects (event_id uuid NOT NULL, handler text NOT "
                       "NULL, seq bigserial, at timestamptz NOT NULL DEFAULT clock_timestamp())");
    harness_exec(conn, "CREATE TABLE public.ledger_log (seq bigserial PRIMARY KEY, "
                       "at timestamptz NOT NULL, tx_now timestamptz NOT NULL, event_id uuid, "
                       "handler text, status text, attempts integer, owner_token uuid, "
                       "old_owner_token uuid, next_attempt_at timestamptz, "
                       "dead_at timestamptz)");
    harness_exec(conn, "CREATE FUNCTION public.log_ledger() RETURNS trigger LANGUAGE plpgsql AS "
                       "$$BEGIN INSERT INTO public.ledger_log (at, tx_now, event_id, handler, "
                       "status, attempts, owner_token, old_owner_token, next_attempt_at, "
                       "dead_at) VALUES (clock_timestamp(), now(), NEW.event_id, NEW.handler, "
                       "NEW.status, NEW.attempts, NEW.owner_token, CASE WHEN TG_OP = 'UPDATE' "
                       "THEN OLD.owner_token END, NEW.next_attempt_at, NEW.dead_at); "
                       "RETURN NEW; END$$");
    harness_exec(conn, "CREATE TRIGGER log_ledger AFTER INSERT OR UPDATE ON "
                       "outbox.processed_events FOR EACH ROW EXECUTE FUNCTION public.log_ledger()");
}

/*
 * Settings for a consumer group `consumer` on `bus` ("jetstream" or "db"),
 * over the test's stream and prefix: short ack wait, leases and backoff,
 * small batches, debug logs, passwords in both URLs (never to be logged).
 */
static inline void
consume_test_env(struct relay_env *env, const char *bus, const char *stream, const char *prefix,
                 const char *consumer)
{
    relay_test_env(env, stream, prefix);
    relay_env_set(env, "OUTBOX_BUS", bus);
    relay_env_set(env, "OUTBOX_CONSUMER_NAME", consumer);
    relay_env_set(env, "OUTBOX_ACK_WAIT_SECONDS", "2");
    relay_env_set(env, "OUTBOX_LEASE_SECONDS", "2");
    relay_env_set(env, "OUTBOX_BATCH_SIZE", "20");
    relay_env_set(env, "OUTBOX_HANDLER_TIMEOUT_SECONDS", "30");
}

/*
 * A consumer group on one backend with its own stream and subject prefix
 * (from `tag`): the consumers' settings, and for JetStream a relay that
 * feeds the stream from the outbox for as long as the group lives.
 */
struct consume_group {
    struct relay_env env;       /* the consumers' settings */
    struct relay_env relay_env; /* JetStream: the relay's settings */
    struct harness_proc relay;  /* JetStream: the relay */
    char stream[40];
    char prefix[40];
    char consumer[40]; /* OUTBOX_CONSUMER_NAME, the durable consumer's name */
    int jetstream;
};

/*
 * `bus` is "jetstream" or "db"; `dir` (may be NULL) becomes CONSUME_DIR for
 * exec: handlers.
 */
static inline void
consume_group_init(struct consume_group *g, const char *bus, const char *tag, const char *dir)
{
    memset(g, 0, sizeof(*g));
    g->jetstream = strcmp(bus, "jetstream") == 0;
    snprintf(g->stream, sizeof(g->stream), "C_%s_%s", tag, g->jetstream ? "JS" : "DB");
    snprintf(g->prefix, sizeof(g->prefix), "c%s%s", tag, g->jetstream ? "js" : "db");
    snprintf(g->consumer, sizeof(g->consumer), "G_%s", tag);
    for (char *p = g->prefix; *p != '\0'; p++) {
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    }
    consume_test_env(&g->env, bus, g->stream, g->prefix, g->consumer);
    if (dir != NULL) {
        relay_env_set(&g->env, "CONSUME_DIR", dir);
    }
    if (g->jetstream) {
        relay_test_env(&g->relay_env, g->stream, g->prefix);
        relay_test_start(&g->relay, &g->relay_env, "relay");
    }
}

/* Stops the relay (it must exit 0) and frees the settings. */
static inline void
consume_group_fini(struct consume_group *g)
{
    if (g->jetstream) {
        relay_test_stop(&g->relay, 10000);
        relay_env_fini(&g->relay_env);
    }
    relay_env_fini(&g->env);
}

/* Starts `outboxd consume` named `name` with `handlers` (NULL-terminated specs). */
static inline void
consume_test_start(struct harness_proc *p, struct relay_env *env, const char *name,
                   const char *const handlers[])
{
    char *argv[2 + 2 * 8 + 1] = {(char *)harness_bin("outboxd"), "consume"};
    int argc = 2;

    for (int i = 0; handlers[i] != NULL; i++) {
        cr_assert_lt(i, 8, "at most 8 handlers");
        argv[argc++] = "--handler";
        argv[argc++] = (char *)handlers[i];
    }
    argv[argc] = NULL;
    cr_assert_eq(relay_env_set(env, "OUTBOX_NAME", name), 0);
    harness_spawn(p, argv, env->vars);
}

/* The last `bytes` of a process's log, for failure messages; malloc'd. */
static inline char *
consume_test_log_tail(const struct harness_proc *p, size_t bytes)
{
    char *log = harness_proc_log(p);
    size_t len = strlen(log);

    if (len > bytes) {
        memmove(log, log + len - bytes, bytes + 1);
    }
    return log;
}

/* Fails the test if consumer `p` exited; `what` names it. */
static inline void
consume_test_assert_running(struct harness_proc *p, const char *what)
{
    int status = harness_proc_wait(p, 0);

    if (status != -1) {
        cr_assert_fail("%s exited with %d; its log ends with:\n%s", what, status,
                       consume_test_log_tail(p, 3000));
    }
}

/*
 * SIGTERM once it runs its loop ("consumer starting"); it must exit 0
 * (LeakSanitizer included) within `timeout_ms` and never have logged a
 * password.
 */
static inline void
consume_test_stop(struct harness_proc *p, int timeout_ms)
{
    int status;

    HARNESS_WAIT_UNTIL(
        harness_proc_log_contains(p, "consumer starting") || harness_proc_wait(p, 0) != -1, 20000);
    status = harness_proc_stop(p, timeout_ms);
    if (status != 0) {
        cr_assert_fail("consumer exited with %d on SIGTERM; its log ends with:\n%s", status,
                       consume_test_log_tail(p, 3000));
    }
    cr_assert(!harness_proc_log_contains(p, RELAY_TEST_SECRET),
              "the consumer logged a password:\n%s", harness_proc_log(p));
    cr_assert(!harness_proc_log_contains(p, DAEMON_EXIT_STALLED),
              "the consumer's exit stalled after its stop:\n%s", consume_test_log_tail(p, 3000));
}

/* A number from SQL with `arg` as its only parameter ($1). */
static inline long long
consume_test_ll(PGconn *conn, const char *sql, const char *arg)
{
    const char *params[] = {arg};
    PGresult *res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
    long long v;

    cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(conn));
    cr_assert(PQntuples(res) == 1 && !PQgetisnull(res, 0, 0), "%s: no value", sql);
    v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}

/* Committed events whose effect for `handler` is there (once or more). */
static inline long long
consume_test_handled(PGconn *conn, const char *handler)
{
    return consume_test_ll(conn,
                           "SELECT count(DISTINCT e.event_id) FROM public.effects e "
                           "JOIN public.committed c ON c.id = e.event_id WHERE e.handler = $1",
                           handler);
}

/* Effect rows beyond the first per (event, handler): effect_dups of FAULTS.md §1. */
static inline long long
consume_test_effect_dups(PGconn *conn, const char *handler)
{
    return consume_test_ll(conn,
                           "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM "
                           "public.effects WHERE handler = $1 GROUP BY event_id) AS g",
                           handler);
}

/*
 * `handler` ran exactly once per committed event: every committed event has
 * one effect, none has two, no effect belongs to an event never committed,
 * and the ledger says done for each, exactly once.
 */
static inline void
consume_test_expect_exactly_once(PGconn *conn, const char *handler)
{
    long long committed = harness_scalar_ll(conn, "SELECT count(*) FROM public.committed");
    long long handled = consume_test_handled(conn, handler);
    long long dups = consume_test_effect_dups(conn, handler);
    long long phantom =
        consume_test_ll(conn,
                        "SELECT count(*) FROM public.effects e WHERE e.handler = $1 AND NOT EXISTS "
                        "(SELECT 1 FROM public.committed c WHERE c.id = e.event_id)",
                        handler);
    long long ledger_done = consume_test_ll(
        conn, "SELECT count(*) FROM outbox.processed_events WHERE handler = $1 AND status = 'done'",
        handler);

    cr_log_info("handler %s: committed=%lld handled=%lld effect_dups=%lld phantom=%lld "
                "ledger_done=%lld",
                handler, committed, handled, dups, phantom, ledger_done);
    cr_assert_eq(dups, 0, "handler %s left %lld effects beyond the first of their event", handler,
                 dups);
    cr_assert_eq(handled, committed, "handler %s left %lld committed events unhandled", handler,
                 committed - handled);
    cr_assert_eq(phantom, 0, "handler %s has effects for events never committed", handler);
    cr_assert_eq(ledger_done, committed, "the ledger has %lld done rows for %s, not %lld",
                 ledger_done, handler, committed);
}

/* Attempts spent over every ledger row, and dead letters: both 0 after faults alone. */
static inline void
consume_test_expect_nothing_spent(PGconn *conn)
{
    cr_assert_eq(
        harness_scalar_ll(conn, "SELECT coalesce(sum(attempts), 0) FROM outbox.processed_events"),
        0, "attempts were spent");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM outbox.dead_letters"), 0,
                 "events were dead-lettered");
}

/* The consumer group's state on the server; fails the test if it cannot be read. */
static inline struct consume_nats_state
consume_test_nats_state(const char *stream, const char *consumer)
{
    struct consume_nats_state st;
    char err[512] = "";

    cr_assert_eq(
        consume_nats_state_read(harness_nats_url(), stream, consumer, &st, err, sizeof(err)), 0,
        "%s", err);
    return st;
}

/* 1 once the group has been handed every message of the stream and settled each one. */
static inline int
consume_test_nats_drained(const char *stream, const char *consumer)
{
    struct consume_nats_state st;
    uint64_t last = 0;
    char err[512] = "";

    if (consume_nats_last_seq(harness_nats_url(), stream, &last, err, sizeof(err)) != 0 ||
        consume_nats_state_read(harness_nats_url(), stream, consumer, &st, err, sizeof(err)) != 0) {
        return 0; /* not created yet */
    }
    return st.num_pending == 0 && st.num_ack_pending == 0 && st.ack_floor_stream_seq == last;
}

/* ---- scratch directory for exec: handlers --------------------------------------------- */

/* Makes a fresh directory for this test's exec: handlers; `dir` gets its path. */
static inline void
consume_test_dir_make(char dir[64])
{
    snprintf(dir, 64, "/tmp/obx-consume-XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp");
}

/* Removes the directory and the files in it (exec: handlers make no subdirectories). */
static inline void
consume_test_dir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];

    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
            rmdir(path);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    rmdir(dir);
}

/* Creates an empty file `name` in `dir`. */
static inline void
consume_test_touch(const char *dir, const char *name)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "a");
    cr_assert_not_null(f, "creating %s", path);
    fclose(f);
}

/* 1 if `dir`/`name` exists. */
static inline int
consume_test_exists(const char *dir, const char *name)
{
    char path[512];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Lines of `dir`/`name` that contain `needle` (all lines for ""); 0 if it does not exist. */
static inline long long
consume_test_lines(const char *dir, const char *name, const char *needle)
{
    char path[512], line[512];
    long long n = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        n += strstr(line, needle) != NULL;
    }
    if (f != NULL) {
        fclose(f);
    }
    return n;
}

/* ---- a suite's fixture ---------------------------------------------------------------- */

/* A consume suite's set-up: a fresh database prepared for consumers, and a scratch directory. */
static inline void
consume_test_suite_begin(PGconn **conn, char dir[64])
{
    *conn = harness_pg_connect_fresh();
    consume_test_prepare(*conn);
    consume_test_dir_make(dir);
}

/* Its tear-down. */
static inline void
consume_test_suite_end(PGconn **conn, const char *dir)
{
    consume_test_dir_remove(dir);
    PQfinish(*conn);
    *conn = NULL;
}

#endif
