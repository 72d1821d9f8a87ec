/* SPDX-License-Identifier: MIT */
/*
 * pgbouncer.c - Debian's PgBouncer in front of the run's PostgreSQL, for the
 * checks that must see a real pooler (doctor's transaction-mode finding).
 *
 * PgBouncer refuses to run as root, so as root it runs as postgres through
 * runuser, with its config, user list and log in a folder of the run's temp
 * dir that postgres owns. Authentication is trust (the run's server trusts
 * loopback too); the user list still has to name each user.
 */
#include "harness_int.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "devserver/devserver_probe.h"
#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { PGBOUNCER_START_TIMEOUT_MS = 10 * 1000 };

static void
write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "we");

    cr_assert(f != NULL, "harness_pgbouncer_start: cannot write %s", path);
    fputs(text, f);
    cr_assert(fclose(f) == 0, "harness_pgbouncer_start: cannot write %s", path);
}

/* Hands `path` to postgres when we are root (PgBouncer runs as postgres then). */
static void
give_to_postgres(const char *path)
{
    struct passwd *pw;

    if (geteuid() != 0) {
        return;
    }
    pw = getpwnam("postgres");
    cr_assert(pw != NULL, "harness_pgbouncer_start: running as root but there is no postgres user");
    cr_assert(chown(path, pw->pw_uid, pw->pw_gid) == 0, "harness_pgbouncer_start: chown %s", path);
}

static void
write_config(const struct harness_pgbouncer *pb, const char *pool_mode, const char *extra)
{
    char path[600], text[2048];

    /* ignore_startup_parameters: JDBC sends extra_float_digits when it connects, which
     * PgBouncer refuses unless told to ignore it (docs/writing-events.md). */
    snprintf(text, sizeof(text),
             "[databases]\n* = host=127.0.0.1 port=%d\n"
             "[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = %d\nunix_socket_dir =\n"
             "auth_type = trust\nauth_file = %s/users.txt\npool_mode = %s\n"
             "logfile = %s/pgbouncer.log\npidfile =\nmax_client_conn = 200\n"
             "default_pool_size = 20\nignore_startup_parameters = extra_float_digits\n%s",
             pb->target_port, pb->port, pb->dir, pool_mode, pb->dir, extra != NULL ? extra : "");
    snprintf(path, sizeof(path), "%s/pgbouncer.ini", pb->dir);
    write_file(path, text);
    give_to_postgres(path);
    /* HARNESS_PGBOUNCER_RELAY_USER too: PgBouncer pools per database and user, so relays
     * connecting as that user get server connections no other client is handed. */
    snprintf(path, sizeof(path), "%s/users.txt", pb->dir);
    write_file(path, "\"postgres\" \"\"\n\"" HARNESS_PGBOUNCER_RELAY_USER "\" \"\"\n");
    give_to_postgres(path);
}

int
harness_pgbouncer_start(struct harness_pgbouncer *pb, int target_port, const char *pool_mode)
{
    return harness_pgbouncer_start_with(pb, target_port, pool_mode, NULL);
}

int
harness_pgbouncer_start_with(struct harness_pgbouncer *pb, int target_port, const char *pool_mode,
                             const char *settings)
{
    char ini[600];
    char *as_root[] = {"runuser", "-u", "postgres", "--", "pgbouncer", ini, NULL};
    char *as_user[] = {"pgbouncer", ini, NULL};

    memset(pb, 0, sizeof(*pb));
    pb->target_port = target_port;
    snprintf(pb->dir, sizeof(pb->dir), "%s/pgbouncer-XXXXXX", hx_run_dir());
    cr_assert(mkdtemp(pb->dir) != NULL, "harness_pgbouncer_start: mkdtemp %s", pb->dir);
    give_to_postgres(pb->dir);
    snprintf(ini, sizeof(ini), "%s/pgbouncer.ini", pb->dir);
    /* The free port may be taken before PgBouncer binds it: try a few. */
    for (int attempt = 0; attempt < 5; attempt++) {
        long long deadline = harness_now_ms() + PGBOUNCER_START_TIMEOUT_MS;

        pb->port = obx_dev_free_port();
        cr_assert(pb->port > 0, "harness_pgbouncer_start: no free port");
        write_config(pb, pool_mode, settings);
        harness_spawn(&pb->proc, geteuid() == 0 ? as_root : as_user, NULL);
        while (!obx_dev_tcp_connects(pb->port) && harness_proc_wait(&pb->proc, 0) < 0 &&
               harness_now_ms() < deadline) {
            harness_sleep_ms(10);
        }
        if (obx_dev_tcp_connects(pb->port)) {
            return pb->port;
        }
        harness_proc_kill(&pb->proc);
    }
    snprintf(ini, sizeof(ini), "%s/pgbouncer.log", pb->dir);
    cr_assert_fail("harness_pgbouncer_start: PgBouncer did not listen; %s ends with:\n%s", ini,
                   obx_dev_file_tail(ini, 1500));
    return -1;
}

void
harness_pgbouncer_stop(struct harness_pgbouncer *pb)
{
    harness_proc_kill(&pb->proc);
}
