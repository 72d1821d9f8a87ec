/* SPDX-License-Identifier: MIT */
/*
 * cli.c - outboxctl's options and filters, checked before anything is sent.
 *
 * A value that would only fail in the database (a malformed time or UUID)
 * is refused here with the option and the value, so a typo is a usage
 * error (exit 2), never a half-run verb.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/text.h"
#include "common/uuid7.h"
#include "envelope/subject.h"
#include "ledger/ledger.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* A flag and what it sets. Valued options take the next argument or =VALUE. */
struct option {
    const char *name;
    unsigned opt; /* the enum obx_ctl_opt that allows it */
    int valued;
};

static const struct option options[] = {
    {"json", OBX_CTL_OPT_JSON, 0},
    {"dry-run", OBX_CTL_OPT_DRY_RUN, 0},
    {"handler", OBX_CTL_OPT_HANDLER, 1},
    {"relay", OBX_CTL_OPT_HANDLER, 0},
    {"event-type", OBX_CTL_OPT_ROUTE, 1},
    {"aggregate-type", OBX_CTL_OPT_ROUTE, 1},
    {"aggregate-id", OBX_CTL_OPT_ROUTE, 1},
    {"since", OBX_CTL_OPT_TIME | OBX_CTL_OPT_SINCE, 1},
    {"until", OBX_CTL_OPT_TIME, 1},
    {"reason-like", OBX_CTL_OPT_REASON, 1},
    {"id", OBX_CTL_OPT_IDS, 1},
    {"limit", OBX_CTL_OPT_LIMIT, 1},
    {"repair", OBX_CTL_OPT_REPAIR, 0},
    {"print", OBX_CTL_OPT_PRINT, 0},
    {"data-subject", OBX_CTL_OPT_DATA_SUBJECT, 1},
    {"scan-stream", OBX_CTL_OPT_SCAN_STREAM, 0},
    {"all", OBX_CTL_OPT_ALL, 0},
};

/* Prints "outboxctl VERB: <message> (see outboxctl --help)"; returns the exit code 2. */
static int usage_error(const char *verb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
usage_error(const char *verb, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "outboxctl %s: ", verb);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see outboxctl --help)\n", stderr);
    return 2;
}

/* `v` JSON-quoted for a message, in a static buffer: one use per message. */
static const char *
quoted(const char *v)
{
    static char buf[160];

    obx_quote_for_message(v, buf, sizeof(buf));
    return buf;
}

/* Digits `s[0..n)`, as a number within lo..hi; -1 otherwise. */
static int
digits(const char *s, int n, int lo, int hi)
{
    int v = 0;

    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) {
            return -1;
        }
        v = v * 10 + (s[i] - '0');
    }
    return v >= lo && v <= hi ? v : -1;
}

/* [Z | +HH[:MM] | -HH[:MM]] at the end of a time. */
static int
zone_valid(const char *p)
{
    if (*p == '\0' || strcmp(p, "Z") == 0) {
        return 1;
    }
    if ((*p != '+' && *p != '-') || digits(p + 1, 2, 0, 15) < 0) {
        return 0;
    }
    p += 3;
    if (*p == ':') {
        p++;
    }
    return *p == '\0' || (digits(p, 2, 0, 59) >= 0 && p[2] == '\0');
}

int
obx_ctl_time_valid(const char *t)
{
    size_t len = strlen(t);

    if (len < 10 || digits(t, 4, 1, 9999) < 0 || t[4] != '-' || digits(t + 5, 2, 1, 12) < 0 ||
        t[7] != '-' || digits(t + 8, 2, 1, 31) < 0) {
        return 0;
    }
    t += 10;
    if (*t == '\0') {
        return 1;
    }
    if ((*t != 'T' && *t != ' ') || digits(t + 1, 2, 0, 23) < 0 || t[3] != ':' ||
        digits(t + 4, 2, 0, 59) < 0) {
        return 0;
    }
    t += 6;
    if (*t == ':') {
        if (digits(t + 1, 2, 0, 60) < 0) {
            return 0;
        }
        t += 3;
        if (*t == '.') {
            size_t frac = strspn(t + 1, "0123456789");

            if (frac < 1 || frac > 9) {
                return 0;
            }
            t += 1 + frac;
        }
    }
    return zone_valid(t);
}

