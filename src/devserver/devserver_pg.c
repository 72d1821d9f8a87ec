/* SPDX-License-Identifier: MIT */
/*
 * devserver_pg.c - a throwaway PostgreSQL cluster: initdb, pg_ctl start and
 * stop, and the teardown's immediate shutdown.
 *
 * Durable (the benchmark) runs PostgreSQL's defaults, fsync and
 * synchronous_commit on, as production runs it, since that is what the
 * benchmark must measure; initdb then syncs its files too, so no writeback
 * of them lands in the measurement. Not durable (the tests, the demo) adds
 * initdb --nosync, fsync=off and full_page_writes=off: the data dies with
 * the directory, so surviving an OS crash only costs time.
 * synchronous_commit stays on either way: with fsync off it costs nothing
 * measurable (pgbench, 1 and 8 clients, on a 2-core machine: within noise),
 * and with it off an immediate stop loses transactions already reported
 * committed, which a fault test would count as events lost by our code.
 *
 * initdb refuses to run as root, so as root the server binaries run as the
 * postgres user (privileges dropped in the forked child) and the directory
 * is handed to that user. pg_ctl daemonizes the postmaster, so it is never
 * a child of the caller (a Criterion runner must not see a child die).
 */
#include "devserver_pg.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devserver_exec.h"
#include "devserver_probe.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* A Unix socket path must fit sockaddr_un (108 bytes) with ".s.PGSQL.NNNNN". */
#define PG_MAX_SOCKET_DIR 80

enum {
    PG_CTL_TIMEOUT_MS = 90 * 1000,
    INITDB_TIMEOUT_MS = 180 * 1000,
    PG_HALT_GRACE_MS = 10 * 1000,
    PORT_ATTEMPTS = 5
};

struct pg_paths {
    char dir[512];     /* <dir>/pg, also the socket directory */
    char data[512];    /* <dir>/pg/data */
    char log[512];     /* server log */
    char ctl_log[512]; /* initdb and pg_ctl output */
};

static int
pg_paths(const char *dir, struct pg_paths *p)
{
    return obx_dev_path(p->dir, sizeof(p->dir), dir, "pg") != 0 ||
                   obx_dev_path(p->data, sizeof(p->data), p->dir, "data") != 0 ||
                   obx_dev_path(p->log, sizeof(p->log), p->dir, "server.log") != 0 ||
                   obx_dev_path(p->ctl_log, sizeof(p->ctl_log), p->dir, "pg_ctl.log") != 0
               ? -1
               : 0;
}

