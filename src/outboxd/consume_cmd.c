/* SPDX-License-Identifier: MIT */
/*
 * consume_cmd.c - `outboxd consume`: one consumer replica hosting the
 * handlers declared with --handler (repeatable) and in OUTBOX_HANDLER_<n>
 * variables, on JetStream or, with OUTBOX_BUS=db, on the outbox table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "handler_spec.h"
#include "handlers.h"
#include "metrics.h"

#include "banned.h" /* last: poisons unsafe functions */

extern char **environ;

enum { MAX_SPECS = 32 };

struct consume {
    struct obx_handler_spec specs[MAX_SPECS];
    struct obx_exec_handler execs[MAX_SPECS];
    int count;
    outbox_consumer *consumer;
};

static void
consumer_options_from_config(const struct obx_config *cfg, outbox_consumer_options *o)
{
    outbox_consumer_options_init(o);
    o->database_url = cfg->database_url;
    o->schema = cfg->schema;
    o->bus = strcmp(cfg->bus, "db") == 0          ? OUTBOX_BUS_DB
             : strcmp(cfg->bus, "nats-core") == 0 ? OUTBOX_BUS_NATS_CORE
                                                  : OUTBOX_BUS_JETSTREAM;
    o->nats_url = cfg->nats_url;
    o->stream = cfg->stream;
    o->subject_prefix = cfg->subject_prefix;
    o->consumer_name = cfg->consumer_name;
    o->name = cfg->name;
    o->nats_creds_file = cfg->nats_creds;
    o->nats_tls_ca_file = cfg->nats_tls_ca;
    o->nats_tls_cert_file = cfg->nats_tls_cert;
    o->nats_tls_key_file = cfg->nats_tls_key;
    o->batch_size = (int)cfg->batch_size;
    o->ack_wait_seconds = (int)cfg->ack_wait_seconds;
    o->max_deliver = cfg->max_deliver;
    o->lease_seconds = (int)cfg->lease_seconds;
    o->ledger_lease_seconds = (int)cfg->ledger_lease_seconds;
    o->max_attempts = (int)cfg->max_attempts;
    o->backoff_base_ms = (int)cfg->backoff_base_ms;
    o->backoff_cap_ms = (int)cfg->backoff_cap_ms;
    o->poll_max_ms = (int)cfg->poll_max_ms;
    o->mode = strcmp(cfg->relay_mode, "prune") == 0 ? OUTBOX_RELAY_PRUNE : OUTBOX_RELAY_MARK;
    o->ledger_retention_seconds = (long long)cfg->ledger_retention_days * 86400;
    o->retention_seconds = (int)(cfg->retention_hours * 3600);
    o->stream_max_age_seconds = cfg->stream_max_age_seconds;
    o->crash_after_ledger_commit = (int)cfg->test_crash_after_ledger_commit;
}

static int
add_spec(struct consume *w, const char *text, long timeout_seconds)
{
    outbox_error err;

    if (w->count >= MAX_SPECS) {
        fprintf(stderr, "outboxd consume: at most %d handlers\n", MAX_SPECS);
        return -1;
    }
    if (obx_handler_spec_parse(text, &w->specs[w->count], &err) != OUTBOX_OK) {
        fprintf(stderr, "outboxd consume: %s\n", err.message);
        return -1;
    }
    w->execs[w->count] = (struct obx_exec_handler){.command = w->specs[w->count].body,
                                                   .timeout_ms = (int)timeout_seconds * 1000};
    w->count++;
    return 0;
}

struct numbered_spec {
    long number;
    const char *text;
};

static int
by_number(const void *a, const void *b)
{
    const struct numbered_spec *x = a, *y = b;

    return (x->number > y->number) - (x->number < y->number);
}

/*
 * OUTBOX_HANDLER_<n> variables, in the order of n (the environment's own
 * order is arbitrary). Any other OUTBOX_HANDLER_ name but the timeout
 * setting is a mistake, refused by name rather than read as a handler.
 */
static int
collect_env_specs(struct consume *w, long timeout_seconds)
{
    const size_t prefix_len = strlen(OBX_HANDLER_ENV_PREFIX);
    struct numbered_spec found[MAX_SPECS];
    size_t n = 0;

    for (char **e = environ; *e != NULL; e++) {
        const char *eq = strchr(*e, '='), *digits = *e + prefix_len;
        char *end;
        long number;

        if (eq == NULL || strncmp(*e, OBX_HANDLER_ENV_PREFIX, prefix_len) != 0 ||
            strncmp(*e, "OUTBOX_HANDLER_TIMEOUT_SECONDS=", 31) == 0) {
            continue;
        }
        number = strtol(digits, &end, 10);
        if (end != eq || digits[0] < '1' || digits[0] > '9' || number <= 0) {
            fprintf(stderr,
                    "outboxd consume: unknown variable %.*s (handlers are OUTBOX_HANDLER_1, "
                    "OUTBOX_HANDLER_2, ...)\n",
                    (int)(eq - *e), *e);
            return -1;
        }
        if (n == MAX_SPECS) {
            fprintf(stderr, "outboxd consume: at most %d handlers\n", MAX_SPECS);
            return -1;
        }
        found[n++] = (struct numbered_spec){number, eq + 1};
    }
    qsort(found, n, sizeof(found[0]), by_number);
    for (size_t i = 0; i < n; i++) {
        if (add_spec(w, found[i].text, timeout_seconds) != 0) {
            return -1;
        }
    }
    return 0;
}

