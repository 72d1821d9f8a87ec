/* SPDX-License-Identifier: MIT */
/*
 * cmd_doctor.c - `outboxctl doctor [--json]`: checks a deployment the way
 * an experienced operator would, one finding per check: ok, warn or error,
 * what it saw, and the command or setting that fixes it. Exit 1 on any
 * error. The database part: schema at this build's migration, a
 * transaction-mode pooler in the way (and session state it passes from
 * client to client), NOTIFY reaching a LISTEN, clock
 * skew, the xmin horizon, the outbox table's dead tuples and vacuums,
 * idle_in_transaction_session_timeout, per-aggregate ordering's parts
 * (trigger present and in which state, counters, rights). The broker part (doctor_stream.c):
 * the stream and the settings the relays need, the server's version and
 * storage, the ledger's retention against the stream's max_age.
 */
#include "doctor.h"

#include <stdio.h>
#include <string.h>

#include "outbox/worker.h"
#include "outboxctl/cli.h"
#include "outboxctl/ctl.h"
#include "outboxctl/out.h"
#include "outboxctl/query.h"
#include "probe.h"
#include "sql_gen.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* Thresholds, with why. */
enum {
    OLD_XACT_WARN_S = 300,     /* FAULTS 3.2: alert on backend_xmin age over 5 minutes */
    OLD_XACT_ERROR_S = 3600,   /* an hour of dead tuples nobody can vacuum */
    IDLE_XACT_WARN_S = 60,     /* what the daemons' own sessions allow */
    PREPARED_ERROR_S = 300,    /* a forgotten prepared transaction pins the horizon forever */
    CLOCK_WARN_MS = 2000,      /* logs, ce-time and the broker's timestamps drift apart */
    CLOCK_ERROR_MS = 60000,    /* audit's max_age window and erasure expiries are off */
    NOTIFY_WAIT_MS = 2000,     /* a NOTIFY reaches a LISTEN on the same server in ms */
    DEAD_TUPLES_WARN = 100000, /* FACTS 12: dead tuples are the real limit of a queue table */
    DEAD_TUPLES_ERROR = 10000000,
    VACUUM_STALE_S = 3600,
};
#define FROZEN_XID_WARN  500000000LL  /* FAULTS 3.2: age(datfrozenxid) 500 M warn */
#define FROZEN_XID_ERROR 1000000000LL /* 1 B page: wraparound protection is near */

static int
check_schema(struct obx_doctor *d)
{
    struct obx_ctl_stmt stmt = {obx_sql_doctor_schema, NULL, 0};
    int need = obx_migrations[obx_migration_count - 1].version;
    outbox_error err = {0};
    json_t *row = NULL;
    long long have;

    if (obx_ctl_query_one(d->conn, d->cfg->schema, &stmt, &row, &err) != OUTBOX_OK) {
        if (strcmp(err.sqlstate, "42P01") != 0 && strcmp(err.sqlstate, "3F000") != 0) {
            obx_doctor_add(d, "schema", "error", "check OUTBOX_DATABASE_URL and the role's rights",
                           "cannot read schema %s: %s", d->cfg->schema, err.message);
            return 0;
        }
    }
    have = obx_ctl_int(row, "schema_version");
    json_decref(row);
    if (have < need) {
        obx_doctor_add(d, "schema", "error", "outboxctl migrate",
                       "schema %s is at migration %lld, this build needs %d: relays and "
                       "consumers wait for it",
                       d->cfg->schema, have, need);
        return 0;
    }
    obx_doctor_add(d, "schema", have > need ? "warn" : "ok",
                   have > need ? "upgrade outboxctl to the release that migrated it" : NULL,
                   "schema %s is at migration %lld (this build: %d)", d->cfg->schema, have, need);
    return 1;
}

/*
 * A pooler in transaction mode: relays that LISTEN (the default) miss their
 * wake-ups behind it, so it is an error until OUTBOX_LISTEN=0; with polling
 * it is a warning, since migrations and the fleet's session lock still
 * need a direct or session-mode connection.
 */
