/* SPDX-License-Identifier: MIT */
/*
 * test_devserver.c - the throwaway servers of the demo and the benchmark
 * (src/cli/devserver.c): durable means PostgreSQL's own defaults, not
 * durable means fsync off, JetStream answers, and nothing is left behind,
 * neither after obx_devserver_stop nor when the owner is SIGKILLed.
 *
 * Each test starts its servers under its own base directory, so "nothing
 * left" can also be checked as "the base directory is empty".
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <nats/nats.h>

#include "devserver/devserver.h"
#include "devserver/devserver_int.h"
#include "devserver/devserver_probe.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* Set in a child this file starts: it runs the servers and waits to be killed. */
#define CHILD_ENV "OBX_TEST_DEVSERVER_CHILD"

enum { MAX_WATCHED = 64, LEFTOVER_TIMEOUT_MS = 30 * 1000, CHILD_START_TIMEOUT_MS = 120 * 1000 };

static char base_dir[512];

static void
make_base_dir(void)
{
    const char *tmp = getenv("TMPDIR");

    snprintf(base_dir, sizeof(base_dir), "%s/obx-devserver-test-XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    cr_assert_not_null(mkdtemp(base_dir), "mkdtemp %s: %s", base_dir, strerror(errno));
    /* As root the servers run as postgres, who must reach the directory below this one. */
    cr_assert_eq(chmod(base_dir, 0755), 0, "chmod %s: %s", base_dir, strerror(errno));
}

static void
remove_base_dir(void)
{
    rmdir(base_dir); /* empty unless a test failed; the devserver's reaper empties it then */
}

TestSuite(devserver, .init = make_base_dir, .fini = remove_base_dir, .timeout = 240);

/* ---- what must be gone --------------------------------------------------------------- */

/* Processes and a directory that must all be gone once the servers are stopped. */
struct leftovers {
    char dir[512];
    pid_t pids[MAX_WATCHED];
    int n;
};

/* The parent pid from /proc/<pid>/stat, or 0. */
static pid_t
parent_of(pid_t pid)
{
    char path[64];
    char *stat;
    const char *paren;
    long ppid = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    stat = obx_dev_read_file(path, NULL);
    paren = stat != NULL ? strrchr(stat, ')') : NULL;
    if (paren != NULL && strlen(paren) > 4) {
        ppid = strtol(paren + 4, NULL, 10); /* ") S <ppid> ..." */
    }
    free(stat);
    return (pid_t)ppid;
}

/* Every pid for which `match(pid, arg)` holds, appended to l. */
static void
watch_matching(struct leftovers *l, int (*match)(pid_t, const void *), const void *arg)
{
    DIR *proc = opendir("/proc");
    struct dirent *e;

    cr_assert_not_null(proc);
    while ((e = readdir(proc)) != NULL && l->n < MAX_WATCHED) {
        long pid = strtol(e->d_name, NULL, 10);

        if (pid > 0 && match((pid_t)pid, arg)) {
            l->pids[l->n++] = (pid_t)pid;
        }
    }
    closedir(proc);
}

static int
is_child_of(pid_t pid, const void *parent)
{
    return parent_of(pid) == *(const pid_t *)parent;
}

static int
names_dir(pid_t pid, const void *dir)
{
    return !obx_dev_pid_gone(pid) && obx_dev_cmdline_contains(pid, dir);
}

/* Records what runs now: the reaper, the servers and the postmaster's children. */
static void
watch(struct leftovers *l, const struct obx_devserver_info *info)
{
    pid_t main_pids[] = {info->reaper_pid, info->postmaster_pid, info->nats_pid};

    memset(l, 0, sizeof(*l));
    snprintf(l->dir, sizeof(l->dir), "%s", info->dir);
    cr_assert(access(l->dir, F_OK) == 0, "the servers' directory %s should exist", l->dir);
    for (size_t i = 0; i < sizeof(main_pids) / sizeof(main_pids[0]); i++) {
        if (main_pids[i] > 0) {
            cr_assert(!obx_dev_pid_gone(main_pids[i]), "pid %d should be running",
                      (int)main_pids[i]);
            l->pids[l->n++] = main_pids[i];
        }
    }
    if (info->postmaster_pid > 0) {
        watch_matching(l, is_child_of, &info->postmaster_pid);
    }
}

static int
nothing_left(void *arg)
{
    struct leftovers *l = arg;
    struct leftovers named = {.n = 0};

    for (int i = 0; i < l->n; i++) {
        if (!obx_dev_pid_gone(l->pids[i])) {
            return 0;
        }
    }
    watch_matching(&named, names_dir, l->dir);
    return named.n == 0 && access(l->dir, F_OK) != 0;
}

static void
assert_nothing_left(struct leftovers *l, const char *after)
{
    struct dirent *e;
    DIR *base;
    int entries = 0;

    if (!harness_wait_until(nothing_left, l, LEFTOVER_TIMEOUT_MS)) {
        for (int i = 0; i < l->n; i++) {
            cr_expect(obx_dev_pid_gone(l->pids[i]), "%s: pid %d is still running", after,
                      (int)l->pids[i]);
        }
        cr_assert_fail("%s: %s or a process naming it is still there", after, l->dir);
    }
    base = opendir(base_dir);
    cr_assert_not_null(base);
    while ((e = readdir(base)) != NULL) {
        entries += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    }
    closedir(base);
    cr_assert_eq(entries, 0, "%s: %s is not empty", after, base_dir);
}

/* ---- what runs ----------------------------------------------------------------------- */

static struct obx_devserver *
start(int postgres, int nats, int durable)
{
    struct obx_devserver_options o = {
        .postgres = postgres, .nats = nats, .durable = durable, .base_dir = base_dir};
    struct obx_devserver *d = NULL;
    char err[2048] = "";

    cr_assert_eq(obx_devserver_start(&o, &d, err, sizeof(err)), 0, "obx_devserver_start: %s", err);
    cr_assert_not_null(d);
    return d;
}

/* A server setting as SHOW prints it, malloc'd. */
static char *
pg_setting(const char *url, const char *name)
{
    PGconn *conn = PQconnectdb(url);
    char sql[128];
    char *value;

    cr_assert_eq(PQstatus(conn), CONNECTION_OK, "connect to %s: %s", url, PQerrorMessage(conn));
    snprintf(sql, sizeof(sql), "SHOW %s", name);
    value = harness_scalar_text(conn, sql);
    PQfinish(conn);
    return value;
}

static void
expect_setting(const char *url, const char *name, const char *want)
{
    char *value = pg_setting(url, name);

    cr_expect_str_eq(value, want, "%s = %s, expected %s", name, value, want);
    free(value);
}

static void
expect_jetstream(const char *url)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsAccountInfo *account = NULL;
    jsErrCode jerr = 0;
    natsStatus s = natsConnection_ConnectTo(&nc, url);

    cr_assert_eq(s, NATS_OK, "connect to %s: %s", url, natsStatus_GetText(s));
    s = natsConnection_JetStream(&js, nc, NULL);
    if (s == NATS_OK) {
        s = js_GetAccountInfo(&account, js, NULL, &jerr);
    }
    cr_expect_eq(s, NATS_OK, "JetStream account info: %s (jetstream error %d)",
                 natsStatus_GetText(s), (int)jerr);
    jsAccountInfo_Destroy(account);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

Test(devserver, durable_runs_postgresql_defaults_and_jetstream_and_stops_without_a_trace)
{
    struct obx_devserver *d = start(1, 1, 1);
    struct obx_devserver_info info;
    struct leftovers l;
    const char *db_url = obx_devserver_database_url(d);
    const char *nats_url = obx_devserver_nats_url(d);

    cr_assert_not_null(db_url);
    cr_assert_not_null(nats_url);
    cr_expect(strncmp(db_url, "postgresql://postgres@127.0.0.1:", 32) == 0, "url %s", db_url);
    cr_expect(strncmp(nats_url, "nats://127.0.0.1:", 17) == 0, "url %s", nats_url);
    expect_setting(db_url, "fsync", "on");
    expect_setting(db_url, "synchronous_commit", "on");
    expect_setting(db_url, "full_page_writes", "on");
    expect_setting(db_url, "max_connections", "300");
    expect_setting(db_url, "listen_addresses", "127.0.0.1");
    expect_jetstream(nats_url);
    obx_devserver_info(d, &info);
    watch(&l, &info);
    cr_assert_gt(info.postmaster_pid, 0);
    cr_assert_gt(info.nats_pid, 0);
    obx_devserver_stop(d);
    assert_nothing_left(&l, "obx_devserver_stop");
}

Test(devserver, not_durable_runs_postgresql_without_fsync)
{
    struct obx_devserver *d = start(1, 0, 0);
    struct obx_devserver_info info;
    struct leftovers l;
    const char *db_url = obx_devserver_database_url(d);

    cr_assert_not_null(db_url);
    cr_expect_null(obx_devserver_nats_url(d), "nats-server was not asked for");
    expect_setting(db_url, "fsync", "off");
    expect_setting(db_url, "full_page_writes", "off");
    expect_setting(db_url, "synchronous_commit", "on");
    expect_setting(db_url, "max_connections", "300");
    obx_devserver_info(d, &info);
    cr_expect_eq(info.nats_pid, 0);
    watch(&l, &info);
    obx_devserver_stop(d);
    assert_nothing_left(&l, "obx_devserver_stop");
}

/* ---- the owner dies ------------------------------------------------------------------ */

/*
 * In the child started below (this binary again, with CHILD_ENV naming an
 * info file and the base dir): starts both servers, reports them and waits
 * to be killed. Unset first, or the reaper (this binary again) would start
 * servers too.
 */
__attribute__((constructor)) static void
devserver_child(void)
{
    const char *env = getenv(CHILD_ENV);
    struct obx_devserver_options o = {.postgres = 1, .nats = 1, .durable = 0};
    struct obx_devserver *d = NULL;
    struct obx_devserver_info info;
    char info_path[600];
    char tmp[640];
    char err[2048] = "";
    FILE *f;

    if (env == NULL) {
        return;
    }
    snprintf(info_path, sizeof(info_path), "%s/info", env);
    snprintf(base_dir, sizeof(base_dir), "%s", env);
    unsetenv(CHILD_ENV);
    o.base_dir = base_dir;
    snprintf(tmp, sizeof(tmp), "%s.tmp", info_path);
    f = fopen(tmp, "w");
    if (f == NULL) {
        _exit(2);
    }
    if (obx_devserver_start(&o, &d, err, sizeof(err)) != 0) {
        fprintf(f, "error=%s\n", err);
    } else {
        obx_devserver_info(d, &info);
        fprintf(f, "dir=%s\nreaper_pid=%d\npostmaster_pid=%d\nnats_pid=%d\n", info.dir,
                (int)info.reaper_pid, (int)info.postmaster_pid, (int)info.nats_pid);
    }
    fclose(f);
    rename(tmp, info_path); /* the test polls for the file: it sees all of it or nothing */
    for (;;) {
        pause();
    }
}

static int
file_exists(void *path)
{
    return access(path, F_OK) == 0;
}

/* The value of `key=` in an info file's text; "" when absent. */
static const char *
info_value(const char *text, const char *key, char *buf, size_t len)
{
    char pattern[64];
    const char *at;

    snprintf(pattern, sizeof(pattern), "%s=", key);
    at = strstr(text, pattern);
    at = at != NULL ? at + strlen(pattern) : "";
    snprintf(buf, len, "%.*s", (int)strcspn(at, "\n"), at);
    return buf;
}

static pid_t
info_pid(const char *text, const char *key)
{
    char value[32];

    return (pid_t)strtol(info_value(text, key, value, sizeof(value)), NULL, 10);
}

/* Reads the child's report into info (dir into `dir`) or its error into `error`. */
static void
read_child_info(const char *path, struct obx_devserver_info *info, char *dir, char *error,
                size_t len)
{
    char *text = obx_dev_read_file(path, NULL);

    cr_assert_not_null(text, "cannot read %s", path);
    info_value(text, "error", error, len);
    info->dir = info_value(text, "dir", dir, len);
    info->reaper_pid = info_pid(text, "reaper_pid");
    info->postmaster_pid = info_pid(text, "postmaster_pid");
    info->nats_pid = info_pid(text, "nats_pid");
    free(text);
    unlink(path);
}

Test(devserver, an_owner_killed_with_sigkill_leaves_nothing_behind)
{
    char info_path[600];
    char env_entry[600];
    char *env[] = {env_entry, NULL};
    char *argv[] = {"/proc/self/exe", NULL};
    char dir[512];
    char error[512];
    struct harness_proc child;
    struct obx_devserver_info info;
    struct leftovers l;

    snprintf(info_path, sizeof(info_path), "%s/info", base_dir);
    snprintf(env_entry, sizeof(env_entry), "%s=%s", CHILD_ENV, base_dir);
    harness_spawn(&child, argv, env);
    cr_assert(harness_wait_until(file_exists, info_path, CHILD_START_TIMEOUT_MS),
              "the child reported nothing; its log is %s", child.log_path);
    read_child_info(info_path, &info, dir, error, sizeof(dir));
    cr_assert_str_empty(error, "the child could not start its servers: %s", error);
    watch(&l, &info);
    cr_assert(l.n >= 3 && info.postmaster_pid > 0 && info.nats_pid > 0,
              "the child should run a reaper, a postmaster and nats-server");
    cr_assert_eq(harness_proc_kill(&child), 128 + SIGKILL);
    assert_nothing_left(&l, "a SIGKILLed owner");
}

/* ---- failures ------------------------------------------------------------------------ */

Test(devserver, a_failed_start_says_why_and_leaves_nothing_running)
{
    char bindir[512] = "";
    FILE *p = popen("pg_config --bindir", "r");
    struct obx_devserver_options o = {.postgres = 1, .nats = 1, .base_dir = base_dir};
    struct obx_devserver *d = NULL;
    struct leftovers l = {.n = 0};
    char err[2048] = "";

    /* PostgreSQL starts (its binaries named directly); nats-server cannot be found. */
    cr_assert_not_null(p);
    cr_assert_not_null(fgets(bindir, sizeof(bindir), p));
    pclose(p);
    bindir[strcspn(bindir, "\n")] = '\0';
    setenv("OUTBOX_TEST_PG_BINDIR", bindir, 1);
    setenv("PATH", "/nonexistent", 1);
    cr_assert_eq(obx_devserver_start(&o, &d, err, sizeof(err)), -1);
    cr_expect_null(d, "no devserver on failure");
    cr_expect(strstr(err, "nats-server") != NULL, "err: %s", err);
    /* Whatever its suffix was: a prefix matches command lines, and exists as no file. */
    cr_assert_lt(snprintf(l.dir, sizeof(l.dir), "%s/obx-dev-", base_dir), (int)sizeof(l.dir));
    assert_nothing_left(&l, "a failed start");
}

Test(devserver, refuses_a_base_directory_that_does_not_exist)
{
    struct obx_devserver_options o = {.postgres = 1, .base_dir = "/nonexistent/obx"};
    struct obx_devserver *d = NULL;
    char err[512] = "";

    cr_assert_eq(obx_devserver_start(&o, &d, err, sizeof(err)), -1);
    cr_expect_null(d);
    cr_expect(strstr(err, "/nonexistent/obx") != NULL, "err: %s", err);
}
