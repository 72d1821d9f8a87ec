/* SPDX-License-Identifier: MIT */
/*
 * consume_exec.c - the exec case's baseline: the command an `exec:`
 * handler runs, spawned the way it spawns it (/bin/sh -c) and waited for,
 * with no pgoutbox around it. What a process start costs on this machine.
 */
#include <spawn.h>
#include <sys/wait.h>

#include "bench/bench.h"

#include "common/banned.h" /* last: poisons unsafe functions */

extern char **environ;

double
obx_bench_spawn_rate(const char *command, int count)
{
    char *argv[] = {"/bin/sh", "-c", (char *)command, NULL};
    double start = obx_bench_now();
    int done = 0;

    for (int i = 0; i < count; i++) {
        pid_t pid;
        int status;

        if (posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) != 0) {
            continue;
        }
        if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            done++;
        }
    }
    return done / (obx_bench_now() - start);
}
