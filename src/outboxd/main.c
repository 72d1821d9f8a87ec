/* SPDX-License-Identifier: MIT */
/*
 * main.c - outboxd: loads the settings, picks the subcommand, and maps
 * the outcome to the exit codes 0 (success), 1 (runtime failure) and
 * 2 (usage or configuration error), in this one place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "config/config.h"
#include "config/config_warn.h"
#include "logsink.h"
#include "outboxd/demo/demo.h"
#include "outboxd/service/exit_guard.h"
#include "outboxd/service/health.h"
#include "support/log.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
usage(FILE *out)
{
    fputs("usage: outboxd <command> [--setting value ...]\n"
          "\n"
          "commands:\n"
          "  relay     publish the outbox to NATS (run as many replicas as you like); with\n"
          "            OUTBOX_FLEET_FILE, every database the file lists (docs/relays.md)\n"
          "  consume   run declared handlers once per event (repeat --handler):\n"
          "            --handler 'NAME[@SUBJECT_FILTER]=sql:STATEMENT'  ($1 = envelope jsonb,\n"
          "                       in the ledger transaction: exactly-once database effects)\n"
          "            --handler 'NAME[@SUBJECT_FILTER]=exec:COMMAND'   (envelope on stdin;\n"
          "                       exit 0 done, 75 retry later, else failed)\n"
          "            --handler 'NAME[@SUBJECT_FILTER]=http:URL'       (a CloudEvents POST;\n"
          "                       2xx done; docs/consumers.md has the contract)\n"
          "            exec and http take options: exec[in_flight=4,timeout=30]:COMMAND\n"
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

extern char **environ;

static void
warn_line(void *ctx, const char *line)
{
    (void)ctx;
    /* As it is: the line is the code's words around names quoted and escaped by
     * obx_quote_for_message, so it holds no field a name could forge; through "%s" the
     * logger would quote it whole, quotes and all. */
    if (obx_log_enabled && OUTBOX_LOG_WARN >= obx_log_min_level) {
        obx_log_write_line(OUTBOX_LOG_WARN, line);
    }
}

/*
 * Warns about the OUTBOX_* variables and --flags the command will not
 * read: a misspelled name, or a setting of another part (a relay given
 * OUTBOX_LEDGER_LEASE_SECONDS). `given` is the command line as typed.
 */
static void
warn_unread(const struct obx_config *cfg, const char *command, int argc, char **given)
{
    /* Read by a part the command runs, but not by the command itself. */
    static const char *const by_relay[] = {"OUTBOX_HANDLER_TIMEOUT_SECONDS", NULL};
    static const char *const by_one_relay[] = {"OUTBOX_HANDLER_TIMEOUT_SECONDS",
                                               "OUTBOX_FLEET_DATABASE_IN_FLIGHT",
                                               "OUTBOX_FLEET_TRY_MS", NULL};
    static const char *const by_consumer[] = {
        "OUTBOX_FLEET_FILE", "OUTBOX_FLEET_DATABASE_IN_FLIGHT", "OUTBOX_FLEET_TRY_MS", NULL};
    struct obx_config_use use = {.command = "outboxd demo", .parts = OBX_FOR_ALL, .handlers = 1};

    if (strcmp(command, "relay") == 0) {
        use = (struct obx_config_use){.command = "outboxd relay",
                                      .parts = OBX_FOR_RELAY | OBX_FOR_PROGRAM,
                                      .unread = cfg->fleet_file != NULL ? by_relay : by_one_relay};
    } else if (strcmp(command, "consume") == 0) {
        use = (struct obx_config_use){.command = "outboxd consume",
                                      .parts = OBX_FOR_CONSUMER | OBX_FOR_PROGRAM,
                                      .unread = by_consumer,
                                      .handlers = 1};
    }
    obx_config_warn(&use, argc, given, environ, warn_line, NULL);
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
    char **given;

    obx_exit_guard_install(); /* before any library registers an exit handler */
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
    /* The command line as typed: loading the settings takes their flags out of argv. */
    given = calloc((size_t)argc + 1, sizeof(*given));
    if (given == NULL) {
        fputs("outboxd: out of memory\n", stderr);
        return 1;
    }
    memcpy(given, argv, (size_t)argc * sizeof(*given));
    if (obx_config_load(&cfg, argc - 1, argv + 1, &rest, &err) != OUTBOX_OK) {
        fprintf(stderr, "outboxd: %s\n", err.message);
        obx_config_fini(&cfg);
        free(given);
        return 2;
    }
    if (rest < 1) {
        usage(stderr);
        code = 2;
    } else {
        obx_logsink_install((outbox_log_level)cfg.log_level);
        warn_unread(&cfg, argv[1], argc - 1, given + 1);
        code = run_command(&cfg, rest, argv);
    }
    obx_config_fini(&cfg);
    free(given);
    return code;
}