int
obx_ctl_uuid_valid(const char *text)
{
    uint8_t scratch[16];

    return text != NULL && strlen(text) == 36 && obx_uuid_parse(text, scratch) == 0;
}

/* Checks one valued option's value and stores it; 0, or 2 after printing why. */
static int
take_value(const char *verb, const char *name, const char *v, struct obx_ctl_args *a,
           struct obx_buf *ids)
{
    char *end = NULL;
    long long n;

    if (strcmp(name, "handler") == 0) {
        if (!obx_ledger_handler_name_valid(v)) {
            return usage_error(verb,
                               "--%s %s must be 1 to 64 of [A-Za-z0-9_.-] (--relay for the "
                               "relay's own)",
                               name, quoted(v));
        }
        a->handler = v;
    } else if (strcmp(name, "event-type") == 0 || strcmp(name, "aggregate-type") == 0) {
        int event = name[0] == 'e';

        if (event ? !obx_dotted_tokens_valid(v) : !obx_token_valid(v, strlen(v))) {
            return usage_error(verb, "--%s %s must be tokens of [A-Za-z0-9_-]", name, quoted(v));
        }
        *(event ? &a->event_type : &a->aggregate_type) = v;
    } else if (strcmp(name, "aggregate-id") == 0 || strcmp(name, "id") == 0) {
        if (!obx_ctl_uuid_valid(v)) {
            return usage_error(verb, "--%s %s is not a UUID (8-4-4-4-12 hex digits)", name,
                               quoted(v));
        }
        if (name[0] == 'a') {
            a->aggregate_id = v;
        } else if (a->id_count >= OBX_CTL_MAX_IDS) {
            return usage_error(verb, "--%s: at most %d ids", name, OBX_CTL_MAX_IDS);
        } else {
            obx_buf_appendf(ids, "%s%s", a->id_count++ ? "," : "{", v);
        }
    } else if (strcmp(name, "since") == 0 || strcmp(name, "until") == 0) {
        if (!obx_ctl_time_valid(v)) {
            return usage_error(verb,
                               "--%s %s is not an ISO 8601 time (2026-11-29, "
                               "2026-11-29T09:41:56Z, 2026-11-29 09:41+02:00)",
                               name, quoted(v));
        }
        *(name[0] == 's' ? &a->since : &a->until) = v;
    } else if (strcmp(name, "limit") == 0) {
        errno = 0;
        n = strtoll(v, &end, 10);
        if (errno != 0 || end == v || *end != '\0' || n < 1 || n > 100000000) {
            return usage_error(verb, "--%s %s must be a whole number from 1 to 100000000", name,
                               quoted(v));
        }
        snprintf(a->limit, sizeof(a->limit), "%lld", n);
    } else if (strcmp(name, "reason-like") == 0) {
        a->reason_like = v;
    } else if (strcmp(name, "data-subject") == 0) {
        if (v[0] == '\0' || strlen(v) > 256 || obx_has_control(v)) {
            return usage_error(verb, "--%s %s must be 1 to 256 bytes without control characters",
                               name, quoted(v));
        }
        a->data_subject = v;
    }
    return 0;
}

static void
take_switch(const char *name, struct obx_ctl_args *a)
{
    int *slots[] = {&a->json,  &a->dry_run, &a->relay,      &a->repair,
                    &a->print, &a->all,     &a->scan_stream};
    const char *names[] = {"json", "dry-run", "relay", "repair", "print", "all", "scan-stream"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(name, names[i]) == 0) {
            *slots[i] = 1;
        }
    }
}