/* Runs a server binary as the server's user, output appended to pg_ctl.log. */
static int
run_pg_tool(const struct pg_paths *p, char *const argv[], int timeout_ms, char *err, size_t len)
{
    struct obx_dev_user user;
    struct obx_dev_exec x = {argv[0], argv, NULL, -1, p->dir, &user, 1, -1};
    int status;

    if (obx_dev_user_postgres(&user, err, len) != 0) {
        return -1;
    }
    x.out_fd = open(p->ctl_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (x.out_fd < 0) {
        snprintf(err, len, "cannot open %s: %s", p->ctl_log, strerror(errno));
        return -1;
    }
    status = obx_dev_exec_run(&x, timeout_ms, err, len);
    close(x.out_fd);
    if (status > 0) {
        snprintf(err, len, "%s exited with %d; its output ends with:\n%s", argv[0], status,
                 obx_dev_file_tail(p->ctl_log, 1500));
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
    struct obx_dev_exec x = {pg_config, argv, NULL, -1, NULL, NULL, 1, -1};
    char *text;
    int status;

    if (env != NULL) {
        return snprintf(out, out_len, "%s", env) < (int)out_len ? 0 : -1;
    }
    if (obx_dev_which("pg_config", pg_config, sizeof(pg_config)) != 0) {
        snprintf(err, len, "pg_config not found in PATH; set OUTBOX_TEST_PG_BINDIR");
        return -1;
    }
    x.out_fd = open(p->ctl_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    status = x.out_fd < 0 ? -1 : obx_dev_exec_run(&x, 30 * 1000, err, len);
    if (x.out_fd >= 0) {
        close(x.out_fd);
    }
    text = status == 0 ? obx_dev_read_file(p->ctl_log, NULL) : NULL;
    if (text == NULL) {
        snprintf(err, len, "pg_config --bindir failed");
        return -1;
    }
    text[strcspn(text, "\r\n")] = '\0';
    status = snprintf(out, out_len, "%s", text) < (int)out_len ? 0 : -1;
    free(text);
    return status;
}

/* The directory and <dir>/pg belong to the server's user, who must create files there. */
static int
prepare_dirs(const char *dir, const struct pg_paths *p, char *err, size_t len)
{
    struct obx_dev_user user;

    if (mkdir(p->dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, len, "mkdir %s: %s", p->dir, strerror(errno));
        return -1;
    }
    if (obx_dev_user_postgres(&user, err, len) != 0) {
        return -1;
    }
    if (user.active &&
        (chown(dir, user.uid, user.gid) != 0 || chown(p->dir, user.uid, user.gid) != 0)) {
        snprintf(err, len, "chown %s to postgres: %s", p->dir, strerror(errno));
        return -1;
    }
    return 0;
}

static int
initdb(const struct obx_dev_pg *pg, const struct pg_paths *p, char *err, size_t len)
{
    char exe[512];
    char *argv[] = {exe,  "-D",       (char *)p->data,    "-A",       "trust", "-E", "UTF8",
                    "-U", "postgres", "--locale=C.UTF-8", "--nosync", NULL};

    if (obx_dev_path(exe, sizeof(exe), pg->bindir, "initdb") != 0) {
        snprintf(err, len, "path too long");
        return -1;
    }
    if (pg->durable) {
        argv[10] = NULL; /* drop --nosync */
    }
    return run_pg_tool(p, argv, INITDB_TIMEOUT_MS, err, len);
}

/* cp -a `from` `to` (`to` must not exist): owners and modes as they were. */
static int
copy_tree(const char *from, const char *to, char *err, size_t len)
{
    char cp[512];
    char *argv[] = {cp, "-a", (char *)from, (char *)to, NULL};
    struct obx_dev_exec x = {cp, argv, NULL, -1, NULL, NULL, 1, -1};
    int status;

    if (obx_dev_which("cp", cp, sizeof(cp)) != 0) {
        snprintf(err, len, "cp not found in PATH");
        return -1;
    }
    status = obx_dev_exec_run(&x, INITDB_TIMEOUT_MS, err, len);
    if (status > 0) {
        snprintf(err, len, "cp -a %s %s exited with %d", from, to, status);
    }
    return status == 0 ? 0 : -1;
}

/*
 * The cluster's data directory: a copy of the one initdb made for an
 * earlier boot of the same server binaries (pg->initdb_cache), else
 * initdb's, which then goes into the cache for the next boot. initdb's
 * result depends only on the binaries (in the key), its fixed options and
 * the machine. The cache is filled by rename(), so a boot never sees half
 * of one; a boot that cannot fill it still boots.
 */
static int
make_data(const struct obx_dev_pg *pg, const struct pg_paths *p, char *err, size_t len)
{
    char kept[800], marker[840], tmp[840];
    struct stat st;
    int n;

    if (pg->durable || pg->initdb_cache == NULL) {
        return initdb(pg, p, err, len);
    }
    n = snprintf(kept, sizeof(kept), "%s/v1", pg->initdb_cache);
    for (const char *c = pg->bindir; *c != '\0' && n > 0 && (size_t)n < sizeof(kept) - 1; c++) {
        kept[n++] = *c == '/' ? '_' : *c;
    }
    kept[n < (int)sizeof(kept) ? n : (int)sizeof(kept) - 1] = '\0';
    snprintf(marker, sizeof(marker), "%s/PG_VERSION", kept);
    if (stat(marker, &st) == 0) {
        return copy_tree(kept, p->data, err, len);
    }
    if (initdb(pg, p, err, len) != 0) {
        return -1;
    }
    snprintf(tmp, sizeof(tmp), "%s.%d", kept, (int)getpid());
    if ((mkdir(pg->initdb_cache, 0755) == 0 || errno == EEXIST) &&
        copy_tree(p->data, tmp, err, len) == 0 && rename(tmp, kept) != 0) {
        char rm[512];
        char *argv[] = {rm, "-rf", tmp, NULL};
        struct obx_dev_exec x = {rm, argv, NULL, -1, NULL, NULL, 1, -1};

        /* Another boot filled it first: its copy is as good. */
        if (obx_dev_which("rm", rm, sizeof(rm)) == 0) {
            obx_dev_exec_run(&x, INITDB_TIMEOUT_MS, err, len);
        }
    }
    err[0] = '\0';
    return 0;
}

int
obx_dev_pg_start(const char *dir, const struct obx_dev_pg *pg, char *err, size_t len)
{
    struct pg_paths p;
    char exe[512];
    char opts[1024];
    char *argv[] = {exe, "start", "-w", "-t", "60", "-D", p.data, "-l", p.log, "-o", opts, NULL};

    if (pg_paths(dir, &p) != 0 || obx_dev_path(exe, sizeof(exe), pg->bindir, "pg_ctl") != 0) {
        snprintf(err, len, "path too long");
        return -1;
    }
    /* No Unix socket if its path would not fit: clients connect over TCP anyway. */
    snprintf(opts, sizeof(opts),
             "-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='%s' "
             "-c max_connections=300%s",
             pg->port, strlen(p.dir) <= PG_MAX_SOCKET_DIR ? p.dir : "",
             pg->durable ? "" : " -c fsync=off -c full_page_writes=off");
    if (run_pg_tool(&p, argv, PG_CTL_TIMEOUT_MS, err, len) != 0) {
        size_t used = strlen(err);

        snprintf(err + used, len - used, "\nserver log ends with:\n%s",
                 obx_dev_file_tail(p.log, 1500));
        return -1;
    }
    return 0;
}

int
obx_dev_pg_stop(const char *dir, const struct obx_dev_pg *pg, const char *mode, char *err,
                size_t len)
{
    struct pg_paths p;
    char exe[512];
    char *argv[] = {exe, "stop", "-w", "-t", "60", "-D", p.data, "-m", (char *)mode, NULL};

    if (pg_paths(dir, &p) != 0 || obx_dev_path(exe, sizeof(exe), pg->bindir, "pg_ctl") != 0) {
        snprintf(err, len, "path too long");
        return -1;
    }
    return run_pg_tool(&p, argv, PG_CTL_TIMEOUT_MS, err, len);
}

pid_t
obx_dev_pg_postmaster_pid(const char *dir)
{
    struct pg_paths p;
    char path[600];
    char *text;
    long pid = 0;

    if (pg_paths(dir, &p) != 0 || obx_dev_path(path, sizeof(path), p.data, "postmaster.pid") != 0) {
        return 0;
    }
    text = obx_dev_read_file(path, NULL);
    if (text != NULL) {
        pid = strtol(text, NULL, 10); /* the first line is the postmaster's pid */
        free(text);
    }
    return pid > 0 ? (pid_t)pid : 0;
}

void
obx_dev_pg_halt(const char *dir)
{
    pid_t postmaster = obx_dev_pg_postmaster_pid(dir);

    /* The command line names the data dir: a stranger that reused the pid is left alone. */
    if (postmaster == 0 || obx_dev_pid_gone(postmaster) ||
        !obx_dev_cmdline_contains(postmaster, dir)) {
        return;
    }
    /* SIGQUIT is what pg_ctl stop -m immediate sends; it also frees the shared memory. */
    kill(postmaster, SIGQUIT);
    if (!obx_dev_wait_pid_gone(postmaster, PG_HALT_GRACE_MS)) {
        kill(postmaster, SIGKILL); /* its backends notice and exit */
        obx_dev_wait_pid_gone(postmaster, PG_HALT_GRACE_MS);
    }
}

int
obx_dev_pg_boot(const char *dir, struct obx_dev_pg *pg, char *err, size_t len)
{
    struct pg_paths p;

    if (pg_paths(dir, &p) != 0 || prepare_dirs(dir, &p, err, len) != 0 ||
        find_bindir(&p, pg->bindir, sizeof(pg->bindir), err, len) != 0 ||
        make_data(pg, &p, err, len) != 0) {
        return -1;
    }
    /* The free port may be taken before the server binds it: try a few. */
    for (int attempt = 0; attempt < PORT_ATTEMPTS; attempt++) {
        pg->port = obx_dev_free_port();
        if (pg->port > 0 && obx_dev_pg_start(dir, pg, err, len) == 0) {
            return 0;
        }
    }
    return -1;
}
