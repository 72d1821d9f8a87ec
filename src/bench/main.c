/* SPDX-License-Identifier: MIT */
/*
 * main.c - outbox-bench <enqueue|relay|consume>: JSON lines on stdout.
 *
 * With OUTBOX_DATABASE_URL / OUTBOX_NATS_URL it uses those servers; without,
 * it starts throwaway ones with PostgreSQL's default (durable) settings,
 * like the demo, and removes them afterwards.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "config/config.h"
#include "config/config_files.h"
#include "devserver/devserver.h"
#include "support/nats_auth.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
usage(FILE *out)
{
    fputs("usage: outbox-bench <enqueue|relay|consume|fleet> [options]\n"
          "  --seconds S          measuring time per case and round (default 3)\n"
          "  --rounds N           interleaved rounds, median reported (enqueue, consume --case\n"
          "                       ordered and try_claim; 1..16, default 3)\n"
          "  --clients N          enqueue: connections writing each case at once, as a fleet of\n"
          "                       services does (1..16, default 4)\n"
          "  --events N           events per relay case (default 50000; fleet: the flooded\n"
          "                       database's backlog, default 100000)\n"
          "  --batch N            relay lease batch (default 500; sustained: the daemon's,\n"
          "                       unless given)\n"
          "  --sustain-seconds S  sustained-load writers run this long (default 60)\n"
          "  --writer c|sql       sustained-load writers: outbox_enqueue_batch() or 100\n"
          "                       outbox.enqueue() calls per transaction (default c)\n"
          "  --table fresh|bloated  sustained: a freshly migrated outbox, or one that already\n"
          "                       relayed 300,000 events (kept as done rows) and was never\n"
          "                       vacuumed (default fresh)\n"
          "  --case NAME          one case: enqueue: a name as in its output (enqueue_sql_single,\n"
          "                       ...) with its raw baseline, or ordered (the C and SQL writers\n"
          "                       with per-aggregate ordering off and on, 10,000 aggregates\n"
          "                       and one hot one); relay: rate, latency or sustained;\n"
          "                       consume: exec (an exec:true handler beside spawning it bare)\n"
          "                       or http (an http: handler beside raw_http_post, the same\n"
          "                       POSTs through libcurl to the same local endpoint) or\n"
          "                       try_claim (outbox.try_claim() and an effect per transaction,\n"
          "                       beside the effect alone)\n"
          "  --ordering on|off    per-aggregate ordering of the outbox the cases run on\n"
          "                       (default on, as a new schema starts; the ordered cases\n"
          "                       switch it themselves and set it back after)\n"
          "  --two-writes         relay sustained: the relays claim with two writes (lease,\n"
          "                       then finish), the earlier claim, to compare against (the\n"
          "                       rate case always runs each of its cases with both claims)\n"
          "OUTBOX_DATABASE_URL / OUTBOX_NATS_URL: servers to use; unset: throwaway ones.\n",
          out);
}

static int
parse_args(int argc, char **argv, struct obx_bench_env *env)
{
    for (int i = 2; i < argc; i++) {
        const char *flag = argv[i], *value;

        if (strcmp(flag, "--two-writes") == 0) { /* the one flag without a value */
            env->two_writes = 1;
            continue;
        }
        if (i + 1 >= argc) {
            return -1; /* a flag without its value */
        }
        value = argv[++i];
        if (strcmp(flag, "--seconds") == 0) {
            env->seconds = strtod(value, NULL);
        } else if (strcmp(flag, "--rounds") == 0) {
            env->rounds = (int)strtol(value, NULL, 10);
        } else if (strcmp(flag, "--clients") == 0) {
            env->clients = (int)strtol(value, NULL, 10);
        } else if (strcmp(flag, "--events") == 0) {
            env->events = strtoll(value, NULL, 10);
            env->events_given = 1;
        } else if (strcmp(flag, "--batch") == 0) {
            env->batch = (int)strtol(value, NULL, 10);
            env->batch_given = 1;
        } else if (strcmp(flag, "--sustain-seconds") == 0) {
            env->sustain_seconds = strtod(value, NULL);
        } else if (strcmp(flag, "--writer") == 0) {
            env->writer = value;
        } else if (strcmp(flag, "--table") == 0) {
            env->table = value;
        } else if (strcmp(flag, "--case") == 0) {
            env->only_case = value;
        } else if (strcmp(flag, "--ordering") == 0) {
            env->ordering = strcmp(value, "on") == 0 ? 1 : strcmp(value, "off") == 0 ? 0 : -1;
        } else {
            return -1;
        }
    }
    return env->seconds > 0 && env->rounds > 0 && env->rounds <= OBX_BENCH_MAX_ROUNDS &&
                   env->clients > 0 && env->clients <= OBX_BENCH_MAX_CLIENTS && env->events > 0 &&
                   env->batch > 0 && env->batch <= 10000 && env->sustain_seconds > 0 &&
                   env->ordering >= 0 &&
                   (strcmp(env->writer, "c") == 0 || strcmp(env->writer, "sql") == 0) &&
                   (strcmp(env->table, "fresh") == 0 || strcmp(env->table, "bloated") == 0) &&
                   /* enqueue checks its own case names (it has many) */
                   (env->only_case == NULL || strcmp(argv[1], "relay") != 0 ||
                    strcmp(env->only_case, "rate") == 0 || strcmp(env->only_case, "latency") == 0 ||
                    strcmp(env->only_case, "sustained") == 0 ||
                    strcmp(env->only_case, "ordered") == 0)
               ? 0
               : -1;
}

