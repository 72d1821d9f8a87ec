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
#include "handlers/exec_handler.h"
#include "handlers/http_handler.h"
#include "outboxd/service/daemon.h"
#include "outboxd/service/metrics.h"
#include "test_hooks.h"

#include "common/banned.h" /* last: poisons unsafe functions */

extern char **environ;

enum {
    MAX_SPECS = 32,
    MIN_RENEWED_LEASE_SECONDS = 2, /* see lease_covers_timeout */
};

struct consume {
    struct obx_handler_spec specs[MAX_SPECS];
    struct obx_exec_handler execs[MAX_SPECS];
    struct obx_http_handler *https[MAX_SPECS];
    int count;
    outbox_consumer *consumer;
    struct obx_worker_view view; /* what /metrics and /readyz read */
};

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
    if (w->specs[w->count].timeout_seconds > 0) {
        timeout_seconds = w->specs[w->count].timeout_seconds; /* its own timeout option */
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
        fprintf(stderr,
                "outboxd consume: no handlers; declare them with --handler "
                "'NAME[@SUBJECT_FILTER]=sql:STATEMENT' or =exec:COMMAND or =http:URL, or in "
                "OUTBOX_HANDLER_1, OUTBOX_HANDLER_2, ...\n");
        return -1;
    }
    return 0;
}

/*
 * An exec: handler runs on a committed claim. A lease at least the handler
 * timeout outlasts any run; a shorter one is renewed every third of itself
 * while the handler runs, and the handler is killed when two thirds pass
 * without a confirmed renewal. At 1 s that leaves a renewal a third of a
 * second: a busy database would stop handlers for nothing. So a lease below
 * the timeout must be at least MIN_RENEWED_LEASE_SECONDS.
 */
static int
lease_covers_timeout(const struct consume *w, const struct obx_config *cfg)
{
    long long longest = 0;

    for (int i = 0; i < w->count; i++) {
        long long t = w->specs[i].timeout_seconds > 0 ? w->specs[i].timeout_seconds
                                                      : cfg->handler_timeout_seconds;

        longest = w->specs[i].kind != OBX_SPEC_SQL && t > longest ? t : longest;
    }
    if (longest == 0 || cfg->ledger_lease_seconds >= longest ||
        cfg->ledger_lease_seconds >= MIN_RENEWED_LEASE_SECONDS) {
        return 1;
    }
    fprintf(stderr,
            "outboxd consume: OUTBOX_LEDGER_LEASE_SECONDS=%lld cannot cover "
            "OUTBOX_HANDLER_TIMEOUT_SECONDS=%lld: a lease shorter than the exec: handlers' timeout "
            "is renewed while they run and must be at least %d s\n",
            cfg->ledger_lease_seconds, cfg->handler_timeout_seconds, MIN_RENEWED_LEASE_SECONDS);
    return 0;
}

/* An http: handler's requests, from its spec and the consumer's settings. */
static outbox_status
add_http(struct consume *w, int i, const struct obx_config *cfg, outbox_error *err)
{
    const struct obx_handler_spec *s = &w->specs[i];
    long long timeout = s->timeout_seconds > 0 ? s->timeout_seconds : cfg->handler_timeout_seconds;
    struct obx_http_handler_config hc = {.name = s->name,
                                         .url = s->body,
                                         .timeout_ms = (int)(timeout * 1000),
                                         .token_file = s->token_file,
                                         .ca_file = s->ca_file,
                                         .headers = (const char *const *)s->headers,
                                         .header_count = s->header_count,
                                         .structured = s->structured,
                                         .ce_source = cfg->ce_source,
                                         .backoff_base_ms = (int)cfg->backoff_base_ms,
                                         .backoff_cap_ms = (int)cfg->backoff_cap_ms,
                                         .in_flight = s->in_flight};
    outbox_status st = obx_http_handler_new(&hc, &w->https[i], err);

    if (st == OUTBOX_OK) {
        st = obx_consumer_add_external(w->consumer, s->name, s->filter, &obx_http_kind, w->https[i],
                                       (size_t)s->in_flight, err);
    }
    return st;
}

