/* SPDX-License-Identifier: MIT */
/*
 * demo_run.c - the demo's run: relays and consumers as real processes,
 * writers, the live line, one relay and one consumer killed with SIGKILL
 * mid-flight and restarted, then an audit that reads the stream back and
 * compares it, and the consumers' projection, with what committed.
 */
#include "demo_run.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "audit/stream_audit.h"
#include "config/config.h"
#include "demo_procs.h"

#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { CONSUMERS = 2, MAX_PROCS = OBX_DEMO_MAX_RELAYS + CONSUMERS };

struct run {
    const struct obx_config *cfg;
    const struct obx_demo_options *o;
    struct obx_demo_proc procs[MAX_PROCS]; /* relays first, then consumers */
    int proc_count;
    char log_dir[64];
    struct obx_demo_db *db;
    int tty;
    double start;
    long long committed, in_stream;
    struct obx_demo_counts n;
};

struct audit {
    long long committed, published, quarantined, lost, stream_msgs, duplicates, phantom;
    long long matched;      /* committed events the stream holds */
    struct obx_id_set *ids; /* what the stream holds */
};

static double
now_s(void)
{
    return (double)obx_monotonic_ms() / 1000.0;
}

static int
up(const struct run *r, const char *command)
{
    int n = 0;

    for (int i = 0; i < r->proc_count; i++) {
        n += r->procs[i].pid > 0 && strcmp(r->procs[i].command, command) == 0;
    }
    return n;
}

static void
progress(struct run *r, int final)
{
    char in_stream[24] = "      -"; /* the stream is not there yet, or did not answer */

    if (r->in_stream >= 0) {
        snprintf(in_stream, sizeof(in_stream), "%7lld", r->in_stream);
    }
    printf("%s%5.1fs  written %7lld  published %7lld  in stream %s  handled %7lld  "
           "waiting %6lld  relays %d/%d  consumers %d/%d%s",
           r->tty ? "\r" : "", now_s() - r->start, r->committed, r->n.done, in_stream, r->n.handled,
           r->n.waiting, up(r, "relay"), r->o->relays, up(r, "consume"), CONSUMERS,
           r->tty && !final ? "" : "\n");
    fflush(stdout);
}

/* A note on its own line, above the progress line. */
static void
note(struct run *r, const char *text)
{
    printf("%s%s\n", r->tty ? "\r\033[K" : "", text);
}

/* Kill `p` at `kill_at` of the run, restart it at `back_at`; `*step` tracks where it is. */
static void
kill_and_restart(struct run *r, struct obx_demo_proc *p, double at, int *step, const char *why)
{
    char text[200];

    if (*step == 0 && at >= 0) {
        obx_demo_proc_kill(p, SIGKILL);
        snprintf(text, sizeof(text), "  ! %s killed with SIGKILL: %s", p->name, why);
        note(r, text);
        *step = 1;
    } else if (*step == 1 && at < 0) {
        if (obx_demo_proc_start(p, r->cfg, r->o->self, r->log_dir) == 0) {
            snprintf(text, sizeof(text), "  + %s restarted", p->name);
            note(r, text);
        }
        *step = 2;
    }
}

static void
chaos(struct run *r, double elapsed, int steps[2])
{
    double t = elapsed / r->o->seconds;
    struct obx_demo_proc *relay = &r->procs[r->o->relays > 1 ? 1 : 0];
    struct obx_demo_proc *consumer = &r->procs[r->o->relays + 1];

    if ((steps[0] == 0 && t >= 0.3) || (steps[0] == 1 && t >= 0.55)) {
        kill_and_restart(r, relay, steps[0] == 0 ? 0 : -1, &steps[0],
                         "the others take its rows when its leases run out");
    }
    if ((steps[1] == 0 && t >= 0.45) || (steps[1] == 1 && t >= 0.7)) {
        kill_and_restart(r, consumer, steps[1] == 0 ? 0 : -1, &steps[1],
                         "its unfinished transaction rolls back, claim and effects together");
    }
}

static void
sample(struct run *r, struct obx_demo_writers *w, int with_stream)
{
    r->committed = obx_demo_writers_committed(w);
    obx_demo_db_counts(r->db, &r->n);
    if (with_stream) {
        r->in_stream = obx_stream_message_count(r->cfg->nats_url, r->cfg->stream);
    }
}

/* Writers until done, then until relays and consumers have caught up (at most a minute). */
static void
watch(struct run *r, struct obx_demo_writers *w)
{
    int steps[2] = {0, 0}, tick = 0;
    double drain_deadline = 0;

    for (;; tick++) {
        sample(r, w, tick % 4 == 0);
        if (r->tty || tick % 8 == 0) { /* a log file gets a line every 2 s, not 4 per second */
            progress(r, 0);
        }
        chaos(r, now_s() - r->start, steps);
        if (obx_demo_writers_done(w)) {
            drain_deadline = drain_deadline > 0 ? drain_deadline : now_s() + 60;
            if ((r->n.waiting == 0 && r->committed == r->n.done + r->n.stuck &&
                 r->n.ledger_done >= r->n.done) ||
                now_s() > drain_deadline) {
                break;
            }
        }
        usleep(250 * 1000);
    }
    sample(r, w, 1);
    progress(r, 1);
}

/* One committed event against the stream. */
static void
audit_row(void *ctx, const char *event_id, const char *status)
{
    struct audit *a = ctx;

    a->committed++;
    if (obx_id_set_count(a->ids, event_id) > 0) {
        a->matched++;
        a->published += strcmp(status, "done") == 0;
    } else if (strcmp(status, "dead") == 0 || strcmp(status, "invalid") == 0) {
        a->quarantined++;
    } else {
        a->lost++;
    }
}

