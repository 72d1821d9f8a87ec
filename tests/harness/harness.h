/* SPDX-License-Identifier: MIT */
/*
 * harness.h - real PostgreSQL and nats-server for integration and fault tests.
 *
 * Each test binary gets its own throwaway servers, started once by the runner
 * (servers.c) unless OUTBOX_TEST_DATABASE_URL / OUTBOX_TEST_NATS_URL point at
 * servers already. Tests run in Criterion workers, one process per test, and
 * reach the servers through the functions below.
 *
 * Rules that hold for every function declared here:
 *   - Failures are test failures: the function asserts through Criterion with
 *     a message naming what failed, so callers need no error handling.
 *   - Call them from the test's own thread (Criterion asserts longjmp).
 *   - Fault functions (harness_pg_stop() and friends) skip the test when the
 *     servers came from outside, and first take the run's servers lock
 *     exclusively: a fault test never overlaps another test of its binary
 *     that uses the servers. The next test finds the servers healthy again,
 *     even if the fault test failed half-way.
 *   - Nothing a test starts outlives it: spawned processes are killed and
 *     fresh databases dropped when the worker exits.
 */
#ifndef OBX_TEST_HARNESS_H
#define OBX_TEST_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include <criterion/criterion.h>
#include <libpq-fe.h>

/* ---- databases ----------------------------------------------------------------------- */

/*
 * A new database copied from the run's migrated template (schema "outbox",
 * ordering off: most tests follow one event's path), and a connection to it. The caller owns the
 * connection (PQfinish). The database is dropped when the worker exits.
 */
PGconn *harness_pg_connect_fresh(void);

/* Same, from template0: an empty database, for migration tests. */
PGconn *harness_pg_connect_fresh_empty(void);

/*
 * harness_pg_connect_fresh() with ordering switched on: the schema as
 * `outboxctl migrate` makes a new one. For the tests of order and of what
 * users run on the default.
 */
PGconn *harness_pg_connect_fresh_ordered(void);

/* A connection to the server's maintenance database, as the test user. */
PGconn *harness_pg_connect_admin(void);

/* URL of the database the last harness_pg_connect_fresh*() created, for daemons. */
const char *harness_db_url(void);

/* Same URL with another port, e.g. a proxy's. malloc'd; the caller frees it. */
char *harness_db_url_via(int port);

/* Runs one statement; asserts it succeeded. */
void harness_exec(PGconn *conn, const char *sql);

/* The single value of a one-row, one-column query; asserts it is a non-NULL integer. */
long long harness_scalar_ll(PGconn *conn, const char *sql);

/* Same as text, malloc'd; NULL for an SQL NULL. The caller frees it. */
char *harness_scalar_text(PGconn *conn, const char *sql);

/* ---- nats ---------------------------------------------------------------------------- */

/* nats://127.0.0.1:<port> of the run's server (JetStream enabled). */
const char *harness_nats_url(void);

/* ---- waiting ------------------------------------------------------------------------- */

/* Milliseconds of a monotonic clock. */
long long harness_now_ms(void);

/* Sleeps; only for polling loops that have a deadline. */
void harness_sleep_ms(int ms);

/*
 * Calls cond(arg) every 10 ms until it returns non-zero (then returns 1) or
 * timeout_ms passes (then returns 0). Does not assert: use it when "never
 * happens" is the expected outcome.
 */
int harness_wait_until(int (*cond)(void *), void *arg, int timeout_ms);

