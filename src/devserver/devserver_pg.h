/* SPDX-License-Identifier: MIT */
/*
 * devserver_pg.h - a throwaway PostgreSQL cluster in a directory of ours,
 * for the throwaway servers (devserver.c) and the test harness.
 *
 * Layout: <dir>/pg/data (the cluster), <dir>/pg/server.log,
 * <dir>/pg/pg_ctl.log (initdb and pg_ctl output), and the Unix socket in
 * <dir>/pg. The server listens on 127.0.0.1:<port> with max_connections=300.
 */
#ifndef OBX_DEVSERVER_PG_H
#define OBX_DEVSERVER_PG_H

#include <stddef.h>
#include <sys/types.h>

struct obx_dev_pg {
    char bindir[256]; /* initdb and pg_ctl; set by obx_dev_pg_boot */
    int port;         /* 127.0.0.1:port; set by obx_dev_pg_boot */
    int durable;      /* 1: PostgreSQL's defaults (fsync on); 0: fsync and full_page_writes off */
    /*
     * Not durable only (else ignored): a directory where obx_dev_pg_boot
     * keeps the first initdb's result and copies it for later boots instead
     * of running initdb again (the test harness boots a cluster per test
     * binary). NULL: initdb every time. Not kept in the harness's state.
     */
    const char *initdb_cache;
};

/*
 * Finds the server binaries ($OUTBOX_TEST_PG_BINDIR, else `pg_config
 * --bindir`), runs initdb in <dir>/pg/data (or copies pg->initdb_cache's
 * result there) and starts the server on a free
 * port; returns once it accepts connections. Set pg->durable first. 0, or
 * -1 with the reason in err (a cluster that did start is left running for
 * the caller's teardown: obx_dev_pg_halt).
 */
int obx_dev_pg_boot(const char *dir, struct obx_dev_pg *pg, char *err, size_t err_len);

/* pg_ctl start -w on the same port and data, after obx_dev_pg_stop. 0, or -1 with err. */
int obx_dev_pg_start(const char *dir, const struct obx_dev_pg *pg, char *err, size_t err_len);

/* pg_ctl stop -w -m <mode> ("immediate", "fast" or "smart"). 0, or -1 with err. */
int obx_dev_pg_stop(const char *dir, const struct obx_dev_pg *pg, const char *mode, char *err,
                    size_t err_len);

/* The postmaster's pid from postmaster.pid, or 0. */
pid_t obx_dev_pg_postmaster_pid(const char *dir);

/*
 * For teardown: an immediate shutdown, SIGKILL if the postmaster is still
 * there after 10 s. Needs no binaries and no state, only the directory.
 */
void obx_dev_pg_halt(const char *dir);

#endif