/* Compares what committed (demo_reviews) with what the stream holds. */
static int
audit_stream(struct run *r, struct audit *a)
{
    struct obx_id_set *ids = obx_id_set_new();
    char subjects[64], err[256];

    memset(a, 0, sizeof(*a));
    snprintf(subjects, sizeof(subjects), "%s.>", r->cfg->subject_prefix);
    if (ids == NULL ||
        obx_stream_audit(r->cfg->nats_url, r->cfg->stream, subjects, ids, err, sizeof(err)) != 0) {
        fprintf(stderr, "outboxd demo: cannot read the stream back: %s\n", ids ? err : "no memory");
        obx_id_set_free(ids);
        return -1;
    }
    a->ids = ids;
    if (obx_demo_db_audit(r->db, audit_row, a) != 0) {
        fprintf(stderr, "outboxd demo: cannot read the committed events back\n");
        obx_id_set_free(ids);
        return -1;
    }
    a->stream_msgs = (long long)obx_id_set_total(ids);
    a->duplicates = a->stream_msgs - (long long)obx_id_set_distinct(ids);
    a->phantom = (long long)obx_id_set_distinct(ids) - a->matched;
    a->ids = NULL;
    obx_id_set_free(ids);
    return 0;
}

static void
summary(const struct run *r, const struct audit *a)
{
    long long effect_dups = r->n.handled - r->n.ledger_done;

    printf("\nsummary (the stream read back, the projection and the ledger, against the "
           "committed business rows)\n");
    printf("  events written (committed with their reviews)  %8lld\n", a->committed);
    printf("  published (acked by JetStream, rows done)      %8lld\n", a->published);
    printf("  messages in the stream                         %8lld\n", a->stream_msgs);
    printf("  duplicates in the stream                       %8lld\n", a->duplicates);
    printf("  handled by the consumers                       %8lld\n", r->n.ledger_done);
    printf("  handler effects duplicated                     %8lld\n", effect_dups);
    if (r->n.ordered) {
        printf("  handled out of their movie's order             %8lld\n", r->n.out_of_order);
    } else {
        printf("  handled out of their movie's order    (ordering is off)\n");
    }
    printf("  quarantined (dead or invalid)                  %8lld\n", a->quarantined);
    printf("  lost                                           %8lld\n", a->lost);
    printf("  published without a commit                     %8lld\n", a->phantom);
    printf("logs: %s/\n", r->log_dir);
}

static int
start_procs(struct run *r)
{
    for (int i = 0; i < r->o->relays + CONSUMERS; i++) {
        struct obx_demo_proc *p = &r->procs[r->proc_count++];
        int relay = i < r->o->relays;

        snprintf(p->name, sizeof(p->name), "%s-%d", relay ? "relay" : "consumer",
                 relay ? i + 1 : i - r->o->relays + 1);
        p->command = relay ? "relay" : "consume";
        p->handler = relay ? NULL : OBX_DEMO_HANDLER;
        if (obx_demo_proc_start(p, r->cfg, r->o->self, r->log_dir) != 0) {
            return -1;
        }
    }
    return 0;
}

static int
prepare_run(struct run *r)
{
    r->tty = isatty(STDOUT_FILENO);
    snprintf(r->log_dir, sizeof(r->log_dir), "%s", "/tmp/outbox-demo-XXXXXX");
    if (mkdtemp(r->log_dir) == NULL) {
        fprintf(stderr, "outboxd demo: cannot prepare a log directory\n");
        return -1;
    }
    r->db = obx_demo_db_open(r->cfg->database_url, r->cfg->schema);
    if (r->db == NULL) {
        fprintf(stderr, "outboxd demo: cannot connect to the database\n");
        return -1;
    }
    return start_procs(r);
}

static void
finish_run(struct run *r)
{
    for (int i = 0; i < r->proc_count; i++) {
        obx_demo_proc_stop(&r->procs[i], (int)r->cfg->drain_timeout_seconds * 1000 + 2000);
    }
    obx_demo_db_close(r->db);
}

int
obx_demo_run(const struct obx_config *cfg, const struct obx_demo_options *o)
{
    struct run r = {.cfg = cfg, .o = o};
    struct obx_demo_writers *w;
    outbox_config *wc = outbox_config_new(OUTBOX_CONFIG_WRITER);
    struct audit a;
    int code = 1;

    printf("pgoutbox demo: %d writers at %d events/s for %.0f s -> %d relays -> JetStream "
           "stream %s (%s.>) -> %d consumers (a sql handler keeping a projection)\n",
           o->writers, o->rate, o->seconds, o->relays, cfg->stream, cfg->subject_prefix, CONSUMERS);
    if (wc != NULL && obx_config_copy(&wc->values, cfg, NULL) == OUTBOX_OK &&
        prepare_run(&r) == 0 &&
        (w = obx_demo_writers_start(cfg->database_url, wc, o->writers, o->rate, o->seconds)) !=
            NULL) {
        r.start = now_s();
        watch(&r, w);
        if (obx_demo_writers_join(w) > 0) {
            note(&r, "  (some writer transactions failed and rolled back: no event for them)");
        }
        if (audit_stream(&r, &a) == 0) {
            summary(&r, &a);
            code = a.lost == 0 && a.phantom == 0 && r.n.handled == r.n.ledger_done &&
                           r.n.out_of_order == 0 && r.n.ledger_done == a.committed - a.quarantined
                       ? 0
                       : 1;
        }
    }
    finish_run(&r);
    outbox_config_free(wc);
    return code;
}
