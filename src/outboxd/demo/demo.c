/* SPDX-License-Identifier: MIT */
/*
 * demo.c - `outboxd demo`: throwaway servers (unless URLs are set),
 * writers, relay processes, a live progress line, and an audit of the
 * stream at the end. Exits 0 only if nothing was lost or invented.
 */
#include "demo.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "demo_run.h"
#include "devserver/devserver.h"
#include "support/nats_auth.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static int
parse_demo_args(int argc, char **argv, struct obx_demo_options *o)
{
    if (argc % 2 != 0) {
        return -1; /* a flag without its value */
    }
    for (int i = 0; i < argc; i += 2) {
        const char *v = argv[i + 1];

        if (strcmp(argv[i], "--seconds") == 0) {
            o->seconds = strtod(v, NULL);
        } else if (strcmp(argv[i], "--rate") == 0) {
            o->rate = (int)strtol(v, NULL, 10);
        } else if (strcmp(argv[i], "--writers") == 0) {
            o->writers = (int)strtol(v, NULL, 10);
        } else if (strcmp(argv[i], "--relays") == 0) {
            o->relays = (int)strtol(v, NULL, 10);
        } else {
            return -1;
        }
    }
    return o->seconds > 0 && o->seconds <= 3600 && o->rate >= 1 && o->rate <= 100000 &&
                   o->writers >= 1 && o->writers <= 32 && o->relays >= 1 &&
                   o->relays <= OBX_DEMO_MAX_RELAYS
               ? 0
               : -1;
}

/* Throwaway servers for whatever the settings do not name. */
static int
start_servers(struct obx_config *cfg, struct obx_devserver **servers)
{
    struct obx_devserver_options o = {.postgres = cfg->database_url == NULL,
                                      .nats = getenv("OUTBOX_NATS_URL") == NULL,
                                      .durable = 1};
    outbox_error e = {0};
    char err[512];

    *servers = NULL;
    if (!o.postgres && !o.nats) {
        return 0;
    }
    printf("starting a throwaway%s%s ...\n", o.postgres ? " PostgreSQL" : "",
           o.nats ? (o.postgres ? " and nats-server" : " nats-server") : "");
    if (obx_devserver_start(&o, servers, err, sizeof(err)) != 0) {
        fprintf(stderr, "outboxd demo: %s\n", err);
        return -1;
    }
    if ((o.postgres &&
         obx_config_set_key(cfg, "database_url", obx_devserver_database_url(*servers), &e) != 0) ||
        (o.nats &&
         obx_config_set_key(cfg, "nats_url", obx_devserver_nats_url(*servers), &e) != 0)) {
        fprintf(stderr, "outboxd demo: %s\n", e.message);
        return -1;
    }
    return 0;
}

int
obx_cmd_demo(const struct obx_config *cfg_in, int argc, char **argv, const char *self)
{
    struct obx_demo_options o = {
        .seconds = 20, .rate = 1000, .writers = 4, .relays = 3, .self = self};
    struct obx_config cfg;
    struct obx_nats_auth auth;
    struct obx_devserver *servers = NULL;
    int code = 1;

    if (parse_demo_args(argc, argv, &o) != 0) {
        fprintf(stderr,
                "usage: outboxd demo [--seconds S] [--rate EVENTS_PER_S] [--writers N] "
                "[--relays N (1-%d)]\n",
                OBX_DEMO_MAX_RELAYS);
        return 2;
    }
    /* The demo's own copy: it points the settings at the servers it starts. */
    if (obx_config_init(&cfg, OBX_FOR_ALL, NULL) == OUTBOX_OK &&
        obx_config_copy(&cfg, cfg_in, NULL) == OUTBOX_OK && start_servers(&cfg, &servers) == 0) {
        /* The stream audit connects once, deep in the demo: with the same credentials. */
        obx_nats_auth_from_config(&auth, &cfg);
        obx_nats_tool_auth_set(&auth);
        code = obx_demo_prepare_db(cfg.database_url, cfg.schema) != 0 ? 1 : obx_demo_run(&cfg, &o);
    }
    obx_devserver_stop(servers);
    obx_nats_tool_auth_set(NULL);
    obx_config_fini(&cfg);
    return code;
}
