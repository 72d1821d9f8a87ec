/* SPDX-License-Identifier: MIT */
/*
 * demo_run.c - the demo's run: relays, writers, the live line, a relay
 * killed with SIGKILL while it holds leases and restarted later, then an
 * audit that reads the stream back and compares it with what committed.
 */
#include "demo_run.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "demo_relays.h"
#include "sql.h"
#include "sql_gen.h"
#include "stream_audit.h"

#include "banned.h" /* last: poisons unsafe functions */

struct run {
    const struct obx_config *cfg;
    const struct obx_demo_options *o;
    struct obx_demo_relay relays[OBX_DEMO_MAX_RELAYS];
    char log_dir[64];
    PGconn *conn;
    char *counts_sql;
    char *audit_sql;
    int tty;
    double start;
    long long committed, done, waiting, stuck, in_stream;
};

struct audit {
    long long committed, published, quarantined, lost, stream_msgs, duplicates, phantom;
};

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
progress(struct run *r, int final)
{
    int up = 0;

    for (int i = 0; i < r->o->relays; i++) {
        up += r->relays[i].pid > 0;
    }
    printf("%s%5.1fs  written %7lld  published %7lld  in stream %7lld  waiting %6lld  "
           "relays up %d/%d%s",
           r->tty ? "\r" : "", now_s() - r->start, r->committed, r->done, r->in_stream, r->waiting,
           up, r->o->relays, r->tty && !final ? "" : "\n");
    fflush(stdout);
}

/* A note on its own line, above the progress line. */
static void
note(struct run *r, const char *text)
{
    printf("%s%s\n", r->tty ? "\r\033[K" : "", text);
}

/* SIGKILL one replica a third of the way in, restart it past the middle. */
static void
chaos(struct run *r, double elapsed, int *step)
{
    struct obx_demo_relay *victim = &r->relays[r->o->relays > 1 ? 1 : 0];
    char text[160];

    if (*step == 0 && elapsed >= r->o->seconds * 0.35) {
        obx_demo_relay_kill(victim, SIGKILL);
        snprintf(text, sizeof(text),
                 "  ! %s killed with SIGKILL while holding leases: the others take its rows "
                 "when the leases run out",
                 victim->name);
        note(r, text);
        *step = 1;
    } else if (*step == 1 && elapsed >= r->o->seconds * 0.6) {
        if (obx_demo_relay_start(victim, r->cfg, r->o->self, r->log_dir, r->o->relays > 1) == 0) {
            snprintf(text, sizeof(text), "  + %s restarted", victim->name);
            note(r, text);
        }
        *step = 2;
    }
}

static void
sample(struct run *r, struct obx_demo_writers *w, int with_stream)
{
    char subjects[64];

    r->committed = obx_demo_writers_committed(w);
    obx_demo_counts(r->conn, r->counts_sql, &r->done, &r->waiting, &r->stuck);
    if (with_stream) {
        snprintf(subjects, sizeof(subjects), "%s", r->cfg->stream);
        r->in_stream = obx_stream_message_count(r->cfg->nats_url, subjects);
    }
}

/* Writers until done, then until the relays have drained (at most a minute). */
static void
watch(struct run *r, struct obx_demo_writers *w)
{
    int step = 0, tick = 0;
    double drain_deadline = 0;

    for (;; tick++) {
        double elapsed = now_s() - r->start;

        sample(r, w, tick % 4 == 0);
        if (r->tty || tick % 8 == 0) { /* a log file gets a line every 2 s, not 4 per second */
            progress(r, 0);
        }
        chaos(r, elapsed, &step);
        if (obx_demo_writers_done(w)) {
            drain_deadline = drain_deadline > 0 ? drain_deadline : now_s() + 60;
            if ((r->waiting == 0 && r->committed == r->done + r->stuck) ||
                now_s() > drain_deadline) {
                break;
            }
        }
        usleep(250 * 1000);
    }
    sample(r, w, 1);
    progress(r, 1);
}

