/* SPDX-License-Identifier: MIT */
/*
 * doctor_stream.c - outboxctl doctor's broker checks (see doctor.h).
 *
 * The relay's retry horizon is how long after a row's first publish it may
 * be published again: a lost finish leaves the row leased until its lease
 * runs out, which may happen OUTBOX_MAX_LEASE_EXPIRIES times, each time
 * with a publish timeout, and a publish whose ack never came is released
 * and tried again after at most the broker pause (OBX_PAUSE_MAX_MS). A
 * rejected publish was not stored, so its backoff does not count. Only
 * inside the duplicate window does the stream drop such a copy, so the
 * window must cover the horizon, and max_age must cover the window (the
 * stream rebuilds its dedup state from the messages it keeps). The horizon
 * comes from the settings doctor is given: run it with the relays' own.
 */
#include "doctor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbox/worker.h"
#include "outboxctl/stream/js_admin.h"
#include "support/pause.h"

#include "common/banned.h" /* last: poisons unsafe functions */

enum { STORAGE_WARN_PERCENT = 70, STORAGE_ERROR_PERCENT = 90 };

/* 3600 -> "1h", 120 -> "2m", 605 -> "605s": what `nats stream edit` takes. */
static const char *
duration(long long s, char *out, size_t cap)
{
    if (s > 0 && s % 3600 == 0) {
        snprintf(out, cap, "%lldh", s / 3600);
    } else if (s > 0 && s % 60 == 0) {
        snprintf(out, cap, "%lldm", s / 60);
    } else {
        snprintf(out, cap, "%llds", s);
    }
    return out;
}

static long long
retry_horizon_seconds(const struct obx_config *c)
{
    return (c->lease_seconds * 1000 + c->publish_timeout_ms) * c->max_lease_expiries / 1000 +
           OBX_PAUSE_MAX_MS / 1000;
}

static void
check_version(struct obx_doctor *d)
{
    char version[64] = "";
    outbox_error err = {0};
    int major = 0, minor = 0, patch = 0;

    if (obx_ctl_nats_server_version(d->cfg->nats_url, version, sizeof(version), &err) !=
        OUTBOX_OK) {
        obx_doctor_add(d, "nats_version", "warn", NULL, "%s", err.message);
        return;
    }
    sscanf(version, "%d.%d.%d", &major, &minor, &patch);
    if (major == 2 && minor < 10) {
        obx_doctor_add(d, "nats_version", "warn",
                       "upgrade to nats-server >= 2.12.6 with jetstream { sync_interval: always }; "
                       "until then run `outboxctl audit --repair` after every broker crash",
                       "nats-server %s has no sync_interval: acked writes reach the disk within "
                       "2 minutes, and a crash can lose them",
                       version);
    } else if (major == 2 &&
               !(minor > 12 || (minor == 12 && patch >= 6) || (minor == 11 && patch >= 15))) {
        obx_doctor_add(d, "nats_version", "warn", "upgrade to nats-server >= 2.12.6 (or 2.11.15)",
                       "nats-server %s lacks later stream-loss and dedup fixes", version);
    } else {
        obx_doctor_add(d, "nats_version", "ok", NULL, "nats-server %s", version);
    }
}