static void
migrate(const struct obx_bench_env *env)
{
    PGconn *conn = obx_bench_connect(env);

    obx_bench_migrate(conn, env);
    obx_bench_close(conn);
}

/* Throwaway servers for whatever the environment does not name. */
static struct obx_devserver *
start_servers(struct obx_bench_env *env, int need_nats)
{
    struct obx_devserver_options o = {.postgres = env->database_url == NULL,
                                      .nats = need_nats && env->nats_url == NULL,
                                      .durable = 1};
    struct obx_devserver *d = NULL;
    char err[512];

    if (!o.postgres && !o.nats) {
        return NULL;
    }
    fprintf(stderr, "outbox-bench: starting throwaway%s%s\n", o.postgres ? " PostgreSQL" : "",
            o.nats ? " nats-server" : "");
    if (obx_devserver_start(&o, &d, err, sizeof(err)) != 0) {
        fprintf(stderr, "outbox-bench: %s\n", err);
        exit(1);
    }
    if (o.postgres) {
        env->database_url = obx_devserver_database_url(d);
    }
    if (o.nats) {
        env->nats_url = obx_devserver_nats_url(d);
    }
    return d;
}

/* OUTBOX_DATABASE_URL_FILE, as the daemons read it (a mounted secret). 0 or -1. */
static int
read_database_url_file(struct obx_bench_env *env)
{
    static char url[4096];
    const char *path = getenv("OUTBOX_DATABASE_URL_FILE");
    outbox_error err;

    if (env->database_url != NULL || path == NULL || path[0] == '\0') {
        return 0;
    }
    if (obx_secret_file_read("OUTBOX_DATABASE_URL_FILE", path, url, sizeof(url), &err) != 0) {
        fprintf(stderr, "outbox-bench: %s\n", err.message);
        return -1;
    }
    env->database_url = url;
    return 0;
}

/*
 * The credentials and TLS files of the bench's own connections (stream
 * setup, raw cases, subscribers): the daemons' settings from the
 * environment, read and checked by their code. 0, or -1 with the reason
 * printed.
 */
static int
set_tool_auth(void)
{
    static struct obx_config settings; /* the tool auth points into it until exit */
    struct obx_nats_auth auth;
    outbox_error err;

    if (obx_config_init(&settings, OBX_FOR_ALL, &err) != OUTBOX_OK ||
        obx_nats_auth_load_env(&settings, &err) != OUTBOX_OK) {
        fprintf(stderr, "outbox-bench: %s\n", err.message);
        return -1;
    }
    obx_nats_auth_from_config(&auth, &settings);
    obx_nats_tool_auth_set(&auth);
    return 0;
}

int
main(int argc, char **argv)
{
    struct obx_bench_env env = {.seconds = 3.0,
                                .rounds = 3,
                                .clients = 4,
                                .events = 50000,
                                .batch = 500,
                                .sustain_seconds = 60,
                                .writer = "c",
                                .table = "fresh",
                                .ordering = 1};
    struct obx_devserver *servers;
    int relay, consume, fleet, code;

    if (argc < 2 || parse_args(argc, argv, &env) != 0) {
        usage(stderr);
        return 2;
    }
    relay = strcmp(argv[1], "relay") == 0;
    consume = strcmp(argv[1], "consume") == 0;
    fleet = strcmp(argv[1], "fleet") == 0;
    if (!relay && !consume && !fleet && strcmp(argv[1], "enqueue") != 0) {
        usage(stderr);
        return 2;
    }
    env.database_url = getenv("OUTBOX_DATABASE_URL");
    env.nats_url = getenv("OUTBOX_NATS_URL");
    if (read_database_url_file(&env) != 0 || set_tool_auth() != 0) {
        return 2;
    }
    servers = start_servers(&env, relay || consume || fleet);
    migrate(&env);
    code = relay     ? obx_bench_relay(&env)
           : fleet   ? obx_bench_fleet(&env)
           : consume ? obx_bench_consume(&env)
                     : obx_bench_enqueue(&env);
    obx_devserver_stop(servers);
    return code;
}
