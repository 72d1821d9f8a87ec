/* SPDX-License-Identifier: MIT */
/*
 * main.c - outboxd: loads the settings, picks the subcommand, and maps
 * the outcome to the exit codes 0 (success), 1 (runtime failure) and
 * 2 (usage or configuration error), in this one place.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "config/config.h"
#include "logsink.h"
#include "outboxd/demo/demo.h"
#include "outboxd/service/health.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
usage(FILE *out)
{
    fputs("usage: outboxd <command> [--setting value ...]\n"
          "\n"
          "commands:\n"
          "  relay     publish the outbox to NATS (run as many replicas as you like); with\n"
          "            OUTBOX_FLEET_FILE, every database the file lists (README \"Fleet\")\n"
          "  consume   run declared handlers once per event (repeat --handler):\n"
          "            --handler 'NAME[@SUBJECT_FILTER]=sql:STATEMENT'  ($1 = envelope jsonb,\n"
          "                       in the ledger transaction: exactly-once database effects)\n"
          "            --handler 'NAME[@SUBJECT_FILTER]=exec:COMMAND'   (envelope on stdin;\n"
          "                       exit 0 done, 75 retry later, else failed)\n"
          "            or OUTBOX_HANDLER_1, OUTBOX_HANDLER_2, ... holding the same\n"
          "  demo      writers -> relays -> JetStream on throwaway servers, with a live line\n"
          "            [--seconds S] [--rate EVENTS_PER_S] [--writers N] [--relays N]\n"
          "  health    exit 0 if a running daemon's /readyz answers 200, else 1 (for\n"
          "            container health checks) [--url URL; default "
          "http://$OUTBOX_HTTP_ADDR/readyz]\n"
          "\n",
          out);
    obx_config_print_help(out, OBX_FOR_ALL);
}

static int
run_command(struct obx_config *cfg, int rest, char **argv)
{
    if (strcmp(argv[1], "demo") == 0) {
        return obx_cmd_demo(cfg, rest - 1, argv + 2, "/proc/self/exe");
    }
    if (strcmp(argv[1], "consume") == 0) {
        return obx_cmd_consume(cfg, rest - 1, argv + 2);
    }
    if (strcmp(argv[1], "relay") == 0 && rest == 1) {
        return cfg->fleet_file != NULL && cfg->fleet_file[0] != '\0' ? obx_cmd_fleet(cfg)
                                                                     : obx_cmd_relay(cfg);
    }
    fprintf(stderr, "outboxd: unknown command or argument \"%s\" (see outboxd --help)\n",
            rest > 1 ? argv[2] : argv[1]);
    return 2;
}

int
main(int argc, char **argv)
{
    struct obx_config cfg;
    outbox_error err = {0};
    int rest = 0, code;

    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "health") == 0) { /* a client: reads no settings */
        return obx_cmd_health(argc - 2, argv + 2);
    }
    if (argc >= 2 && strcmp(argv[1], "--settings-markdown") == 0) {
        obx_config_print_markdown(stdout);
        return 0;
    }
    if (obx_config_load(&cfg, argc - 1, argv + 1, &rest, &err) != OUTBOX_OK) {
        fprintf(stderr, "outboxd: %s\n", err.message);
        obx_config_fini(&cfg);
        return 2;
    }
    if (rest < 1) {
        usage(stderr);
        code = 2;
    } else {
        obx_logsink_install((outbox_log_level)cfg.log_level);
        code = run_command(&cfg, rest, argv);
    }
    obx_config_fini(&cfg);
    return code;
}
