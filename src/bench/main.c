/* SPDX-License-Identifier: MIT */
/*
 * main.c - outbox-bench <enqueue|relay|consume>: JSON lines on stdout.
 *
 * With OUTBOX_DATABASE_URL / OUTBOX_NATS_URL it uses those servers;
 * without, it starts throwaway ones, like the demo.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "outbox/outbox.h"

#include "banned.h" /* last: poisons unsafe functions */

static void
usage(FILE *out)
{
    fputs("usage: outbox-bench <enqueue> [--seconds S] [--rounds N]\n"
          "  OUTBOX_DATABASE_URL  database to use (migrated here); required for now\n",
          out);
}

static int
parse_args(int argc, char **argv, struct obx_bench_env *env)
{
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            env->seconds = strtod(argv[++i], NULL);
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            env->rounds = (int)strtol(argv[++i], NULL, 10);
        } else {
            return -1;
        }
    }
    return env->seconds > 0 && env->rounds > 0 ? 0 : -1;
}

static int
migrate(const struct obx_bench_env *env)
{
    PGconn *conn = obx_bench_connect(env);
    outbox_error err;
    outbox_status st = outbox_migrate(conn, "outbox", NULL, &err);

    PQfinish(conn);
    if (st != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: migrate: %s\n", err.message);
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    struct obx_bench_env env = {.seconds = 3.0, .rounds = 3};

    if (argc < 2 || parse_args(argc, argv, &env) != 0) {
        usage(stderr);
        return 2;
    }
    env.database_url = getenv("OUTBOX_DATABASE_URL");
    env.nats_url = getenv("OUTBOX_NATS_URL");
    if (env.database_url == NULL) {
        fprintf(stderr, "outbox-bench: OUTBOX_DATABASE_URL is required for now\n");
        return 2;
    }
    if (migrate(&env) != 0) {
        return 1;
    }
    if (strcmp(argv[1], "enqueue") == 0) {
        return obx_bench_enqueue(&env);
    }
    usage(stderr);
    return 2;
}