/* Polls `expr` every 10 ms; fails the test naming `expr` if it is still false after timeout_ms. */
#define HARNESS_WAIT_UNTIL(expr, timeout_ms)                                              \
    do {                                                                                  \
        long long harness_deadline_ms_ = harness_now_ms() + (timeout_ms);                 \
        while (!(expr)) {                                                                 \
            cr_assert(harness_now_ms() < harness_deadline_ms_,                            \
                      "timed out after %d ms waiting for: %s", (int)(timeout_ms), #expr); \
            harness_sleep_ms(10);                                                         \
        }                                                                                 \
    } while (0)

/* ---- processes ----------------------------------------------------------------------- */

/* A process a test started. Zero it (or let harness_spawn fill it) before use. */
struct harness_proc {
    pid_t pid;          /* also its process group; 0 once reaped */
    int status;         /* after a wait: exit code 0-255, or 128 + signal */
    char log_path[512]; /* stdout and stderr, kept until the run ends */
};

/*
 * Starts argv[0] (searched in PATH unless it contains '/') in its own process
 * group, with the test's environment plus `extra_env` ("KEY=VALUE" entries,
 * NULL-terminated, may be NULL), stdin from /dev/null and stdout+stderr into
 * p->log_path. It dies with the worker, whatever the test does.
 */
void harness_spawn(struct harness_proc *p, char *const argv[], char *const extra_env[]);

/* Sends `sig` to the process group. */
void harness_proc_signal(struct harness_proc *p, int sig);

/* Waits up to timeout_ms; returns p->status, or -1 on timeout (the process keeps running). */
int harness_proc_wait(struct harness_proc *p, int timeout_ms);

/* harness_spawn() then harness_proc_wait(): a command run to its end; its status, -1 on timeout. */
int harness_run(char *const argv[], char *const extra_env[], int timeout_ms);

/* SIGKILLs the process group and reaps; returns p->status. Does nothing once reaped. */
int harness_proc_kill(struct harness_proc *p);

/*
 * SIGTERM, then waits up to timeout_ms; returns p->status, or -1 if it had to
 * be SIGKILLed (it is reaped either way).
 */
int harness_proc_stop(struct harness_proc *p, int timeout_ms);

/* 1 if the log so far contains `needle`. */
int harness_proc_log_contains(const struct harness_proc *p, const char *needle);

/* The log so far, malloc'd and NUL-terminated; the caller frees it. */
char *harness_proc_log(const struct harness_proc *p);

/*
 * Path of a program we build: <OBX_BIN_DIR>/<name>, or <OUTBOX_TEST_BIN_DIR>/<name>
 * when that is set (`scripts/test --tsan` runs the tests against daemons built
 * with ThreadSanitizer). Valid until the process exits.
 */
const char *harness_bin_in(const char *bin_dir, const char *name);
#ifdef OBX_BIN_DIR
static inline const char *
harness_bin(const char *name)
{
    const char *override = getenv("OUTBOX_TEST_BIN_DIR");

    return harness_bin_in(override != NULL && override[0] != '\0' ? override : OBX_BIN_DIR, name);
}
#endif

/* ---- faults (only on servers the harness started; see the rules above) --------------- */

/*
 * Takes the servers lock exclusively for the rest of the test. Fault
 * functions do it on first use; call it from .init to hold it before
 * connecting. Waits for the binary's other tests that use the servers.
 */
void harness_servers_exclusive(void);

/* Ports of the run's servers, e.g. to put a proxy in front. */
int harness_pg_port(void);
int harness_nats_port(void);

/* pg_ctl stop -m <mode>: "immediate", "fast" or "smart". */
void harness_pg_stop(const char *mode);

/* Starts the stopped PostgreSQL again on the same port and data. */
void harness_pg_start(void);

/*
 * Terminates the backends of this test's fresh databases whose
 * application_name is LIKE `app_name_like`; returns how many. Works on any
 * server, as it touches only this test's databases.
 */
int harness_pg_terminate_backends(const char *app_name_like);

/*
 * Sends `sig` to nats-server. SIGKILL, SIGTERM, SIGINT and SIGQUIT wait until
 * it is gone; SIGSTOP until it is stopped.
 */
void harness_nats_kill(int sig);

/* Starts nats-server again on the same port and store, so streams survive. */
void harness_nats_start(void);

/*
 * Stops nats-server (SIGTERM) and starts it with `extra` arguments appended
 * (NULL-terminated; NULL for the defaults). The next test gets the defaults.
 */
void harness_nats_restart_with_args(char *const extra[]);

/* ---- a cluster of the test's own ------------------------------------------------------ */

#define HARNESS_CLUSTER_NODES 3

/*
 * Three nats-server processes on loopback joined as one JetStream cluster
 * (server names n1, n2, n3; own ports and stores), for this test alone:
 * no servers lock, stopped when the worker exits. Node k keeps its ports
 * and store across a restart.
 */
struct harness_cluster {
    char urls[256];                           /* every node: OUTBOX_NATS_URL for a daemon */
    char node_url[HARNESS_CLUSTER_NODES][64]; /* node k alone */
    void *dev;                                /* struct obx_dev_cluster */
};

/* Starts the three nodes; returns once JetStream answers on each. */
void harness_cluster_start(struct harness_cluster *c, const char *name);

/* SIGKILLs node k and waits until it is gone; refuses if another node is down. */
void harness_cluster_kill(struct harness_cluster *c, int k);

/* Starts node k again on its ports and store; waits until it answers. */
void harness_cluster_restart(struct harness_cluster *c, int k);

/* Stops every node. */
void harness_cluster_stop(struct harness_cluster *c);

/* The node index of server name "n<k+1>", or -1. */
int harness_cluster_node(const char *server_name);

/* ---- proxy --------------------------------------------------------------------------- */

/* A socat TCP proxy on 127.0.0.1, for cutting a connection without touching the server. */
struct harness_proxy {
    struct harness_proc proc;
    int port;        /* where clients connect */
    int target_port; /* 127.0.0.1:target_port */
};

/* Starts forwarding 127.0.0.1:<free port> to 127.0.0.1:target_port; returns the port. */
int harness_proxy_start(struct harness_proxy *px, int target_port);

/* Same, appending every byte clients send to `dump_path` (a protocol capture). */
int harness_proxy_start_dumping(struct harness_proxy *px, int target_port, const char *dump_path);

/* Connections the proxy accepted so far (each a client's connect attempt). */
int harness_proxy_connections(const struct harness_proxy *px);

/*
 * SIGSTOPs socat and its connection children: established connections and
 * new ones hang (TCP handshakes still complete in the kernel's backlog).
 */
void harness_proxy_pause(struct harness_proxy *px);
void harness_proxy_resume(struct harness_proxy *px);
void harness_proxy_stop(struct harness_proxy *px);

/* ---- pooler -------------------------------------------------------------------------- */

/* Debian's PgBouncer on 127.0.0.1, in front of a PostgreSQL on loopback (trust auth). */
struct harness_pgbouncer {
    struct harness_proc proc;
    int port;        /* where clients connect */
    int target_port; /* the PostgreSQL behind it */
    char dir[512];   /* its config, user list and log (pgbouncer.log) */
};

/*
 * Starts PgBouncer with `pool_mode` ("session", "transaction" or "statement")
 * forwarding every database to 127.0.0.1:target_port; returns its port once
 * it accepts connections. As root it runs as postgres (it refuses root).
 */
int harness_pgbouncer_start(struct harness_pgbouncer *pb, int target_port, const char *pool_mode);

/* Same, with `settings` ("name = value" lines, each ending in a newline) added to [pgbouncer]. */
int harness_pgbouncer_start_with(struct harness_pgbouncer *pb, int target_port,
                                 const char *pool_mode, const char *settings);

void harness_pgbouncer_stop(struct harness_pgbouncer *pb);

/*
 * A second user PgBouncer knows (the test creates the role): a pool is per
 * database and user, so daemons connecting as it get a pool of their own.
 */
#define HARNESS_PGBOUNCER_RELAY_USER "outbox_relay_pool"

/* ---- diagnostics --------------------------------------------------------------------- */

/*
 * Writes key=value lines describing the run (run_dir, runner_pid,
 * reaper_pid, pg_pid, nats_pid, ...), for debugging and the cleanup probe.
 */
void harness_describe(FILE *out);

#endif