/* Compares what committed (demo_reviews) with what the stream holds. */
static int
audit_stream(struct run *r, struct audit *a)
{
    struct obx_id_set *ids = obx_id_set_new();
    char subjects[64], err[256];
    PGresult *res;
    long long matched = 0;

    memset(a, 0, sizeof(*a));
    snprintf(subjects, sizeof(subjects), "%s.>", r->cfg->subject_prefix);
    if (ids == NULL ||
        obx_stream_audit(r->cfg->nats_url, r->cfg->stream, subjects, ids, err, sizeof(err)) != 0) {
        fprintf(stderr, "outboxd demo: cannot read the stream back: %s\n", ids ? err : "no memory");
        obx_id_set_free(ids);
        return -1;
    }
    res = PQexec(r->conn, r->audit_sql);
    for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++) {
        const char *status = PQgetisnull(res, i, 1) ? "" : PQgetvalue(res, i, 1);

        a->committed++;
        if (obx_id_set_count(ids, PQgetvalue(res, i, 0)) > 0) {
            matched++;
            a->published += strcmp(status, "done") == 0;
        } else if (strcmp(status, "dead") == 0 || strcmp(status, "invalid") == 0) {
            a->quarantined++;
        } else {
            a->lost++;
        }
    }
    PQclear(res);
    a->stream_msgs = (long long)obx_id_set_total(ids);
    a->duplicates = a->stream_msgs - (long long)obx_id_set_distinct(ids);
    a->phantom = (long long)obx_id_set_distinct(ids) - matched;
    obx_id_set_free(ids);
    return 0;
}

static void
summary(const struct run *r, const struct audit *a)
{
    printf("\nsummary (read back from stream %s, compared with the committed business rows)\n",
           r->cfg->stream);
    printf("  events written (committed with their reviews)  %8lld\n", a->committed);
    printf("  published (acked by JetStream, rows done)      %8lld\n", a->published);
    printf("  messages in the stream                         %8lld\n", a->stream_msgs);
    printf("  duplicates in the stream                       %8lld\n", a->duplicates);
    printf("  quarantined (dead or invalid)                  %8lld\n", a->quarantined);
    printf("  lost                                           %8lld\n", a->lost);
    printf("  published without a commit                     %8lld\n", a->phantom);
    printf("relay logs: %s/\n", r->log_dir);
}

static int
prepare_run(struct run *r)
{
    char quoted[OBX_SCHEMA_QUOTED_CAP];

    r->tty = isatty(STDOUT_FILENO);
    snprintf(r->log_dir, sizeof(r->log_dir), "%s", "/tmp/outbox-demo-XXXXXX");
    if (mkdtemp(r->log_dir) == NULL || obx_sql_quote_schema(r->cfg->schema, quoted, NULL) != 0) {
        fprintf(stderr, "outboxd demo: cannot prepare a log directory\n");
        return -1;
    }
    r->counts_sql = obx_sql_render(obx_sql_demo_counts, quoted);
    r->audit_sql = obx_sql_render(obx_sql_demo_audit, quoted);
    r->conn = PQconnectdb(r->cfg->database_url);
    if (r->counts_sql == NULL || r->audit_sql == NULL || PQstatus(r->conn) != CONNECTION_OK) {
        fprintf(stderr, "outboxd demo: cannot connect to the database\n");
        return -1;
    }
    for (int i = 0; i < r->o->relays; i++) {
        if (obx_demo_relay_start(&r->relays[i], r->cfg, r->o->self, r->log_dir, i) != 0) {
            return -1;
        }
    }
    return 0;
}

static void
finish_run(struct run *r)
{
    for (int i = 0; i < r->o->relays; i++) {
        obx_demo_relay_stop(&r->relays[i], (int)r->cfg->drain_timeout_seconds * 1000 + 2000);
    }
    PQfinish(r->conn);
    free(r->counts_sql);
    free(r->audit_sql);
}

int
obx_demo_run(const struct obx_config *cfg, const struct obx_demo_options *o)
{
    struct run r = {.cfg = cfg, .o = o};
    struct obx_demo_writers *w;
    struct audit a;
    int code = 1;

    printf("pgoutbox demo: %d writers at %d events/s for %.0f s -> %d relay replicas -> "
           "JetStream stream %s (%s.>)\n",
           o->writers, o->rate, o->seconds, o->relays, cfg->stream, cfg->subject_prefix);
    if (prepare_run(&r) == 0 &&
        (w = obx_demo_writers_start(cfg->database_url, o->writers, o->rate, o->seconds)) != NULL) {
        r.start = now_s();
        watch(&r, w);
        if (obx_demo_writers_join(w) > 0) {
            note(&r, "  (some writer transactions failed and rolled back: no event for them)");
        }
        if (audit_stream(&r, &a) == 0) {
            summary(&r, &a);
            code = a.lost == 0 && a.phantom == 0 ? 0 : 1;
        }
    }
    finish_run(&r);
    return code;
}