/* 0, 2 for a handler refused (its settings), or 1 for a runtime failure. */
static int
register_handlers(struct consume *w, const struct obx_config *cfg)
{
    for (int i = 0; i < w->count; i++) {
        struct obx_handler_spec *s = &w->specs[i];
        outbox_error err;
        outbox_status st;

        switch (s->kind) {
        case OBX_SPEC_SQL:
            st = outbox_consumer_add_sql_handler(w->consumer, s->name, s->filter, s->body, &err);
            break;
        case OBX_SPEC_EXEC:
            st = obx_consumer_add_external(w->consumer, s->name, s->filter, &obx_exec_kind,
                                           &w->execs[i], (size_t)s->in_flight, &err);
            break;
        case OBX_SPEC_HTTP:
        default:
            st = add_http(w, i, cfg, &err);
            break;
        }
        if (st != OUTBOX_OK) {
            fprintf(stderr, "outboxd consume: %s\n", err.message);
            return st == OUTBOX_EINVAL ? 2 : 1;
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

static int
consumer_busy(void *ctx)
{
    return outbox_consumer_handling(ctx);
}

static void
stop_consumer(void *ctx)
{
    outbox_consumer_stop(ctx);
}

static const struct obx_metric_def consumer_counters[] = {
    {OUTBOX_CONSUMER_FETCHED, "fetched", "messages received"},
    {OUTBOX_CONSUMER_HANDLED, "handled", "handler runs that finished"},
    {OUTBOX_CONSUMER_SKIPPED, "skipped", "deliveries of events already handled"},
    {OUTBOX_CONSUMER_DEFERRED, "deferred",
     "deliveries deferred: claim held elsewhere or backing off"},
    {OUTBOX_CONSUMER_FAILED, "failed", "handler failures (attempts spent)"},
    {OUTBOX_CONSUMER_RETRIED, "retried", "retry-later answers (no attempt spent)"},
    {OUTBOX_CONSUMER_DEAD, "dead", "events dead-lettered for a handler"},
    {OUTBOX_CONSUMER_LEDGER_ERRORS, "ledger_errors",
     "deliveries redelivered because the ledger was away"},
    {OUTBOX_CONSUMER_CLAIMS, "claims", "ledger claims made (an event for a handler)"},
    {OUTBOX_CONSUMER_CONFLICTS, "conflicts", "claims found held by another replica (deferred)"},
    {OUTBOX_CONSUMER_OUTAGE_RETRIES, "outage_retries",
     "handler runs given back because the database failed under them or an http: endpoint "
     "was unreachable (no attempt spent)"},
    {OUTBOX_CONSUMER_CLAIMS_LOST, "claims_lost",
     "external handler runs stopped because their claim was lost (no attempt spent)"},
    {OUTBOX_CONSUMER_REFUSED, "refused",
     "messages refused and terminated, no handler run: not what a relay sends (the log says "
     "why)"},
    {OUTBOX_CONSUMER_PARKED_TAKES, "parked_takes",
     "takes of parked events by the sweeps, made only for handlers that have parked events"},
};

static const struct obx_metric_def consumer_histograms[] = {
    {OUTBOX_CONSUMER_BATCH_SECONDS, "outbox_consumer_batch_duration_seconds",
     "one fetched batch: every handler run and every message settled"},
};

static unsigned long long
consumer_value(void *ctx, int id)
{
    return outbox_consumer_stat(ctx, (outbox_consumer_stat_id)id);
}

static size_t
consumer_histogram(void *ctx, int id, unsigned long long *counts, size_t cap, double *sum)
{
    return outbox_consumer_histogram(ctx, (outbox_consumer_histogram_id)id, counts, cap, sum);
}

/* Each declared handler's counters and gauges, labelled by its name; then the gauges of the
 * handlers the ledger knows that no daemon runs (an SQL API's). */
static void
consumer_extra_metrics(void *ctx, struct obx_buf *out)
{
    const struct consume *w = ctx;
    static const struct {
        outbox_handler_stat_id id;
        const char *name, *type, *help;
        int gauge; /* sampled from the ledger: also shown for handlers no daemon runs */
    } rows[] = {
        {OUTBOX_HANDLER_HANDLED, "outbox_consumer_handler_handled_total", "counter",
         "handler runs that finished, by handler", 0},
        {OUTBOX_HANDLER_FAILED, "outbox_consumer_handler_failed_total", "counter",
         "handler failures (attempts spent), by handler", 0},
        {OUTBOX_HANDLER_DEAD_LETTERS, "outbox_dead_letters", "gauge",
         "dead letters waiting for an operator, by handler", 1},
        {OUTBOX_HANDLER_PARKED, "outbox_consumer_parked_events", "gauge",
         "ordered events parked until their predecessor is done, by handler", 1},
        {OUTBOX_HANDLER_OLDEST_PARKED_SECONDS, "outbox_consumer_oldest_parked_seconds", "gauge",
         "how long the oldest parked event has waited, by handler", 1},
    };

    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        obx_buf_appendf(out, "# HELP %s %s.\n# TYPE %s %s\n", rows[r].name, rows[r].help,
                        rows[r].name, rows[r].type);
        for (int i = 0; i < w->count; i++) {
            obx_buf_appendf(
                out, "%s{handler=\"%s\"} %llu\n", rows[r].name, w->specs[i].name,
                outbox_consumer_handler_stat(w->consumer, w->specs[i].name, rows[r].id));
        }
        /* The gauges (not the counters) of the SQL API's handlers, which no daemon runs. */
        for (size_t i = 0; rows[r].gauge; i++) {
            char name[65];

            if (outbox_consumer_ledger_handler(w->consumer, i, name, sizeof(name)) == NULL) {
                break;
            }
            obx_buf_appendf(out, "%s{handler=\"%s\"} %llu\n", rows[r].name, name,
                            outbox_consumer_handler_stat(w->consumer, name, rows[r].id));
        }
    }
}

static outbox_status
consumer_new(const struct obx_config *cfg, outbox_consumer **out, outbox_error *err)
{
    outbox_config *cc = obx_cmd_worker_config(OUTBOX_CONFIG_CONSUMER, cfg, err);
    outbox_status st = cc != NULL ? outbox_consumer_new(cc, out, err) : OUTBOX_ENOMEM;

    outbox_config_free(cc);
    return st;
}

int
obx_cmd_consume(const struct obx_config *cfg, int argc, char **argv)
{
    /* Static: after an abandoned drain the consumer thread still uses it until exit. */
    static struct consume w;
    struct obx_http_handlers handlers;
    outbox_error err = {0};
    int code = 2;

    if (collect_specs(&w, argc, argv, cfg->handler_timeout_seconds) == 0 &&
        lease_covers_timeout(&w, cfg)) {
        if (consumer_new(cfg, &w.consumer, &err) != OUTBOX_OK) {
            fprintf(stderr, "outboxd consume: %s\n", err.message);
        } else if ((code = register_handlers(&w, cfg)) == 0) {
            obx_test_hooks_apply_consumer(w.consumer);
            w.view = (struct obx_worker_view){
                .prefix = "consumer",
                .counters = consumer_counters,
                .counter_count = sizeof(consumer_counters) / sizeof(consumer_counters[0]),
                .histograms = consumer_histograms,
                .histogram_count = sizeof(consumer_histograms) / sizeof(consumer_histograms[0]),
                .database_up = OUTBOX_CONSUMER_DATABASE_UP,
                .broker_up = OUTBOX_CONSUMER_BROKER_UP,
                .read = consumer_value,
                .read_histogram = consumer_histogram,
                .extra = consumer_extra_metrics,
                .extra_ctx = &w,
                .ctx = w.consumer};
            handlers = obx_worker_view_handlers(&w.view);
            code = obx_serve(&(struct obx_daemon_job){.ctx = w.consumer,
                                                      .run = run_consumer,
                                                      .stop = stop_consumer,
                                                      .busy = consumer_busy,
                                                      .name = "consumer",
                                                      .command = "consume"},
                             &handlers, cfg);
        }
    }
    if (!obx_daemon_abandoned()) { /* an abandoned worker thread may still run */
        outbox_consumer_free(w.consumer);
        for (int i = 0; i < w.count; i++) {
            obx_exec_handler_fini(&w.execs[i]);
            obx_http_handler_free(w.https[i]);
            obx_handler_spec_fini(&w.specs[i]);
        }
    }
    return code;
}