static void
report_pooler(struct obx_doctor *d, const struct obx_ctl_session_probe *p)
{
    const char *pooler = p->pooler[0] != '\0' ? p->pooler : "a pooler";
    const char *how = p->backend_shared    ? "a second session ran on this session's server process"
                      : p->backend_changed ? "two statements of one session ran on different "
                                             "server processes"
                                           : "a session setting did not survive to the next "
                                             "statement";

    if (d->cfg->listen) {
        obx_doctor_add(d, "pooler", "error",
                       "set OUTBOX_LISTEN=0 for the relays (they poll instead); run outboxctl "
                       "migrate through a direct or session-mode connection",
                       "%s in transaction mode (%s): LISTEN wake-ups cannot pass it and "
                       "OUTBOX_LISTEN=%lld",
                       pooler, how, d->cfg->listen);
        return;
    }
    obx_doctor_add(d, "pooler", "warn",
                   "run outboxctl migrate and fleet relays through a direct or session-mode "
                   "connection",
                   "%s in transaction mode (%s); relays poll (OUTBOX_LISTEN=0)", pooler, how);
}

/*
 * Behind a transaction-mode pooler, session state passes from one client to
 * the next with the server connection: the relays' (and OUTBOX_BUS=db
 * consumers' lease sessions') synchronous_commit=off would make writers' and
 * the ledger's commits return before they are durable, their planner settings would
 * steer other clients' plans, and their statements, prepared by name, would
 * meet another schema's statement of the same name. An error when this
 * connection carries synchronous_commit=off from another client, a warning
 * otherwise: doctor sees one server connection, not the pool.
 */
static void
report_pooled_state(struct obx_doctor *d, const char *pooler)
{
    static const char fix[] =
        "give the relays a pool of their own for each database and outbox schema (a login or a "
        "PgBouncer [databases] entry only they use), or connect them directly or through a "
        "session-mode pool; OUTBOX_BUS=db consumers directly or in session mode (their ledger "
        "must commit synchronously)";
    char settings[1024];
    int sync_off = 0;
    outbox_error err = {0};

    if (obx_ctl_probe_inherited(d->conn, settings, sizeof(settings), &sync_off, &err) !=
        OUTBOX_OK) {
        obx_doctor_add(d, "pooled_session_state", "warn", fix, "cannot read pg_settings: %s",
                       err.message);
    } else if (settings[0] != '\0') {
        obx_doctor_add(d, "pooled_session_state", sync_off ? "error" : "warn", fix,
                       "this server connection of %s carries session settings an earlier "
                       "client left: %s%s",
                       pooler, settings,
                       sync_off ? "; with synchronous_commit=off every client's commit on it "
                                  "returns before it is durable (writers' events, the ledger)"
                                : "");
    } else {
        obx_doctor_add(d, "pooled_session_state", "warn", fix,
                       "no session setting carried over to this server connection of %s now, "
                       "but relays set synchronous_commit=off and planner settings for their "
                       "sessions and prepare statements by name: in a shared pool those reach "
                       "other clients",
                       pooler);
    }
}

/* A pooler in transaction mode, and LISTEN/NOTIFY. */
static void
check_session(struct obx_doctor *d)
{
    struct obx_ctl_session_probe p;
    outbox_error err = {0};
    int heard = 0, pooled = 0;

    if (obx_ctl_probe_session(d->conn, &p, &err) != OUTBOX_OK) {
        obx_doctor_add(d, "pooler", "error", NULL, "session probe failed: %s", err.message);
    } else if (p.backend_changed || p.setting_lost || p.backend_shared) {
        pooled = 1;
        report_pooler(d, &p);
        report_pooled_state(d, p.pooler[0] != '\0' ? p.pooler : "the pooler");
    } else if (p.client_port[0] != '\0' && strcmp(p.client_port, p.server_port) != 0) {
        obx_doctor_add(d, "pooler", "warn",
                       "if it is PgBouncer in transaction mode: OUTBOX_LISTEN=0 for relays, "
                       "migrations on a direct connection",
                       "connected to port %s, the server listens on %s: a pooler or proxy is in "
                       "between (session state held across statements here)",
                       p.client_port, p.server_port);
    } else {
        obx_doctor_add(d, "pooler", "ok", NULL, "direct connection (port %s)", p.server_port);
    }
    if (pooled && !d->cfg->listen) {
        obx_doctor_add(d, "notify", "ok", NULL, "not checked: relays poll (OUTBOX_LISTEN=0)");
    } else if (obx_ctl_probe_notify(d->conn, NOTIFY_WAIT_MS, &heard, &err) != OUTBOX_OK || !heard) {
        obx_doctor_add(d, "notify", "error",
                       "relays: OUTBOX_LISTEN=0 (they poll, OUTBOX_POLL_MAX_MS); or connect "
                       "without the pooler",
                       "a NOTIFY did not reach this session's LISTEN within %d ms%s%s",
                       NOTIFY_WAIT_MS, err.message[0] ? ": " : "", err.message);
    } else {
        obx_doctor_add(d, "notify", "ok", NULL, "a NOTIFY reached this session's LISTEN");
    }
}