/* --handler SPEC (or --handler=SPEC) arguments, then OUTBOX_HANDLER_<n> variables. */
static int
collect_specs(struct consume *w, int argc, char **argv, long timeout_seconds)
{
    for (int i = 0; i < argc; i++) {
        const char *spec = NULL;

        if (strcmp(argv[i], "--handler") == 0 && i + 1 < argc) {
            spec = argv[++i];
        } else if (strncmp(argv[i], "--handler=", 10) == 0) {
            spec = argv[i] + 10;
        } else {
            fprintf(stderr, "outboxd consume: unknown argument \"%s\"\n", argv[i]);
            return -1;
        }
        if (add_spec(w, spec, timeout_seconds) != 0) {
            return -1;
        }
    }
    if (collect_env_specs(w, timeout_seconds) != 0) {
        return -1;
    }
    if (w->count == 0) {
        fprintf(stderr, "outboxd consume: no handlers; declare them with --handler "
                        "'NAME[@SUBJECT_FILTER]=sql:STATEMENT' or =exec:COMMAND, or in "
                        "OUTBOX_HANDLER_1, OUTBOX_HANDLER_2, ...\n");
        return -1;
    }
    return 0;
}

static int
register_handlers(struct consume *w)
{
    for (int i = 0; i < w->count; i++) {
        struct obx_handler_spec *s = &w->specs[i];
        outbox_error err;
        outbox_status st =
            s->kind == OBX_SPEC_SQL
                ? outbox_consumer_add_sql_handler(w->consumer, s->name, s->filter, s->body, &err)
                : outbox_consumer_add_ext_handler(w->consumer, s->name, s->filter, obx_exec_handler,
                                                  &w->execs[i], &err);

        if (st != OUTBOX_OK) {
            fprintf(stderr, "outboxd consume: %s\n", err.message);
            return -1;
        }
    }
    return 0;
}

static int
run_consumer(void *ctx)
{
    outbox_error err;

    return outbox_consumer_run(ctx, &err) == OUTBOX_OK ? 0 : 1;
}

static void
stop_consumer(void *ctx)
{
    outbox_consumer_stop(ctx);
}

static int
consumer_ready(void *ctx)
{
    outbox_consumer_stats st;

    outbox_consumer_stats_get(ctx, &st);
    return st.database_up && st.broker_up;
}

static void
consumer_metrics(void *ctx, struct obx_buf *out)
{
    outbox_consumer_stats st;

    outbox_consumer_stats_get(ctx, &st);
    const struct obx_metric m[] = {
        {"fetched", "messages received", st.fetched},
        {"handled", "handler runs that finished", st.handled},
        {"skipped", "deliveries of events already handled", st.skipped},
        {"deferred", "deliveries deferred: claim held elsewhere or backing off", st.deferred},
        {"failed", "handler failures (attempts spent)", st.failed},
        {"retried", "retry-later answers (no attempt spent)", st.retried},
        {"dead", "events dead-lettered for a handler", st.dead},
        {"ledger_errors", "deliveries redelivered because the ledger was away", st.ledger_errors},
    };

    obx_metrics_counters(out, "consumer", m, sizeof(m) / sizeof(m[0]));
    obx_metrics_up(out, st.database_up, st.broker_up);
}

int
obx_cmd_consume(const struct obx_config *cfg, int argc, char **argv)
{
    /* Static: after an abandoned drain the consumer thread still uses it until exit. */
    static struct consume w;
    outbox_consumer_options opts;
    outbox_error err;
    int code = 2;

    consumer_options_from_config(cfg, &opts);
    if (collect_specs(&w, argc, argv, cfg->handler_timeout_seconds) == 0) {
        if (outbox_consumer_new(&opts, &w.consumer, &err) != OUTBOX_OK) {
            fprintf(stderr, "outboxd consume: %s\n", err.message);
        } else if (register_handlers(&w) == 0) {
            code = obx_serve(&(struct obx_daemon_job){.ctx = w.consumer,
                                                      .run = run_consumer,
                                                      .stop = stop_consumer,
                                                      .name = "consumer"},
                             &(struct obx_http_handlers){.ctx = w.consumer,
                                                         .metrics = consumer_metrics,
                                                         .ready = consumer_ready},
                             cfg);
        }
    }
    if (code != 1) { /* after an abandoned drain the consumer thread may still run */
        outbox_consumer_free(w.consumer);
        for (int i = 0; i < w.count; i++) {
            obx_handler_spec_fini(&w.specs[i]);
        }
    }
    return code;
}