static void
check_windows(struct obx_doctor *d, const struct obx_ctl_stream *s)
{
    const struct obx_config *c = d->cfg;
    long long horizon = retry_horizon_seconds(c);
    char have[32], want[32], fix[160], hz[32];

    duration(s->duplicate_window_seconds, have, sizeof(have));
    duration(c->duplicate_window_seconds, want, sizeof(want));
    snprintf(fix, sizeof(fix),
             "nats stream edit %s --dupe-window %s (a relay started with "
             "OUTBOX_DUPLICATE_WINDOW_SECONDS=%lld does it too)",
             c->stream, want, c->duplicate_window_seconds);
    if (s->duplicate_window_seconds < horizon) {
        obx_doctor_add(d, "duplicate_window", "error", fix,
                       "duplicate_window %s is shorter than the relay's retry horizon %s "
                       "((lease %lld s + publish timeout %lld ms) x %lld lease expiries + broker "
                       "pause %d s): a row published again after a lost finish is stored twice",
                       have, duration(horizon, hz, sizeof(hz)), c->lease_seconds,
                       c->publish_timeout_ms, c->max_lease_expiries, OBX_PAUSE_MAX_MS / 1000);
    } else {
        obx_doctor_add(d, "duplicate_window",
                       s->duplicate_window_seconds < c->duplicate_window_seconds ? "warn" : "ok",
                       s->duplicate_window_seconds < c->duplicate_window_seconds ? fix : NULL,
                       "duplicate_window %s (configured %s; the relay's retry horizon is %s)", have,
                       want, duration(horizon, hz, sizeof(hz)));
    }
    if (s->max_age_seconds > 0 && s->max_age_seconds < s->duplicate_window_seconds) {
        snprintf(fix, sizeof(fix), "nats stream edit %s --max-age %s", c->stream,
                 duration(s->duplicate_window_seconds, want, sizeof(want)));
        obx_doctor_add(d, "max_age", "error", fix,
                       "max_age %s is shorter than the duplicate window %s: the stream forgets "
                       "ids it should still deduplicate",
                       duration(s->max_age_seconds, want, sizeof(want)), have);
    } else {
        obx_doctor_add(d, "max_age", "ok", NULL, "max_age %s",
                       s->max_age_seconds > 0 ? duration(s->max_age_seconds, want, sizeof(want))
                                              : "unlimited");
    }
}

/*
 * A daemon sets num_replicas only when it creates the stream, so a stream
 * made before OUTBOX_STREAM_REPLICAS was raised (or by hand) keeps its
 * count: said here, with the edit that changes it in place.
 */
static void
check_replicas(struct obx_doctor *d, const struct obx_ctl_stream *s)
{
    long long want = d->cfg->stream_replicas;
    char fix[128];

    if (s->replicas == want) {
        obx_doctor_add(d, "stream_replicas", "ok", NULL,
                       "%lld replica%s, as OUTBOX_STREAM_REPLICAS says", s->replicas,
                       s->replicas == 1 ? "" : "s");
        return;
    }
    snprintf(fix, sizeof(fix),
             "nats stream edit %s --replicas %lld (or set OUTBOX_STREAM_REPLICAS=%lld)",
             d->cfg->stream, want, s->replicas);
    obx_doctor_add(d, "stream_replicas", "warn", fix,
                   "stream %s has %lld replica%s, OUTBOX_STREAM_REPLICAS is %lld: the daemons set "
                   "it only when they create the stream",
                   d->cfg->stream, s->replicas, s->replicas == 1 ? "" : "s", want);
}

/* Retention, storage, deny flags, replicas: how the stream keeps what the relays store. */
static void
check_kind(struct obx_doctor *d, const struct obx_ctl_stream *s)
{
    int limits = strcmp(s->retention, "limits") == 0;
    int file = strcmp(s->storage, "file") == 0;

    obx_doctor_add(d, "retention", limits ? "ok" : "error",
                   limits ? NULL
                          : "recreate the stream with limits retention (delete it, start a "
                            "relay, then outboxctl replay)",
                   "%s retention%s", s->retention,
                   limits ? ""
                          : ": messages go once consumed, so replay, audit and a second "
                            "consumer group cannot work");
    obx_doctor_add(d, "storage", file ? "ok" : "error",
                   file ? NULL : "recreate the stream with file storage", "%s storage%s",
                   s->storage, file ? "" : ": a restart loses every message");
    obx_doctor_add(d, "deny_delete_purge", s->deny_delete && s->deny_purge ? "ok" : "warn",
                   s->deny_delete && s->deny_purge ? NULL
                                                   : "nats stream edit --deny-delete --deny-purge",
                   "deny_delete %s, deny_purge %s", s->deny_delete ? "on" : "off",
                   s->deny_purge ? "on" : "off");
    obx_doctor_add(d, "replicas", s->replicas >= 3 ? "ok" : "warn",
                   s->replicas >= 3 ? NULL
                                    : "on a cluster: nats stream edit --replicas 3 (three failure "
                                      "domains); until then run outboxctl audit regularly",
                   "%lld replica%s", s->replicas,
                   s->replicas == 1 ? ": one disk holds it all" : "s");
}

