/* SPDX-License-Identifier: MIT */
/*
 * devserver_reaper.h - the life of a throwaway servers' directory: made by
 * mkdtemp, torn down with everything running from it, and a reaper process
 * that does the teardown when the owner dies without doing it (SIGKILL, a
 * crash, a ctest timeout).
 *
 * The reaper is this program executed again (so it needs nothing of the
 * owner's memory and is safe to start from a multi-threaded owner), in its
 * own session, reparented away from the owner: Ctrl-C's SIGINT to the
 * terminal's process group and ctest's kill of a test's process tree both
 * miss it, which is the point. It blocks reading a pipe whose write end only
 * the owner holds (close-on-exec, so servers and spawned programs never
 * inherit it); when the owner exits for any reason the kernel closes that
 * end, the read returns EOF, and the reaper tears the directory down.
 *
 * A program that starts a reaper must call obx_dev_reaper_serve() from a
 * constructor with the same variable name, so the reaper takes over before
 * main().
 */
#ifndef OBX_DEVSERVER_REAPER_H
#define OBX_DEVSERVER_REAPER_H

#include <stddef.h>
#include <sys/types.h>

/*
 * mkdtemp("<base_dir>/<prefix>-XXXXXX"), base_dir NULL meaning $TMPDIR or
 * /tmp, into out. 0, or -1 with err (and out empty).
 */
int obx_dev_make_dir(const char *base_dir, const char *prefix, char *out, size_t out_len, char *err,
                     size_t err_len);

/*
 * Starts the reaper for `dir`: this program, executed again with
 * <env_name>="<fd> <dir>". Sets its pid and the owner's end of the pipe,
 * which the owner closes (after its own teardown) to let the reaper go.
 * 0, or -1 with err.
 */
int obx_dev_reaper_start(const char *env_name, const char *dir, pid_t *reaper_pid, int *owner_fd,
                         char *err, size_t err_len);

/*
 * From a constructor: returns at once unless <env_name> is set. If it is,
 * this process is a reaper: it waits until the owner is gone, calls
 * teardown(dir) and exits without running anything else of the program.
 */
void obx_dev_reaper_serve(const char *env_name, void (*teardown)(const char *dir));

/*
 * Stops the PostgreSQL of `dir` (obx_dev_pg_halt), kills every other
 * process whose command line names `dir` (nats-server, the postmaster if it
 * would not stop, anything started with a path in it) and waits until they
 * are gone, then removes `dir`. Idempotent; a missing `dir` does nothing.
 */
void obx_dev_teardown(const char *dir);

#endif