static void
check_clock(struct obx_doctor *d)
{
    long long skew = 0, rtt = 0;
    outbox_error err = {0};
    long long mag;

    if (obx_ctl_probe_clock(d->conn, &skew, &rtt, &err) != OUTBOX_OK) {
        obx_doctor_add(d, "clock", "warn", NULL, "clock probe failed: %s", err.message);
        return;
    }
    mag = skew < 0 ? -skew : skew;
    obx_doctor_add(d, "clock",
                   mag >= CLOCK_ERROR_MS  ? "error"
                   : mag >= CLOCK_WARN_MS ? "warn"
                                          : "ok",
                   mag >= CLOCK_WARN_MS ? "run NTP (chrony, systemd-timesyncd) on this host and "
                                          "the database's"
                                        : NULL,
                   "the database's clock is %+lld ms from this host's (round trip %lld ms; "
                   "workers use database time only)",
                   skew, rtt);
}

static void
check_horizon(struct obx_doctor *d, json_t *r)
{
    double oldest = json_number_value(json_object_get(r, "oldest_xact_s"));
    double idle = json_number_value(json_object_get(r, "idle_in_xact_s"));
    double prepared = json_number_value(json_object_get(r, "prepared_oldest_s"));
    long long frozen = obx_ctl_int(r, "frozen_xid_age");
    char fix[200];

    snprintf(fix, sizeof(fix),
             "SELECT pg_terminate_backend(%lld) if it is stuck; find who: "
             "SELECT * FROM pg_stat_activity ORDER BY xact_start",
             obx_ctl_int(r, "oldest_xact_pid"));
    obx_doctor_add(d, "xmin_horizon",
                   oldest >= OLD_XACT_ERROR_S  ? "error"
                   : oldest >= OLD_XACT_WARN_S ? "warn"
                                               : "ok",
                   oldest >= OLD_XACT_WARN_S ? fix : NULL,
                   "oldest transaction with a snapshot: %.0f s (%s)", oldest,
                   obx_ctl_str(r, "oldest_xact") ? obx_ctl_str(r, "oldest_xact") : "none");
    obx_doctor_add(d, "idle_in_transaction", idle >= IDLE_XACT_WARN_S ? "warn" : "ok",
                   idle >= IDLE_XACT_WARN_S
                       ? "find the client: SELECT * FROM pg_stat_activity WHERE state LIKE "
                         "'idle in transaction%'"
                       : NULL,
                   "%lld sessions idle in a transaction, the longest for %.0f s",
                   obx_ctl_int(r, "idle_in_xact"), idle);
    obx_doctor_add(d, "replication_slots", obx_ctl_str(r, "idle_slots") ? "error" : "ok",
                   obx_ctl_str(r, "idle_slots") ? "SELECT pg_drop_replication_slot('<name>') if "
                                                  "nobody will read it again"
                                                : NULL,
                   "inactive slots holding xmin: %s",
                   obx_ctl_str(r, "idle_slots") ? obx_ctl_str(r, "idle_slots") : "none");
    obx_doctor_add(d, "prepared_transactions",
                   prepared >= PREPARED_ERROR_S     ? "error"
                   : obx_ctl_int(r, "prepared") > 0 ? "warn"
                                                    : "ok",
                   obx_ctl_int(r, "prepared") > 0 ? "COMMIT PREPARED '<gid>' or ROLLBACK PREPARED "
                                                    "'<gid>'"
                                                  : NULL,
                   "%lld prepared transactions (%s), the oldest %.0f s", obx_ctl_int(r, "prepared"),
                   obx_ctl_str(r, "prepared_gids") ? obx_ctl_str(r, "prepared_gids") : "none",
                   prepared);
    obx_doctor_add(d, "frozen_xid",
                   frozen >= FROZEN_XID_ERROR  ? "error"
                   : frozen >= FROZEN_XID_WARN ? "warn"
                                               : "ok",
                   frozen >= FROZEN_XID_WARN ? "VACUUM (FREEZE) the oldest tables once the "
                                               "horizon is clear"
                                             : NULL,
                   "age(datfrozenxid) is %lld", frozen);
    if (obx_ctl_int(r, "hidden_sessions") > 0) {
        obx_doctor_add(d, "visibility", "warn", "GRANT pg_read_all_stats TO <this role>",
                       "%lld other sessions are hidden from this role: the horizon checks may "
                       "miss them",
                       obx_ctl_int(r, "hidden_sessions"));
    }
}

