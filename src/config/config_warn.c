/* SPDX-License-Identifier: MIT */
/*
 * config_warn.c - warnings about variables and flags a program does not
 * read (see config_warn.h).
 */
#include "config_warn.h"

#include <stdio.h>
#include <string.h>

#include "common/text.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define ENV_PREFIX     "OUTBOX_"
#define TEST_PREFIX    "OUTBOX_TEST_"
#define HANDLER_PREFIX "OUTBOX_HANDLER_"

/* Levenshtein distance of two short names (longer ones count as far apart). */
static size_t
distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t row[65];

    if (la > 64 || lb > 64) {
        return (size_t)-1;
    }
    for (size_t j = 0; j <= lb; j++) {
        row[j] = j;
    }
    for (size_t i = 1; i <= la; i++) {
        size_t diagonal = row[0];

        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t above = row[j];
            size_t best = diagonal + (a[i - 1] != b[j - 1]);

            best = above + 1 < best ? above + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diagonal = above;
            row[j] = best;
        }
    }
    return row[lb];
}

const struct obx_setting *
obx_setting_closest(const char *env_name)
{
    const struct obx_setting *best = NULL;
    size_t len = strlen(env_name), best_d = (size_t)-1;
    size_t limit = len / 4 > 2 ? len / 4 : 2;

    for (size_t i = 0; i < obx_settings_count; i++) {
        size_t d = distance(env_name, len, obx_settings[i].env, strlen(obx_settings[i].env));

        if (d < best_d) {
            best_d = d;
            best = &obx_settings[i];
        }
    }
    return best_d <= limit ? best : NULL;
}

static const struct obx_setting *
by_env(const char *name, size_t len)
{
    for (size_t i = 0; i < obx_settings_count; i++) {
        if (strlen(obx_settings[i].env) == len && strncmp(obx_settings[i].env, name, len) == 0) {
            return &obx_settings[i];
        }
    }
    return NULL;
}

static int
handler_variable(const char *name, size_t len)
{
    size_t n = strlen(HANDLER_PREFIX);

    if (len <= n || strncmp(name, HANDLER_PREFIX, n) != 0) {
        return 0;
    }
    for (size_t i = n; i < len; i++) {
        if (name[i] < '0' || name[i] > '9') {
            return 0;
        }
    }
    return 1;
}

/* 1 if the command reads row `s`. */
static int
reads(const struct obx_config_use *use, const struct obx_setting *s)
{
    if ((s->parts & use->parts) == 0) {
        return 0;
    }
    for (const char *const *u = use->unread; u != NULL && *u != NULL; u++) {
        if (strcmp(*u, s->env) == 0) {
            return 0;
        }
    }
    return 1;
}

/* One environment entry; 1 if it warned. */
static int
warn_variable(const struct obx_config_use *use, const char *entry,
              void (*warn)(void *ctx, const char *line), void *ctx)
{
    size_t len = strcspn(entry, "=");
    const struct obx_setting *s = by_env(entry, len), *near;
    char name[140], line[400];

    if (strncmp(entry, ENV_PREFIX, strlen(ENV_PREFIX)) != 0 ||
        strncmp(entry, TEST_PREFIX, strlen(TEST_PREFIX)) == 0 || (s != NULL && reads(use, s)) ||
        (handler_variable(entry, len) && use->handlers)) {
        return 0;
    }
    /* A name can hold anything but '=': quoted, it cannot break the line. */
    snprintf(line, sizeof(line), "%.*s", (int)(len < 120 ? len : 120), entry);
    obx_quote_for_message(line, name, sizeof(name));
    if (s != NULL || handler_variable(entry, len)) {
        snprintf(line, sizeof(line), "variable %s is ignored by %s (not one of its settings)", name,
                 use->command);
    } else if ((near = obx_setting_closest(line)) != NULL) {
        snprintf(line, sizeof(line), "unknown variable %s ignored; did you mean %s?", name,
                 near->env);
    } else {
        snprintf(line, sizeof(line),
                 "unknown variable %s ignored (no setting has this name; "
                 "see outboxd --help)",
                 name);
    }
    warn(ctx, line);
    return 1;
}

/* One argument; 1 if it is the flag of a setting the command does not read. */
static int
warn_flag(const struct obx_config_use *use, const char *arg,
          void (*warn)(void *ctx, const char *line), void *ctx)
{
    const struct obx_setting *s;
    char line[300];

    if (strncmp(arg, "--", 2) != 0) {
        return 0;
    }
    s = obx_setting_by_flag(arg + 2, strcspn(arg + 2, "="));
    if (s == NULL || reads(use, s)) {
        return 0;
    }
    snprintf(line, sizeof(line), "flag --%.*s is ignored by %s (not one of its settings)",
             (int)strcspn(arg + 2, "="), arg + 2, use->command);
    warn(ctx, line);
    return 1;
}

size_t
obx_config_warn(const struct obx_config_use *use, int argc, char *const *argv, char *const *envp,
                void (*warn)(void *ctx, const char *line), void *ctx)
{
    size_t n = 0;

    for (char *const *e = envp; e != NULL && *e != NULL; e++) {
        n += (size_t)warn_variable(use, *e, warn, ctx);
    }
    for (int i = 0; i < argc; i++) {
        n += (size_t)warn_flag(use, argv[i], warn, ctx);
    }
    return n;
}