static void
check_usage(struct obx_doctor *d, struct obx_ctl_js *js, const struct obx_ctl_stream *s)
{
    struct obx_ctl_js_account a;
    outbox_error err = {0};
    long long pct;

    if (s->max_bytes > 0) {
        pct = (long long)(s->bytes * 100 / (unsigned long long)s->max_bytes);
        obx_doctor_add(d, "stream_bytes",
                       pct >= STORAGE_ERROR_PERCENT  ? "error"
                       : pct >= STORAGE_WARN_PERCENT ? "warn"
                                                     : "ok",
                       pct >= STORAGE_WARN_PERCENT ? "raise max_bytes (nats stream edit "
                                                     "--max-bytes) or drain the consumers"
                                                   : NULL,
                       "%llu of max_bytes %lld (%lld %%): past it, the oldest messages go, "
                       "consumed or not",
                       s->bytes, s->max_bytes, pct);
    }
    if (obx_ctl_js_account(js, &a, &err) != OUTBOX_OK) {
        obx_doctor_add(d, "jetstream_storage", "warn", NULL, "%s", err.message);
        return;
    }
    if (a.max_storage <= 0) {
        obx_doctor_add(d, "jetstream_storage", "ok", NULL,
                       "%llu bytes stored, no account limit (watch the server's disk: a full "
                       "disk disables JetStream)",
                       a.storage_bytes);
        return;
    }
    pct = (long long)(a.storage_bytes * 100 / (unsigned long long)a.max_storage);
    obx_doctor_add(d, "jetstream_storage",
                   pct >= STORAGE_ERROR_PERCENT  ? "error"
                   : pct >= STORAGE_WARN_PERCENT ? "warn"
                                                 : "ok",
                   pct >= STORAGE_WARN_PERCENT ? "raise the account's max_file_store, or shorten "
                                                 "max_age"
                                               : NULL,
                   "%llu of %lld bytes of JetStream storage (%lld %%)", a.storage_bytes,
                   a.max_storage, pct);
}

/* A duplicate that outlives its ledger row would run its handlers again. */
static void
check_ledger(struct obx_doctor *d, long long max_age_seconds)
{
    long long kept = d->cfg->ledger_retention_days * 86400;
    int ok = max_age_seconds > 0 && kept >= max_age_seconds;
    char fix[96], age[32];

    snprintf(fix, sizeof(fix), "OUTBOX_LEDGER_RETENTION_DAYS=%lld for the consumers",
             (max_age_seconds + 86399) / 86400 + 1);
    obx_doctor_add(d, "ledger_retention", ok ? "ok" : "error", ok ? NULL : fix,
                   "the ledger keeps %lld days, the stream's max_age is %s%s", kept / 86400,
                   max_age_seconds > 0 ? duration(max_age_seconds, age, sizeof(age)) : "unlimited",
                   ok ? "" : ": a redelivered event could run its handlers again");
}

void
obx_doctor_check_broker(struct obx_doctor *d)
{
    struct obx_ctl_js *js = NULL;
    struct obx_ctl_stream s;
    outbox_error err = {0};

    if (d->cfg->bus == OUTBOX_BUS_DB) {
        obx_doctor_add(d, "broker", "ok", NULL, "OUTBOX_BUS=db: no broker to check");
        return;
    }
    check_version(d);
    if (obx_ctl_js_open(d->cfg, &js, &err) != OUTBOX_OK ||
        obx_ctl_js_stream(js, d->cfg->stream, &s, &err) != OUTBOX_OK) {
        obx_doctor_add(d, "nats", "error", "check OUTBOX_NATS_URL, its credentials and the server",
                       "%s", err.message);
        obx_ctl_js_close(js);
        check_ledger(d, d->cfg->stream_max_age_seconds);
        return;
    }
    if (!s.exists) {
        obx_doctor_add(d, "stream", "error",
                       "start a relay (it creates the stream), or outboxctl replay",
                       "stream %s does not exist: publishes find no stream", d->cfg->stream);
        check_ledger(d, d->cfg->stream_max_age_seconds);
    } else {
        obx_doctor_add(d, "stream", "ok", NULL, "stream %s captures %s, %llu messages",
                       d->cfg->stream, s.subjects, s.messages);
        check_kind(d, &s);
        check_replicas(d, &s);
        check_windows(d, &s);
        check_usage(d, js, &s);
        check_ledger(d, s.max_age_seconds);
    }
    obx_ctl_js_close(js);
}
