/* SPDX-License-Identifier: MIT */
/*
 * run.c - what the processes of one test run share: the temp dir named by
 * OBX_HARNESS_DIR, the state file in it, and the servers lock.
 *
 * The state file holds ports, pids and "is it up" flags as key=value lines.
 * It is replaced with rename(), so a reader never sees half of it; writers
 * hold the servers lock exclusively (or are the runner, before any worker).
 *
 * The servers lock (flock on servers.lock) keeps fault tests apart from the
 * tests they would disturb: a test that uses the servers holds it shared, a
 * test that stops or kills them holds it exclusively. Whoever takes the lock
 * first in a worker checks that the servers are up, and restarts them if an
 * earlier fault test left them down (it may have failed or timed out
 * half-way), so one broken fault test does not fail every later test.
 */
#include "harness_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "devserver/devserver_probe.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

_Static_assert(sizeof(pid_t) == sizeof(int), "pids are stored as int fields");

enum field_type { FIELD_INT, FIELD_STR };

struct field {
    const char *key;
    enum field_type type;
    size_t offset;
    size_t size;
};

#define INT_FIELD(name)                                                \
    {                                                                  \
#name, FIELD_INT, offsetof(struct hx_state, name), sizeof(int) \
    }
#define STR_FIELD(name)                                                                         \
    {                                                                                           \
#name, FIELD_STR, offsetof(struct hx_state, name), sizeof(((struct hx_state *)0)->name) \
    }

static const struct field fields[] = {
    INT_FIELD(runner_pid),  INT_FIELD(reaper_pid), INT_FIELD(pg_owned),    INT_FIELD(pg.port),
    INT_FIELD(pg.durable),  INT_FIELD(pg_up),      STR_FIELD(pg.bindir),   INT_FIELD(nats_owned),
    INT_FIELD(nats.port),   INT_FIELD(nats.pid),   INT_FIELD(nats_status), INT_FIELD(nats_custom),
    STR_FIELD(template_db),
};

#define N_FIELDS (sizeof(fields) / sizeof(fields[0]))

static int lock_fd = -1;
static int lock_held; /* 0, LOCK_SH or LOCK_EX */
static pid_t atexit_pid;

const char *
hx_run_dir_or_null(void)
{
    const char *dir = getenv(HX_ENV_DIR);

    return dir != NULL && dir[0] != '\0' ? dir : NULL;
}

const char *
hx_run_dir(void)
{
    const char *dir = hx_run_dir_or_null();

    cr_assert(dir != NULL,
              "harness: %s is not set, so the PRE_ALL hook did not run (link tests/harness as "
              "an OBJECT library, or the hooks are dropped)",
              HX_ENV_DIR);
    return dir;
}

int
hx_state_write(const char *run_dir, const struct hx_state *st)
{
    char text[2048];
    char tmp[512];
    char path[512];
    size_t used = 0;
    FILE *f;

    for (size_t i = 0; i < N_FIELDS && used < sizeof(text); i++) {
        const char *at = (const char *)st + fields[i].offset;

        if (fields[i].type == FIELD_INT) {
            used += (size_t)snprintf(text + used, sizeof(text) - used, "%s=%d\n", fields[i].key,
                                     *(const int *)at);
        } else {
            used +=
                (size_t)snprintf(text + used, sizeof(text) - used, "%s=%s\n", fields[i].key, at);
        }
    }
    if (used >= sizeof(text) || obx_dev_path(path, sizeof(path), run_dir, "state") != 0 ||
        snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
        return -1;
    }
    f = fopen(tmp, "we");
    if (f == NULL) {
        return -1;
    }
    if (fwrite(text, 1, used, f) != used || fclose(f) != 0) {
        unlink(tmp);
        return -1;
    }
    return rename(tmp, path);
}

static void
set_field(struct hx_state *st, const char *key, const char *value)
{
    for (size_t i = 0; i < N_FIELDS; i++) {
        char *at = (char *)st + fields[i].offset;

        if (strcmp(fields[i].key, key) != 0) {
            continue;
        }
        if (fields[i].type == FIELD_INT) {
            *(int *)at = (int)strtol(value, NULL, 10);
        } else {
            snprintf(at, fields[i].size, "%s", value);
        }
    }
}

