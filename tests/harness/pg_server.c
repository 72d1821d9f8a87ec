/* SPDX-License-Identifier: MIT */
/*
 * pg_server.c - a throwaway PostgreSQL cluster in the run's temp dir.
 *
 * initdb --nosync and a server without fsync: the data dies with the run,
 * so surviving an OS crash only costs time. synchronous_commit stays on:
 * with fsync off it costs nothing measurable (pgbench, 1 and 8 clients, on
 * this 2-core machine: within noise), and with it off an immediate stop
 * loses transactions already reported committed, which a fault test would
 * count as events lost by our code. initdb refuses to run as root, so as root
 * the server binaries run as the postgres user (privileges dropped in the
 * forked child) and the run dir is handed to that user. pg_ctl daemonizes
 * the postmaster, so it is never a child of the Criterion runner.
 *
 * Layout: <run>/pg/data (cluster), <run>/pg/server.log, <run>/pg/pg_ctl.log
 * (initdb and pg_ctl output), and the Unix socket in <run>/pg.
 */
#include "harness_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "harness.h"

#include "banned.h" /* last: poisons unsafe functions */

/* A Unix socket path must fit sockaddr_un (108 bytes) with ".s.PGSQL.NNNNN". */
#define PG_MAX_SOCKET_DIR 80

enum { PG_CTL_TIMEOUT_MS = 90 * 1000, INITDB_TIMEOUT_MS = 180 * 1000 };

struct pg_paths {
    char dir[512];     /* <run>/pg, also the socket directory */
    char data[512];    /* <run>/pg/data */
    char log[512];     /* server log */
    char ctl_log[512]; /* initdb and pg_ctl output */
};

static int
pg_paths(const char *run_dir, struct pg_paths *p)
{
    return hx_path(p->dir, sizeof(p->dir), run_dir, "pg") != 0 ||
                   hx_path(p->data, sizeof(p->data), p->dir, "data") != 0 ||
                   hx_path(p->log, sizeof(p->log), p->dir, "server.log") != 0 ||
                   hx_path(p->ctl_log, sizeof(p->ctl_log), p->dir, "pg_ctl.log") != 0
               ? -1
               : 0;
}

