/* SPDX-License-Identifier: MIT */
/*
 * pg_server.c - the run's PostgreSQL and the faults tests inject into it.
 *
 * The cluster itself (initdb, pg_ctl, as the postgres user when root, fsync
 * off) is src/cli/devserver_pg.c, shared with the demo and the benchmark;
 * it lives in <run>/pg. What is left here is the harness's part: the URL
 * for the workers, and stop/start under the servers lock.
 */
#include "harness_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "devserver/devserver_pg.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

int
hx_pg_boot(const char *run_dir, struct hx_state *st, char *err, size_t len)
{
    char url[256];

    st->pg.durable = 0;
    /* One initdb per build tree, copied by every binary's boot after it. */
    st->pg.initdb_cache = OBX_HARNESS_INITDB_CACHE;
    if (obx_dev_pg_boot(run_dir, &st->pg, err, len) != 0) {
        return -1;
    }
    st->pg_owned = 1;
    st->pg_up = 1;
    snprintf(url, sizeof(url), "postgresql://postgres@127.0.0.1:%d/postgres", st->pg.port);
    return setenv(HX_ENV_PG, url, 1);
}

/* ---- faults ---------------------------------------------------------------------------- */

int
harness_pg_port(void)
{
    struct hx_state st;

    hx_state_load(&st);
    hx_require_owned(st.pg_owned, "PostgreSQL", HX_ENV_PG);
    hx_servers_lock(0);
    return st.pg.port;
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
    cr_assert(obx_dev_pg_stop(dir, &st.pg, mode, err, sizeof(err)) == 0, "harness_pg_stop(%s): %s",
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
    cr_assert(obx_dev_pg_start(dir, &st.pg, err, sizeof(err)) == 0,
              "harness_pg_start on port %d: %s", st.pg.port, err);
    st.pg_up = 1;
    cr_assert(hx_state_write(dir, &st) == 0, "harness: cannot write %s/state", dir);
}