/* One argument (and its value, which may be the next one); `*i` moves past what it took. */
static int
take_argument(const char *verb, unsigned accepted, int argc, char **argv, int *i,
              struct obx_ctl_args *a, struct obx_buf *ids)
{
    const char *arg = argv[*i], *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg) - 2;

    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
        if (a->positional_count >= OBX_CTL_MAX_POSITIONAL) {
            return usage_error(verb, "unexpected argument %s", quoted(arg));
        }
        a->positional[a->positional_count++] = arg;
        return 0;
    }
    for (size_t k = 0; k < sizeof(options) / sizeof(options[0]); k++) {
        const struct option *o = &options[k];

        if (strlen(o->name) != len || strncmp(arg + 2, o->name, len) != 0) {
            continue;
        }
        if ((o->opt & accepted) == 0) {
            return usage_error(verb, "--%s is not an option of this verb", o->name);
        }
        if (!o->valued) {
            if (eq != NULL) {
                return usage_error(verb, "--%s takes no value", o->name);
            }
            take_switch(o->name, a);
            return 0;
        }
        if (eq == NULL && *i + 1 >= argc) {
            return usage_error(verb, "--%s needs a value", o->name);
        }
        return take_value(verb, o->name, eq ? eq + 1 : argv[++*i], a, ids);
    }
    return usage_error(verb, "unknown option %s", quoted(arg));
}

int
obx_ctl_args_parse(const char *verb, unsigned accepted, int min_pos, int max_pos, int argc,
                   char **argv, struct obx_ctl_args *out)
{
    struct obx_buf ids;
    int code = 0;

    memset(out, 0, sizeof(*out));
    obx_buf_init(&ids);
    for (int i = 0; i < argc && code == 0; i++) {
        code = take_argument(verb, accepted, argc, argv, &i, out, &ids);
    }
    if (code == 0 && out->relay && out->handler != NULL) {
        code =
            usage_error(verb, "--relay and --handler %s exclude each other", quoted(out->handler));
    }
    if (code == 0 && (out->positional_count < min_pos || out->positional_count > max_pos)) {
        code = usage_error(verb, "takes %s",
                           max_pos == 0   ? "no positional argument"
                           : min_pos == 0 ? "at most one positional argument"
                                          : "one positional argument");
    }
    if (code == 0 && (accepted & OBX_CTL_OPT_DATA_SUBJECT) && out->data_subject == NULL) {
        code = usage_error(verb, "--data-subject is required");
    }
    if (out->id_count > 0) {
        obx_buf_append_str(&ids, "}");
    }
    if (code == 0 && obx_buf_failed(&ids)) {
        code = usage_error(verb, "out of memory");
    }
    out->ids = ids.data; /* owned by `out` now */
    return code;
}

void
obx_ctl_args_fini(struct obx_ctl_args *a)
{
    free(a->ids);
    a->ids = NULL;
}

void
obx_ctl_filter_params(const struct obx_ctl_args *a, const char *params[OBX_CTL_FILTER_COUNT])
{
    params[OBX_CTL_FILTER_HANDLER] = a->relay ? "" : a->handler;
    params[OBX_CTL_FILTER_EVENT_TYPE] = a->event_type;
    params[OBX_CTL_FILTER_AGGREGATE_TYPE] = a->aggregate_type;
    params[OBX_CTL_FILTER_AGGREGATE_ID] = a->aggregate_id;
    params[OBX_CTL_FILTER_SINCE] = a->since;
    params[OBX_CTL_FILTER_UNTIL] = a->until;
    params[OBX_CTL_FILTER_REASON_LIKE] = a->reason_like;
    params[OBX_CTL_FILTER_IDS] = a->ids;
    params[OBX_CTL_FILTER_LIMIT] = a->limit[0] ? a->limit : NULL;
}

int
obx_ctl_args_filtered(const struct obx_ctl_args *a)
{
    return a->relay || a->handler || a->event_type || a->aggregate_type || a->aggregate_id ||
           a->since || a->until || a->reason_like || a->id_count > 0;
}

int
obx_ctl_args_require_scope(const char *verb, const char *rows, const struct obx_ctl_args *a)
{
    if (a->all && obx_ctl_args_filtered(a)) {
        return usage_error(verb, "--all and a filter exclude each other: give one of them");
    }
    if (!a->all && !obx_ctl_args_filtered(a)) {
        return usage_error(verb,
                           "with no filter it would act on every %s: give a filter (--id, "
                           "--event-type, --since, ...) or --all",
                           rows);
    }
    return 0;
}