/* Runs a server binary as the server's user, output appended to pg_ctl.log. */
static int
run_pg_tool(const struct pg_paths *p, char *const argv[], char *err, size_t len)
{
    struct hx_user user;
    struct hx_exec x = {argv[0], argv, NULL, -1, p->dir, &user, 1, -1};
    int status;

    if (hx_user_postgres(&user, err, len) != 0) {
        return -1;
    }
    x.out_fd = open(p->ctl_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (x.out_fd < 0) {
        snprintf(err, len, "cannot open %s: %s", p->ctl_log, strerror(errno));
        return -1;
    }
    status = hx_exec_run(&x, PG_CTL_TIMEOUT_MS, err, len);
    close(x.out_fd);
    if (status > 0) {
        snprintf(err, len, "%s exited with %d; its output ends with:\n%s", argv[0], status,
                 hx_file_tail(p->ctl_log, 1500));
    }
    return status == 0 ? 0 : -1;
}

/* The bin dir of the server: $OUTBOX_TEST_PG_BINDIR, else `pg_config --bindir`. */
static int
find_bindir(const struct pg_paths *p, char *out, size_t out_len, char *err, size_t len)
{
    const char *env = getenv("OUTBOX_TEST_PG_BINDIR");
    char pg_config[512];
    char *argv[] = {pg_config, "--bindir", NULL};
    struct hx_exec x = {pg_config, argv, NULL, -1, NULL, NULL, 1, -1};
    char *text;
    int status;

    if (env != NULL) {
        return snprintf(out, out_len, "%s", env) < (int)out_len ? 0 : -1;
    }
    if (hx_which("pg_config", pg_config, sizeof(pg_config)) != 0) {
        snprintf(err, len, "pg_config not found in PATH; set OUTBOX_TEST_PG_BINDIR");
        return -1;
    }
    x.out_fd = open(p->ctl_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    status = x.out_fd < 0 ? -1 : hx_exec_run(&x, 30 * 1000, err, len);
    if (x.out_fd >= 0) {
        close(x.out_fd);
    }
    text = status == 0 ? hx_read_file(p->ctl_log, NULL) : NULL;
    if (text == NULL) {
        snprintf(err, len, "pg_config --bindir failed");
        return -1;
    }
    text[strcspn(text, "\r\n")] = '\0';
    status = snprintf(out, out_len, "%s", text) < (int)out_len ? 0 : -1;
    free(text);
    return status;
}

/* The run dir and <run>/pg belong to the server's user, who must create files there. */
static int
prepare_dirs(const char *run_dir, const struct pg_paths *p, char *err, size_t len)
{
    struct hx_user user;

    if (mkdir(p->dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, len, "mkdir %s: %s", p->dir, strerror(errno));
        return -1;
    }
    if (hx_user_postgres(&user, err, len) != 0) {
        return -1;
    }
    if (user.active &&
        (chown(run_dir, user.uid, user.gid) != 0 || chown(p->dir, user.uid, user.gid) != 0)) {
        snprintf(err, len, "chown %s to postgres: %s", p->dir, strerror(errno));
        return -1;
    }
    return 0;
}

static int
initdb(const struct hx_state *st, const struct pg_paths *p, char *err, size_t len)
{
    char exe[512];
    char *argv[] = {exe,  "-D",   (char *)p->data,    "-A", "trust",    "--nosync",
                    "-E", "UTF8", "--locale=C.UTF-8", "-U", "postgres", NULL};

    if (hx_path(exe, sizeof(exe), st->pg_bindir, "initdb") != 0) {
        snprintf(err, len, "path too long");
        return -1;
    }
    return run_pg_tool(p, argv, err, len);
}

int
hx_pg_ctl_start(const char *run_dir, const struct hx_state *st, char *err, size_t len)
{
    struct pg_paths p;
    char exe[512];
    char opts[1024];
    char *argv[] = {exe, "start", "-w", "-t", "60", "-D", p.data, "-l", p.log, "-o", opts, NULL};

    if (pg_paths(run_dir, &p) != 0 || hx_path(exe, sizeof(exe), st->pg_bindir, "pg_ctl") != 0) {
        snprintf(err, len, "path too long");
        return -1;
    }
    /* No Unix socket if its path would not fit: the tests connect over TCP anyway. */
    snprintf(opts, sizeof(opts),
             "-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='%s' -c fsync=off "
             "-c full_page_writes=off -c max_connections=300",
             st->pg_port, strlen(p.dir) <= PG_MAX_SOCKET_DIR ? p.dir : "");
    if (run_pg_tool(&p, argv, err, len) != 0) {
        size_t used = strlen(err);

        snprintf(err + used, len - used, "\nserver log ends with:\n%s", hx_file_tail(p.log, 1500));
        return -1;
    }
    return 0;
}

int
hx_pg_ctl_stop(const char *run_dir, const struct hx_state *st, const char *mode, char *err,
               size_t len)
{
    struct pg_paths p;
    char exe[512];
    char *argv[] = {exe, "stop", "-w", "-t", "60", "-D", p.data, "-m", (char *)mode, NULL};

    if (pg_paths(run_dir, &p) != 0 || hx_path(exe, sizeof(exe), st->pg_bindir, "pg_ctl") != 0) {
        snprintf(err, len, "path too long");
        return -1;
    }
    return run_pg_tool(&p, argv, err, len);
}

pid_t
hx_pg_postmaster_pid(const char *run_dir)
{
    struct pg_paths p;
    char path[600];
    char *text;
    long pid = 0;

    if (pg_paths(run_dir, &p) != 0 || hx_path(path, sizeof(path), p.data, "postmaster.pid") != 0) {
        return 0;
    }
    text = hx_read_file(path, NULL);
    if (text != NULL) {
        pid = strtol(text, NULL, 10); /* the first line is the postmaster's pid */
        free(text);
    }
    return pid > 0 ? (pid_t)pid : 0;
}

int
hx_pg_boot(const char *run_dir, struct hx_state *st, char *err, size_t len)
{
    struct pg_paths p;
    char url[256];

    if (pg_paths(run_dir, &p) != 0 || prepare_dirs(run_dir, &p, err, len) != 0 ||
        find_bindir(&p, st->pg_bindir, sizeof(st->pg_bindir), err, len) != 0 ||
        initdb(st, &p, err, len) != 0) {
        return -1;
    }
    /* The free port may be taken before the server binds it: try a few. */
    for (int attempt = 0; attempt < 5; attempt++) {
        st->pg_port = hx_free_port();
        if (st->pg_port > 0 && hx_pg_ctl_start(run_dir, st, err, len) == 0) {
            st->pg_owned = 1;
            st->pg_up = 1;
            snprintf(url, sizeof(url), "postgresql://postgres@127.0.0.1:%d/postgres", st->pg_port);
            return setenv(HX_ENV_PG, url, 1);
        }
    }
    return -1;
}

/* ---- faults ---------------------------------------------------------------------------- */

int
harness_pg_port(void)
{
    struct hx_state st;

    hx_state_load(&st);
    hx_require_owned(st.pg_owned, "PostgreSQL", HX_ENV_PG);
    hx_servers_lock(0);
    return st.pg_port;
}

void
harness_pg_stop(const char *mode)
{
    const char *dir = hx_run_dir();
    struct hx_state st;
    char err[2048];

    cr_assert(mode != NULL && (strcmp(mode, "immediate") == 0 || strcmp(mode, "fast") == 0 ||
                               strcmp(mode, "smart") == 0),
              "harness_pg_stop: mode must be immediate, fast or smart, not %s",
              mode != NULL ? mode : "NULL");
    hx_state_load(&st);
    hx_require_owned(st.pg_owned, "PostgreSQL", HX_ENV_PG);
    harness_servers_exclusive();
    hx_state_load(&st);
    cr_assert(st.pg_up, "harness_pg_stop: PostgreSQL is already stopped");
    cr_assert(hx_pg_ctl_stop(dir, &st, mode, err, sizeof(err)) == 0, "harness_pg_stop(%s): %s",
              mode, err);
    st.pg_up = 0;
    cr_assert(hx_state_write(dir, &st) == 0, "harness: cannot write %s/state", dir);
}

void
harness_pg_start(void)
{
    const char *dir = hx_run_dir();
    struct hx_state st;
    char err[4096];

    hx_state_load(&st);
    hx_require_owned(st.pg_owned, "PostgreSQL", HX_ENV_PG);
    harness_servers_exclusive();
    hx_state_load(&st);
    cr_assert(!st.pg_up, "harness_pg_start: PostgreSQL is running; stop it first");
    cr_assert(hx_pg_ctl_start(dir, &st, err, sizeof(err)) == 0, "harness_pg_start on port %d: %s",
              st.pg_port, err);
    st.pg_up = 1;
    cr_assert(hx_state_write(dir, &st) == 0, "harness: cannot write %s/state", dir);
}