static void
check_settings(struct obx_doctor *d, json_t *r)
{
    const char *idle = obx_ctl_str(r, "idle_in_transaction_timeout");
    int unset = idle == NULL || strcmp(idle, "0") == 0;

    obx_doctor_add(d, "idle_in_transaction_session_timeout", unset ? "warn" : "ok",
                   unset ? "ALTER ROLE <writers' roles> SET idle_in_transaction_session_timeout = "
                           "'60s' (or ALTER DATABASE ... SET)"
                         : NULL,
                   "%s for this role and database%s", unset ? "unset" : idle,
                   unset ? ": a forgotten transaction pins the xmin horizon (the daemons set 60s "
                           "for their own sessions)"
                         : "");
}

/* Per-aggregate ordering's parts (docs/ordering.md): the trigger, its state, the counters. */
static void
check_ordering(struct obx_doctor *d)
{
    struct obx_ctl_stmt stmt = {obx_sql_doctor_ordering, NULL, 0};
    outbox_error err = {0};
    json_t *r = NULL;
    const char *state;

    if (obx_ctl_query_one(d->conn, d->cfg->schema, &stmt, &r, &err) != OUTBOX_OK || r == NULL) {
        obx_doctor_add(d, "ordering", "warn", NULL, "cannot read the ordering trigger: %s",
                       err.message);
        json_decref(r);
        return;
    }
    state = obx_ctl_str(r, "trigger_state");
    if (state == NULL || !json_is_true(json_object_get(r, "heads_table")) ||
        !json_is_true(json_object_get(r, "definer"))) {
        obx_doctor_add(d, "ordering", "error", "outboxctl migrate (as the schema's owner)",
                       "ordering's parts are incomplete in %s: trigger events_seq %s, table "
                       "aggregate_heads %s, its function %s",
                       d->cfg->schema, state != NULL ? "present" : "missing",
                       json_is_true(json_object_get(r, "heads_table")) ? "present" : "missing",
                       json_is_true(json_object_get(r, "definer")) ? "SECURITY DEFINER"
                                                                   : "not SECURITY DEFINER");
    } else if (strcmp(state, "D") != 0 && !json_is_true(json_object_get(r, "owner_can_count"))) {
        obx_doctor_add(d, "ordering", "error",
                       "ALTER FUNCTION events_seq() OWNER TO the owner of aggregate_heads",
                       "ordering is on in %s, but the owner of events_seq() may not read and "
                       "write aggregate_heads: every numbered insert fails",
                       d->cfg->schema);
    } else if (strcmp(state, "D") != 0 && !json_is_true(json_object_get(r, "seq_index"))) {
        obx_doctor_add(d, "ordering", "error", "outboxctl migrate (as the schema's owner)",
                       "ordering is on in %s, but index events_aggregate_seq_idx is missing or "
                       "invalid: every claim looks up its aggregates' heads by reading the table",
                       d->cfg->schema);
    } else if (obx_ctl_int(r, "blocked") > 0) {
        obx_doctor_add(d, "ordering", "warn",
                       "outboxctl dead list --relay, then dead requeue (fixed) or dead skip "
                       "(given up); a quarantined head: quarantine list, then release "
                       "(repaired) or quarantine skip (given up)",
                       "%lld ordered aggregate%s of %s held by a dead or quarantined head: "
                       "the events behind %s wait",
                       (long long)obx_ctl_int(r, "blocked"),
                       obx_ctl_int(r, "blocked") == 1 ? "" : "s", d->cfg->schema,
                       obx_ctl_int(r, "blocked") == 1 ? "it" : "them");
    } else if (strcmp(state, "D") == 0) {
        obx_doctor_add(d, "ordering", "ok", NULL,
                       "ordering is off in %s: events get no aggregate_seq (outboxctl "
                       "ordering on)",
                       d->cfg->schema);
    } else if (strcmp(state, "A") == 0) {
        obx_doctor_add(d, "ordering", "ok", NULL,
                       "ordering is on in %s: trigger events_seq enabled always, counters "
                       "writable by its owner",
                       d->cfg->schema);
    } else {
        obx_doctor_add(d, "ordering", "warn", "outboxctl ordering on",
                       "trigger events_seq of %s fires only in %s sessions (tgenabled %s): the "
                       "others write events without aggregate_seq",
                       d->cfg->schema, strcmp(state, "R") == 0 ? "replica" : "origin", state);
    }
    json_decref(r);
}

