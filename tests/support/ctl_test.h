/* SPDX-License-Identifier: MIT */
/*
 * ctl_test.h - running `outboxctl` in a test: with a settings environment
 * (struct relay_env), its exit code, its whole output, and the JSON lines
 * it printed (--json: one object per line), so a test asserts on what an
 * operator's script would read. Header-only (static inline) because it
 * calls the harness, which only the integration and fault binaries link.
 */
#ifndef OBX_TEST_CTL_TEST_H
#define OBX_TEST_CTL_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <jansson.h>

#include "harness.h"
#include "relay_check.h"

struct ctl_run {
    int status;    /* exit code */
    char *out;     /* stdout and stderr, malloc'd */
    json_t *lines; /* every line that parses as a JSON object, in order */
};

/* Runs `outboxctl args...` (NULL-terminated) with `env`; waits up to 120 s. */
static inline void
ctl_run(struct ctl_run *r, struct relay_env *env, const char *const args[])
{
    char *argv[32] = {(char *)harness_bin("outboxctl")};
    struct harness_proc p;
    int argc = 1;

    for (int i = 0; args[i] != NULL; i++) {
        cr_assert_lt(argc, 31, "too many arguments");
        argv[argc++] = (char *)args[i];
    }
    argv[argc] = NULL;
    harness_spawn(&p, argv, env->vars);
    r->status = harness_proc_wait(&p, 120000);
    cr_assert_neq(r->status, -1, "outboxctl %s did not finish in 120 s", args[0]);
    r->out = harness_proc_log(&p);
    r->lines = json_array();
    for (char *line = r->out; line != NULL && *line != '\0';) {
        char *end = strchr(line, '\n');
        json_t *obj;

        if (end != NULL) {
            *end = '\0';
        }
        obj = line[0] == '{' ? json_loads(line, 0, NULL) : NULL;
        if (json_is_object(obj)) {
            json_array_append_new(r->lines, obj);
        } else {
            json_decref(obj);
        }
        if (end != NULL) {
            *end = '\n';
        }
        line = end != NULL ? end + 1 : NULL;
    }
    cr_log_info("outboxctl %s -> %d\n%s", args[0], r->status, r->out);
}

/* Runs and requires exit code `want`. */
static inline void
ctl_expect(struct ctl_run *r, struct relay_env *env, int want, const char *const args[])
{
    ctl_run(r, env, args);
    cr_assert_eq(r->status, want, "outboxctl %s exited %d, not %d:\n%s", args[0], r->status, want,
                 r->out);
}

static inline void
ctl_run_fini(struct ctl_run *r)
{
    free(r->out);
    json_decref(r->lines);
    memset(r, 0, sizeof(*r));
}

/* JSON lines whose "kind" is `kind`. */
static inline size_t
ctl_count(const struct ctl_run *r, const char *kind)
{
    size_t n = 0, i;
    json_t *line;

    json_array_foreach(r->lines, i, line)
    {
        const char *k = json_string_value(json_object_get(line, "kind"));

        n += k != NULL && strcmp(k, kind) == 0;
    }
    return n;
}

/* The `nth` (0-based) JSON line of `kind`, borrowed; fails the test if there is none. */
static inline json_t *
ctl_line(const struct ctl_run *r, const char *kind, size_t nth)
{
    size_t i;
    json_t *line;

    json_array_foreach(r->lines, i, line)
    {
        const char *k = json_string_value(json_object_get(line, "kind"));

        if (k != NULL && strcmp(k, kind) == 0 && nth-- == 0) {
            return line;
        }
    }
    cr_assert_fail("outboxctl printed no %s line of kind %s:\n%s", nth ? "such" : "", kind, r->out);
    return NULL;
}

/* An integer field of a JSON object; fails the test if it is not one. */
static inline long long
ctl_int(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);

    cr_assert(json_is_integer(v), "no integer \"%s\" in %s", key,
              json_dumps(obj, JSON_COMPACT) ? json_dumps(obj, JSON_COMPACT) : "?");
    return (long long)json_integer_value(v);
}

/* A string field (NULL when absent or null). */
static inline const char *
ctl_str(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

#endif
