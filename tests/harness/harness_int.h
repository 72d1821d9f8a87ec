/* SPDX-License-Identifier: MIT */
/*
 * harness_int.h - what the harness files share with each other (hx_ prefix);
 * tests include harness.h only.
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

#define HX_ENV_DIR  "OBX_HARNESS_DIR"
#define HX_ENV_PG   "OUTBOX_TEST_DATABASE_URL"
#define HX_ENV_NATS "OUTBOX_TEST_NATS_URL"

enum hx_nats_status { HX_NATS_RUNNING, HX_NATS_STOPPED, HX_NATS_DEAD };

/* The run's shared state: fixed at PRE_ALL, except where marked. */
struct hx_state {
    pid_t runner_pid;
    pid_t reaper_pid;
    int pg_owned;         /* the harness started PostgreSQL */
    int pg_port;          /* 0 unless owned */
    int pg_up;            /* changes: harness_pg_stop/start */
    char pg_bindir[256];  /* initdb, pg_ctl */
    int nats_owned;       /* the harness started nats-server */
    int nats_port;        /* 0 unless owned */
    pid_t nats_pid;       /* changes on restart */
    int nats_status;      /* enum hx_nats_status; changes */
    int nats_custom;      /* running with extra arguments; changes */
    char template_db[64]; /* migrated template of the fresh databases */
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
/* Path join into buf; fails (returns -1) when it does not fit. */
int hx_path(char *buf, size_t len, const char *dir, const char *name);

/* ---- exec.c: fork/exec that is safe in a multi-threaded parent ------------------------- */

/* A user to run as, resolved before fork (initgroups is not async-signal-safe). */
struct hx_user {
    int active;
    uid_t uid;
    gid_t gid;
    int ngroups;
    gid_t groups[64];
};

struct hx_exec {
    const char *path; /* what to execute */
    char *const *argv;
    char *const *envp;          /* NULL: the current environment */
    int out_fd;                 /* stdout and stderr; -1: /dev/null */
    const char *cwd;            /* NULL: unchanged */
    const struct hx_user *user; /* NULL: unchanged */
    int die_with_parent;        /* PR_SET_PDEATHSIG(SIGKILL), own process group */
    int keep_fd;                /* left open across exec; -1: none */
};

/* Fills `u` for the postgres user when running as root; inactive otherwise. */
int hx_user_postgres(struct hx_user *u, char *err, size_t len);
/* Forks and execs; returns the pid, or -1 with the reason in err. */
pid_t hx_exec_start(const struct hx_exec *x, char *err, size_t len);
/* Runs to completion; returns the exit status (128 + signal), or -1 with err. */
int hx_exec_run(const struct hx_exec *x, int timeout_ms, char *err, size_t len);
/*
 * Starts a daemon in its own session, reparented away from us: a child of
 * the Criterion runner must never die while tests run (see servers.c).
 */
pid_t hx_exec_daemon(const struct hx_exec *x, char *err, size_t len);
/* environ plus `extra` ("KEY=VALUE", overriding); free() the array only. */
char **hx_env_with(char *const extra[]);
/* Status of a reaped child as 0-255 or 128 + signal. */
int hx_wait_status(int wstatus);
/* `name` if it contains '/', else its path in PATH; -1 if not found. */
int hx_which(const char *name, char *buf, size_t len);

/* ---- wait.c: small process and socket probes ------------------------------------------ */

/* 1 when pid is dead or a zombie (PID 1 may never reap an orphan). */
int hx_pid_gone(pid_t pid);
int hx_wait_pid_gone(pid_t pid, int timeout_ms);
/* 1 when pid is stopped (SIGSTOP). */
int hx_pid_stopped(pid_t pid);
/* Start time of pid in clock ticks after boot (tells a reused pid apart), or -1. */
long long hx_pid_starttime(pid_t pid);
/* 1 when /proc/<pid>/cmdline contains `needle`. */
int hx_cmdline_contains(pid_t pid, const char *needle);
/* A loopback port that was free a moment ago, or -1. */
int hx_free_port(void);
/* 1 when a TCP connect to 127.0.0.1:port succeeds. */
int hx_tcp_connects(int port);
/* Reads a whole file, NUL-terminated, malloc'd; NULL if unreadable. */
char *hx_read_file(const char *path, size_t *len);
/* The last `max` bytes of a file, for error messages; static buffer. */
const char *hx_file_tail(const char *path, size_t max);

/* ---- pg_server.c ------------------------------------------------------------------------ */

int hx_pg_boot(const char *run_dir, struct hx_state *st, char *err, size_t len);
int hx_pg_ctl_start(const char *run_dir, const struct hx_state *st, char *err, size_t len);
int hx_pg_ctl_stop(const char *run_dir, const struct hx_state *st, const char *mode, char *err,
                   size_t len);
/* Postmaster pid from postmaster.pid, or 0. */
pid_t hx_pg_postmaster_pid(const char *run_dir);

/* ---- db.c ------------------------------------------------------------------------------- */

int hx_template_create(struct hx_state *st, char *err, size_t len);
/* Drops the template and every fresh database of the run (external servers). */
void hx_dbs_drop_all(const struct hx_state *st);
/* Worker exit: drops the databases this worker created. */
void hx_dbs_cleanup(void);
/* Connects with the base URL's parameters and another database name. */
PGconn *hx_pg_connect_db(const char *dbname);

/* ---- nats_server.c ---------------------------------------------------------------------- */

int hx_nats_boot(const char *run_dir, struct hx_state *st, char *err, size_t len);
/* Starts nats-server with the run's port and store (+ extra); waits until JetStream answers. */
int hx_nats_launch(const char *run_dir, struct hx_state *st, char *const extra[], char *err,
                   size_t len);
/*
 * Stops the run's nats-server, if it is still ours, and waits until it is
 * gone: SIGTERM first when `graceful`, SIGKILL otherwise or after 10 s.
 */
void hx_nats_halt(const char *run_dir, struct hx_state *st, int graceful);

/* ---- spawn.c ---------------------------------------------------------------------------- */

/* Worker exit: kills what the worker spawned. */
void hx_procs_cleanup(void);
/* Kills the process groups recorded in <run_dir>/procs by any worker. */
void hx_procs_kill_recorded(const char *run_dir);

/* ---- reaper.c --------------------------------------------------------------------------- */

/* Forks the reaper, which tears the run down when the runner's pipe closes. */
int hx_reaper_start(pid_t *reaper_pid, char *err, size_t len);
/* Closes the runner's end of the pipe (after teardown). */
void hx_reaper_release(void);
/* Stops every server of the run and removes its directory. Idempotent. */
void hx_teardown(const char *run_dir);

#endif