static void
check_table(struct obx_doctor *d)
{
    struct obx_ctl_stmt stmt = {obx_sql_doctor_table, NULL, 0};
    outbox_error err = {0};
    json_t *r = NULL;
    long long dead, live;
    char vacuumed[64];
    double since;

    if (obx_ctl_query_one(d->conn, d->cfg->schema, &stmt, &r, &err) != OUTBOX_OK || r == NULL) {
        obx_doctor_add(d, "dead_tuples", "warn", NULL, "no statistics for %s.events: %s",
                       d->cfg->schema, err.message);
        json_decref(r);
        return;
    }
    dead = obx_ctl_int(r, "n_dead_tup");
    live = obx_ctl_int(r, "n_live_tup");
    since = json_is_null(json_object_get(r, "since_vacuum_s"))
                ? -1
                : json_number_value(json_object_get(r, "since_vacuum_s"));
    if (since < 0) {
        snprintf(vacuumed, sizeof(vacuumed), "never vacuumed");
    } else {
        snprintf(vacuumed, sizeof(vacuumed), "last vacuum %.0f s ago", since);
    }
    obx_doctor_add(d, "dead_tuples",
                   dead >= DEAD_TUPLES_ERROR                            ? "error"
                   : dead >= DEAD_TUPLES_WARN && dead > live            ? "warn"
                   : dead >= DEAD_TUPLES_WARN && since > VACUUM_STALE_S ? "warn"
                                                                        : "ok",
                   dead >= DEAD_TUPLES_WARN ? "clear the xmin horizon, then VACUUM (VERBOSE) the "
                                              "events table; keep its autovacuum settings"
                                            : NULL,
                   "%s.events: %lld live, %lld dead tuples; %s (%lld autovacuums)", d->cfg->schema,
                   live, dead, vacuumed, obx_ctl_int(r, "autovacuum_count"));
    json_decref(r);
}

static void
check_database(struct obx_doctor *d)
{
    struct obx_ctl_stmt stmt = {obx_sql_doctor_database, NULL, 0};
    outbox_error err = {0};
    json_t *r = NULL;

    check_session(d);
    check_clock(d);
    if (obx_ctl_query_one(d->conn, d->cfg->schema, &stmt, &r, &err) != OUTBOX_OK) {
        obx_doctor_add(d, "xmin_horizon", "warn", NULL, "cannot read the horizon: %s", err.message);
    } else {
        check_settings(d, r);
        check_horizon(d, r);
    }
    json_decref(r);
}

static void
print_findings(const struct obx_doctor *d, int json)
{
    static const char *const keys[] = {"check", "level", "saw", "fix", NULL};
    json_t *f;
    size_t i;

    json_array_foreach(d->findings, i, f)
    {
        if (json) {
            obx_ctl_emit(1, "finding", f, keys);
            continue;
        }
        printf("%-5s %-36s %s\n", obx_ctl_str(f, "level"), obx_ctl_str(f, "check"),
               obx_ctl_str(f, "saw"));
        if (obx_ctl_str(f, "fix") != NULL) {
            printf("      %-36s fix: %s\n", "", obx_ctl_str(f, "fix"));
        }
    }
}

int
obx_ctl_doctor(const struct obx_config *cfg, int argc, char **argv)
{
    struct obx_ctl_args args;
    struct obx_doctor d = {.cfg = cfg};
    json_t *s;
    int code = obx_ctl_args_parse("doctor", OBX_CTL_OPT_JSON, 0, 0, argc, argv, &args);

    if (code == 0) {
        code = obx_ctl_connect(cfg, &d.conn);
    }
    if (code == 0) {
        d.findings = json_array();
        if (check_schema(&d)) {
            check_table(&d);
            check_ordering(&d);
        }
        check_database(&d);
        obx_doctor_check_broker(&d);
        print_findings(&d, args.json);
        s = json_pack("{s:s, s:i, s:i}", "action", "doctor", "errors", d.errors, "warnings",
                      d.warnings);
        if (args.json) {
            obx_ctl_emit(1, "summary", s, NULL);
        } else {
            printf("%d error%s, %d warning%s\n", d.errors, d.errors == 1 ? "" : "s", d.warnings,
                   d.warnings == 1 ? "" : "s");
        }
        json_decref(s);
        code = d.errors > 0 ? 1 : 0;
    }
    json_decref(d.findings);
    obx_ctl_close(d.conn);
    obx_ctl_args_fini(&args);
    return code;
}
