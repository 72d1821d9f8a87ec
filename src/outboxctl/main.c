/* SPDX-License-Identifier: MIT */
/*
 * main.c - outboxctl: the operator's tool. Loads the same settings as
 * outboxd (environment, then flags) and runs one verb.
 */
#include <stdio.h>
#include <string.h>

#include "config/config_warn.h"
#include "ctl.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static const struct {
    const char *name;
    int (*run)(const struct obx_config *cfg, int argc, char **argv);
    const char *help;
} verbs[] = {
    {"migrate", obx_ctl_migrate,
     "apply the schema migrations (safe to run concurrently; a new schema starts ordered)"},
    {"status", obx_ctl_status,
     "row counts, dead letters per handler, claims, the stream and its consumers [--json]"},
    {"trace", obx_ctl_trace,
     "EVENT_ID: its outbox row, stream message, ledger rows and dead letters [--json]"},
    {"dead", obx_ctl_dead,
     "list|requeue|purge|skip [filters|--all] [--dry-run] [--json]: dead letters of handlers and "
     "the "
     "relay"},
    {"replay", obx_ctl_replay,
     "[filters] [--dry-run] [--json]: publish retained (done) rows again under their own id"},
    {"audit", obx_ctl_audit,
     "[--since TIME] [--repair] [--json]: retained rows missing from the stream (exit 1)"},
    {"validate", obx_ctl_validate,
     "[filters] [--json]: pending rows the relay would quarantine today (exit 1)"},
    {"quarantine", obx_ctl_quarantine,
     "list|release|purge|skip [filters|--all] [--dry-run] [--json]: rows the relay quarantined; "
     "skip: an ordered aggregate goes past them"},
    {"export", obx_ctl_export,
     "--data-subject S: the subject's events, retained rows and dead letters as JSON lines"},
    {"erase", obx_ctl_erase,
     "--data-subject S [--dry-run] [--scan-stream] [--json]: remove them; report the stream's"},
    {"subjects", obx_ctl_subjects,
     "[--json]: orphan publishes and dead subscriptions against running handlers (exit 1)"},
    {"doctor", obx_ctl_doctor,
     "[--json]: each finding ok|warn|error with what it saw and the fix (exit 1 on an error)"},
    {"ordering", obx_ctl_ordering,
     "on|off|status [--json]: per-aggregate order: number each aggregate's events in commit "
     "order"},
    {"roles", obx_ctl_roles,
     "[--print]: create least-privilege roles outbox_writer|relay|consumer|admin (or print SQL)"},
};

extern char **environ;

static void
warn_line(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "outboxctl: warning: %s\n", line);
}

static void
usage(FILE *out)
{
    fputs("usage: outboxctl <verb> [args] [--setting value ...]\n\nverbs:\n", out);
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        fprintf(out, "  %-10s %s\n", verbs[i].name, verbs[i].help);
    }
    fputs("\nfilters (dead, quarantine, replay, validate; each verb refuses the ones it does not "
          "take):\n"
          "  --handler NAME | --relay   a handler's dead letters, or the relay's own\n"
          "  --event-type T  --aggregate-type A  --aggregate-id UUID\n"
          "  --since TIME  --until TIME   ISO 8601 (2026-11-29, 2026-11-29T09:41:56Z), database "
          "time\n"
          "  --reason-like PATTERN        a LIKE pattern on the dead letter's or row's reason\n"
          "  --id EVENT_ID                repeatable\n"
          "  --limit N\n"
          "  --all                        what dead requeue|purge|skip and quarantine "
          "release|purge|skip\n"
          "                               need instead of a filter to act on every row\n"
          "\n"
          "--json prints one JSON object per line; --dry-run prints what would change and changes\n"
          "nothing. Exit codes: 0 all is well, 1 found or did something to act on (or a server\n"
          "failed), 2 usage or configuration error.\n"
          "Settings come from OUTBOX_* variables or --flags (see outboxd --help).\n",
          out);
}

int
main(int argc, char **argv)
{
    struct obx_config cfg;
    outbox_error err = {0};
    int rest = 0, code = 2;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (obx_config_load(&cfg, argc - 1, argv + 1, &rest, &err) != OUTBOX_OK) {
        fprintf(stderr, "outboxctl: %s\n", err.message);
        obx_config_fini(&cfg);
        return 2;
    }
    /* Every setting is someone's to read here; only names no setting has are warned about. */
    obx_config_warn(
        &(struct obx_config_use){.command = "outboxctl", .parts = OBX_FOR_ALL, .handlers = 1}, 0,
        NULL, environ, warn_line, NULL);
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
        if (rest >= 1 && strcmp(argv[1], verbs[i].name) == 0) {
            code = verbs[i].run(&cfg, rest - 1, argv + 2);
            break;
        }
        if (i + 1 == sizeof(verbs) / sizeof(verbs[0])) {
            fprintf(stderr, "outboxctl: unknown verb \"%s\"\n", argv[1]);
            usage(stderr);
        }
    }
    obx_config_fini(&cfg);
    return code;
}
