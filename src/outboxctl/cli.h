/* SPDX-License-Identifier: MIT */
/*
 * cli.h - outboxctl's own arguments (the settings are outboxd's, parsed
 * before): output and safety switches, the row filters shared by the
 * verbs that list rows, and each verb's positional arguments.
 *
 * Every value is checked here, before any server is reached: a bad one is
 * refused with the option and the value, exit code 2. The filters become
 * the same nine $n parameters of every filtered query (OBX_CTL_FILTER_*),
 * all sent as text and cast in SQL.
 */
#ifndef OBX_CTL_CLI_H
#define OBX_CTL_CLI_H

#include <stddef.h>

/* The options a verb takes; anything else is a usage error. */
enum obx_ctl_opt {
    OBX_CTL_OPT_JSON = 1 << 0,          /* --json */
    OBX_CTL_OPT_DRY_RUN = 1 << 1,       /* --dry-run */
    OBX_CTL_OPT_HANDLER = 1 << 2,       /* --handler NAME, --relay */
    OBX_CTL_OPT_ROUTE = 1 << 3,         /* --event-type, --aggregate-type, --aggregate-id */
    OBX_CTL_OPT_TIME = 1 << 4,          /* --since, --until */
    OBX_CTL_OPT_SINCE = 1 << 5,         /* --since alone */
    OBX_CTL_OPT_REASON = 1 << 6,        /* --reason-like PATTERN */
    OBX_CTL_OPT_IDS = 1 << 7,           /* --id EVENT_ID (repeatable) */
    OBX_CTL_OPT_LIMIT = 1 << 8,         /* --limit N */
    OBX_CTL_OPT_REPAIR = 1 << 9,        /* --repair */
    OBX_CTL_OPT_PRINT = 1 << 10,        /* --print */
    OBX_CTL_OPT_DATA_SUBJECT = 1 << 11, /* --data-subject S (required where taken) */
    OBX_CTL_OPT_SCAN_STREAM = 1 << 12,  /* --scan-stream */
    OBX_CTL_OPT_ALL = 1 << 13,          /* --all: every row, no filter (see require_scope) */
};

/* Every filter a row-listing verb takes. */
#define OBX_CTL_OPT_FILTERS                                                            \
    (OBX_CTL_OPT_HANDLER | OBX_CTL_OPT_ROUTE | OBX_CTL_OPT_TIME | OBX_CTL_OPT_REASON | \
     OBX_CTL_OPT_IDS | OBX_CTL_OPT_LIMIT)

/* Positions of the filters among a filtered query's parameters ($1 is index 0). */
enum obx_ctl_filter_param {
    OBX_CTL_FILTER_HANDLER,        /* $1 text: a handler, '' for the relay, NULL for any */
    OBX_CTL_FILTER_EVENT_TYPE,     /* $2 text */
    OBX_CTL_FILTER_AGGREGATE_TYPE, /* $3 text */
    OBX_CTL_FILTER_AGGREGATE_ID,   /* $4 ::uuid */
    OBX_CTL_FILTER_SINCE,          /* $5 ::timestamptz */
    OBX_CTL_FILTER_UNTIL,          /* $6 ::timestamptz */
    OBX_CTL_FILTER_REASON_LIKE,    /* $7 text, a LIKE pattern */
    OBX_CTL_FILTER_IDS,            /* $8 ::uuid[] */
    OBX_CTL_FILTER_LIMIT,          /* $9 ::bigint, NULL: no limit */
    OBX_CTL_FILTER_COUNT
};

enum { OBX_CTL_MAX_IDS = 1000, OBX_CTL_MAX_POSITIONAL = 2 };

struct obx_ctl_args {
    int json, dry_run, repair, print, scan_stream, all;
    int relay; /* --relay: the relay's own dead letters (handler '') */
    const char *handler, *event_type, *aggregate_type, *aggregate_id;
    const char *since, *until, *reason_like, *data_subject; /* borrowed from argv */
    char *ids; /* owned: `{id,...}` of the --id values, NULL without any */
    size_t id_count;
    char limit[24]; /* "" without --limit */
    const char *positional[OBX_CTL_MAX_POSITIONAL];
    int positional_count;
};

/*
 * Parses `argv` for `verb`, which takes the options in `accepted` and
 * `min_pos` to `max_pos` positional arguments. Returns 0, or prints the
 * problem (naming the option and the value) and returns 2. Free with
 * obx_ctl_args_fini() in both cases.
 */
int obx_ctl_args_parse(const char *verb, unsigned accepted, int min_pos, int max_pos, int argc,
                       char **argv, struct obx_ctl_args *out);
void obx_ctl_args_fini(struct obx_ctl_args *a);

/* The nine filter parameters (NULL where a filter is not given), borrowed from `a`. */
void obx_ctl_filter_params(const struct obx_ctl_args *a, const char *params[OBX_CTL_FILTER_COUNT]);

/* True if any filter (other than --limit) was given. */
int obx_ctl_args_filtered(const struct obx_ctl_args *a);

/*
 * For a verb that changes every row its filters choose (`dead requeue`,
 * `quarantine purge`, ...): a run with no filter would act on every row
 * of every handler, so it takes a filter or --all, not both (--limit is
 * no filter: it only caps the count). `rows` names them for the message
 * ("dead letter of every handler"). Returns 0, or prints which to give
 * and returns 2.
 */
int obx_ctl_args_require_scope(const char *verb, const char *rows, const struct obx_ctl_args *a);

/* True if `text` is an ISO 8601 date or date-time (the forms --since takes). */
int obx_ctl_time_valid(const char *text);

/* True if `text` is an 8-4-4-4-12 hex UUID. */
int obx_ctl_uuid_valid(const char *text);

#endif