int
hx_state_read(const char *run_dir, struct hx_state *st)
{
    char path[512];
    char *text;
    char *line;

    memset(st, 0, sizeof(*st));
    if (obx_dev_path(path, sizeof(path), run_dir, "state") != 0 ||
        (text = obx_dev_read_file(path, NULL)) == NULL) {
        return -1;
    }
    for (line = text; *line != '\0';) {
        char *end = line + strcspn(line, "\n");
        char *eq = memchr(line, '=', (size_t)(end - line));
        int last = *end == '\0';

        *end = '\0';
        if (eq != NULL) {
            *eq = '\0';
            set_field(st, line, eq + 1);
        }
        line = last ? end : end + 1;
    }
    free(text);
    return 0;
}

void
hx_state_load(struct hx_state *st)
{
    const char *dir = hx_run_dir();

    cr_assert(hx_state_read(dir, st) == 0, "harness: cannot read %s/state: %s", dir,
              strerror(errno));
}

void
hx_require_owned(int owned, const char *what, const char *env)
{
    if (!owned) {
        cr_skip_test("needs the harness's own %s, but %s points at a server from outside", what,
                     env);
    }
}

static int
nats_needs_healing(const struct hx_state *st)
{
    return st->nats_owned && (st->nats_status != HX_NATS_RUNNING || st->nats_custom ||
                              obx_dev_pid_gone(st->nats.pid) || obx_dev_pid_stopped(st->nats.pid));
}

static int
pg_needs_healing(const char *dir, const struct hx_state *st)
{
    pid_t postmaster = st->pg_owned ? obx_dev_pg_postmaster_pid(dir) : 0;

    return st->pg_owned && (!st->pg_up || postmaster == 0 || obx_dev_pid_gone(postmaster));
}

/* Restarts what an earlier test left down. Needs the lock exclusively. */
static void
heal(const char *dir)
{
    struct hx_state st;
    char err[2048] = "";

    hx_state_load(&st);
    if (pg_needs_healing(dir, &st)) {
        pid_t postmaster = obx_dev_pg_postmaster_pid(dir);

        if ((postmaster == 0 || obx_dev_pid_gone(postmaster)) &&
            obx_dev_pg_start(dir, &st.pg, err, sizeof(err)) != 0) {
            cr_assert_fail("harness: an earlier test left PostgreSQL down and it did not start "
                           "again: %s",
                           err);
        }
        st.pg_up = 1;
    }
    if (nats_needs_healing(&st)) {
        hx_nats_halt(dir, &st, 0);
        st.nats_custom = 0;
        if (hx_nats_launch(dir, &st, NULL, err, sizeof(err)) != 0) {
            hx_state_write(dir, &st);
            cr_assert_fail("harness: an earlier test left nats-server down or changed and it did "
                           "not start again: %s",
                           err);
        }
    }
    cr_assert(hx_state_write(dir, &st) == 0, "harness: cannot write %s/state", dir);
}

static void
lock_as(int mode)
{
    while (flock(lock_fd, mode) != 0) {
        cr_assert(errno == EINTR, "harness: flock servers.lock: %s", strerror(errno));
    }
    lock_held = mode;
}

void
hx_servers_lock(int exclusive)
{
    const char *dir = hx_run_dir();
    int want = exclusive ? LOCK_EX : LOCK_SH;
    struct hx_state st;
    char path[512];

    if (lock_held == LOCK_EX || lock_held == want) {
        return;
    }
    if (lock_fd < 0) {
        cr_assert(obx_dev_path(path, sizeof(path), dir, "servers.lock") == 0,
                  "harness: path too long");
        lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        cr_assert(lock_fd >= 0, "harness: cannot open %s: %s", path, strerror(errno));
    }
    lock_as(want);
    hx_state_load(&st);
    if (pg_needs_healing(dir, &st) || nats_needs_healing(&st)) {
        /* flock converts by dropping and re-taking, so two converters cannot deadlock. */
        lock_as(LOCK_EX);
        heal(dir);
        lock_as(want);
    }
}

static void
worker_exit(void)
{
    if (getpid() != atexit_pid) {
        return; /* a forked child that called exit() */
    }
    hx_procs_cleanup();
    hx_dbs_cleanup();
}

void
hx_worker_atexit(void)
{
    if (atexit_pid != getpid()) {
        atexit_pid = getpid();
        atexit(worker_exit);
    }
}

void
harness_servers_exclusive(void)
{
    hx_servers_lock(1);
}
