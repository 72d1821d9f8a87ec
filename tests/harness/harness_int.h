/* SPDX-License-Identifier: MIT */
/*
 * harness_int.h - what the harness files share with each other (hx_ prefix);
 * tests include harness.h only. Starting, probing and tearing down the
 * servers is shared with the demo and the benchmark: src/cli/devserver_*.h
 * (obx_dev_ prefix).
 *
 * The runner (the test binary's first process) and the Criterion workers are
 * different processes; workers are re-executed images, so they share nothing
 * in memory with the runner. Everything they need travels through one
 * environment variable, OBX_HARNESS_DIR, naming the run's temp dir, and the
 * state file inside it (see run.c).
 */
#ifndef OBX_TEST_HARNESS_INT_H
#define OBX_TEST_HARNESS_INT_H

#include <stddef.h>
#include <sys/types.h>

#include <libpq-fe.h>

#include "devserver/devserver_nats.h"
#include "devserver/devserver_pg.h"

#define HX_ENV_DIR  "OBX_HARNESS_DIR"
#define HX_ENV_PG   "OUTBOX_TEST_DATABASE_URL"
#define HX_ENV_NATS "OUTBOX_TEST_NATS_URL"

enum hx_nats_status { HX_NATS_RUNNING, HX_NATS_STOPPED, HX_NATS_DEAD };

/* The run's shared state: fixed at PRE_ALL, except where marked. */
struct hx_state {
    pid_t runner_pid;
    pid_t reaper_pid;
    int pg_owned;             /* the harness started PostgreSQL */
    struct obx_dev_pg pg;     /* zero unless owned */
    int pg_up;                /* changes: harness_pg_stop/start */
    int nats_owned;           /* the harness started nats-server */
    struct obx_dev_nats nats; /* zero unless owned; pid changes on restart */
    int nats_status;          /* enum hx_nats_status; changes */
    int nats_custom;          /* running with extra arguments; changes */
    char template_db[64];     /* migrated template of the fresh databases */
};

/* ---- run.c: the run's directory, state file and servers lock -------------------------- */

/* The run's temp dir, or NULL outside a harness run. */
const char *hx_run_dir_or_null(void);
/* Same, failing the test when unset. */
const char *hx_run_dir(void);
int hx_state_read(const char *run_dir, struct hx_state *st);
int hx_state_write(const char *run_dir, const struct hx_state *st);
/* Reads the state in a worker; fails the test if it cannot. */
void hx_state_load(struct hx_state *st);
/* Takes the servers lock (shared or exclusive) and heals the servers if needed. */
void hx_servers_lock(int exclusive);
/* Skips the test unless the harness started that server; `env` names its variable. */
void hx_require_owned(int owned, const char *what, const char *env);
/* Registers the worker's exit cleanup once. */
void hx_worker_atexit(void);

/* ---- pg_server.c ------------------------------------------------------------------------ */

/* Starts the run's PostgreSQL (not durable) and exports its URL. */
int hx_pg_boot(const char *run_dir, struct hx_state *st, char *err, size_t len);

/* ---- db.c ------------------------------------------------------------------------------- */

int hx_template_create(struct hx_state *st, char *err, size_t len);
/* Drops the template and every fresh database of the run (external servers). */
void hx_dbs_drop_all(const struct hx_state *st);
/* Worker exit: drops the databases this worker created. */
void hx_dbs_cleanup(void);
/* Connects with the base URL's parameters and another database name. */
PGconn *hx_pg_connect_db(const char *dbname);

/* ---- nats_server.c ---------------------------------------------------------------------- */

/* Starts the run's nats-server and exports its URL. */
int hx_nats_boot(const char *run_dir, struct hx_state *st, char *err, size_t len);
/* obx_dev_nats_launch with the run's port and store (+ extra), keeping nats_status. */
int hx_nats_launch(const char *run_dir, struct hx_state *st, char *const extra[], char *err,
                   size_t len);
/* obx_dev_nats_halt, keeping nats_status. */
void hx_nats_halt(const char *run_dir, struct hx_state *st, int graceful);

/* ---- spawn.c ---------------------------------------------------------------------------- */

/* Worker exit: kills what the worker spawned. */
void hx_procs_cleanup(void);
/* Kills the process groups recorded in <run_dir>/procs by any worker. */
void hx_procs_kill_recorded(const char *run_dir);

/* ---- reaper.c --------------------------------------------------------------------------- */

/* Starts the reaper (obx_dev_reaper_start), which runs hx_teardown when the runner is gone. */
int hx_reaper_start(const char *run_dir, pid_t *reaper_pid, char *err, size_t len);
/* Closes the runner's end of the pipe (after teardown). */
void hx_reaper_release(void);
/* Stops every server of the run and removes its directory. Idempotent. */
void hx_teardown(const char *run_dir);

#endif
