/* SPDX-License-Identifier: MIT */
/*
 * config.c - configuration values: defaults, checked setters, the
 * environment and flags, and the public outbox_config around them.
 *
 * A value is checked when it is set, against its row, so a bad one is
 * refused where the caller can still say which variable or flag it came
 * from. What depends on two settings (a backoff cap below its base, a
 * ledger kept shorter than the stream) is checked by the part that needs
 * both, when it is created.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/secret.h"
#include "config_files.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static char **
str_slot(struct obx_config *cfg, const struct obx_setting *s)
{
    return (char **)(void *)((char *)cfg + s->offset);
}

static long long *
int_slot(struct obx_config *cfg, const struct obx_setting *s)
{
    return (long long *)(void *)((char *)cfg + s->offset);
}

static int *
choice_slot(struct obx_config *cfg, const struct obx_setting *s)
{
    return (int *)(void *)((char *)cfg + s->offset);
}

static outbox_status
set_number(struct obx_config *cfg, const struct obx_setting *s, const char *as, const char *text,
           outbox_error *err)
{
    char *end = NULL, shown[200];
    long long n;

    errno = 0;
    n = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || n < s->min || n > s->max) {
        obx_mask_quote(text, shown, sizeof(shown));
        return obx_fail(err, OUTBOX_EINVAL, "%s=%s must be a whole number from %lld to %lld", as,
                        shown, s->min, s->max);
    }
    *int_slot(cfg, s) = n;
    return OUTBOX_OK;
}

/*
 * A value its row's check refused: named by `as` and shown masked, with the
 * check's reason (masked too: a check may quote the value).
 */
static outbox_status
refuse_checked(const char *as, const char *text, const outbox_error *why, outbox_error *err)
{
    char shown[200], reason[400];

    obx_mask_quote(text, shown, sizeof(shown));
    obx_mask_echo(why->message, text, reason, sizeof(reason));
    if (strncmp(reason, as, strlen(as)) == 0 && reason[strlen(as)] == ' ') {
        /* The check named the setting by this very name and quoted the value already
         * (the library's keys: schema "x" must match ...). */
        return obx_fail(err, OUTBOX_EINVAL, "%s", reason);
    }
    return obx_fail(err, OUTBOX_EINVAL, "%s=%s: %s", as, shown, reason);
}

/* NULL text unsets a string (only a string has no value). */
static outbox_status
set_value(struct obx_config *cfg, const struct obx_setting *s, const char *as, const char *text,
          outbox_error *err)
{
    outbox_error why = {0};
    char *copy, shown[200];
    int index;

    if (text == NULL && s->type != OBX_SETTING_STR) {
        return obx_fail(err, OUTBOX_EINVAL, "%s needs a value", as);
    }
    switch (s->type) {
    case OBX_SETTING_INT:
        return set_number(cfg, s, as, text, err);
    case OBX_SETTING_CHOICE:
        index = obx_setting_choice_index(s, text);
        if (index < 0) {
            obx_mask_quote(text, shown, sizeof(shown));
            return obx_fail(err, OUTBOX_EINVAL, "%s=%s is not one of %s", as, shown, s->choices);
        }
        *choice_slot(cfg, s) = index;
        return OUTBOX_OK;
    case OBX_SETTING_STR:
    default:
        if (text != NULL && s->check != NULL && s->check(text, &why) != OUTBOX_OK) {
            return why.code == OUTBOX_EINVAL ? refuse_checked(as, text, &why, err)
                                             : obx_fail(err, why.code, "%s", why.message);
        }
        copy = text != NULL ? strdup(text) : NULL;
        if (text != NULL && copy == NULL) {
            return obx_fail(err, OUTBOX_ENOMEM, "%s: out of memory", as);
        }
        free(*str_slot(cfg, s));
        *str_slot(cfg, s) = copy;
        return OUTBOX_OK;
    }
}

outbox_status
obx_config_set_as(struct obx_config *cfg, const struct obx_setting *s, const char *as,
                  const char *text, outbox_error *err)
{
    if ((s->parts & cfg->parts) == 0) {
        return obx_fail(err, OUTBOX_EINVAL, "%s is not a setting of this configuration", as);
    }
    return set_value(cfg, s, as, text, err);
}

outbox_status
obx_config_set_key(struct obx_config *cfg, const char *key, const char *text, outbox_error *err)
{
    const struct obx_setting *s = obx_setting_by_key(key);

    if (s == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "\"%.64s\" is not a setting", key ? key : "");
    }
    return obx_config_set_as(cfg, s, key, text, err);
}

outbox_status
obx_config_init(struct obx_config *cfg, unsigned parts, outbox_error *err)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->parts = OBX_FOR_ALL; /* every default lands, whatever the kind */
    for (size_t i = 0; i < obx_settings_count; i++) {
        const struct obx_setting *s = &obx_settings[i];

        if (s->fallback != NULL && set_value(cfg, s, s->env, s->fallback, err) != OUTBOX_OK) {
            obx_config_fini(cfg);
            return err != NULL ? err->code : OUTBOX_ENOMEM;
        }
    }
    cfg->parts = parts;
    return OUTBOX_OK;
}

void
obx_config_fini(struct obx_config *cfg)
{
    if (cfg == NULL) {
        return;
    }
    for (size_t i = 0; i < obx_settings_count; i++) {
        if (obx_settings[i].type == OBX_SETTING_STR) {
            free(*str_slot(cfg, &obx_settings[i]));
            *str_slot(cfg, &obx_settings[i]) = NULL;
        }
    }
}

outbox_status
obx_config_copy(struct obx_config *dst, const struct obx_config *src, outbox_error *err)
{
    unsigned parts = dst->parts;

    dst->parts = OBX_FOR_ALL;
    for (size_t i = 0; i < obx_settings_count; i++) {
        const struct obx_setting *s = &obx_settings[i];
        const char *text;

        if (s->type != OBX_SETTING_STR) {
            memcpy((char *)dst + s->offset, (const char *)src + s->offset,
                   s->type == OBX_SETTING_INT ? sizeof(long long) : sizeof(int));
            continue;
        }
        text = *str_slot((struct obx_config *)src, s);
        if (set_value(dst, s, s->env, text, err) != OUTBOX_OK) {
            dst->parts = parts;
            return OUTBOX_ENOMEM;
        }
    }
    dst->parts = parts;
    return OUTBOX_OK;
}

void
obx_config_text(const struct obx_config *cfg, const struct obx_setting *s, char *out, size_t cap)
{
    struct obx_config *c = (struct obx_config *)cfg;
    const char *p;
    int index;

    switch (s->type) {
    case OBX_SETTING_INT:
        /* A number with no default, not set, is unset, as a string is (OUTBOX_BATCH_SIZE). */
        if (s->fallback == NULL && *int_slot(c, s) == 0) {
            snprintf(out, cap, "%s", "");
            return;
        }
        snprintf(out, cap, "%lld", *int_slot(c, s));
        return;
    case OBX_SETTING_CHOICE:
        index = *choice_slot(c, s);
        p = s->choices;
        while (index-- > 0 && strchr(p, '|') != NULL) {
            p = strchr(p, '|') + 1;
        }
        snprintf(out, cap, "%.*s", (int)strcspn(p, "|"), p);
        return;
    case OBX_SETTING_STR:
    default:
        snprintf(out, cap, "%s", *str_slot(c, s) ? *str_slot(c, s) : "");
        return;
    }
}

outbox_status
obx_config_load_env(struct obx_config *cfg, outbox_error *err)
{
    for (size_t i = 0; i < obx_settings_count; i++) {
        const struct obx_setting *s = &obx_settings[i];
        const char *env = getenv(s->env);

        if ((s->parts & cfg->parts) != 0 && env != NULL && env[0] != '\0' &&
            set_value(cfg, s, s->env, env, err) != OUTBOX_OK) {
            return err != NULL ? err->code : OUTBOX_EINVAL;
        }
    }
    return OUTBOX_OK;
}

outbox_status
obx_config_load_args(struct obx_config *cfg, int argc, char **argv, int *rest, outbox_error *err)
{
    int kept = 0;

    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '='), *value;
        const struct obx_setting *s = NULL;

        if (strncmp(arg, "--", 2) == 0) {
            s = obx_setting_by_flag(arg + 2, eq ? (size_t)(eq - arg - 2) : strlen(arg + 2));
        }
        if (s == NULL || (s->parts & cfg->parts) == 0) {
            argv[kept++] = argv[i];
            continue;
        }
        if (eq == NULL && i + 1 >= argc) {
            return obx_fail(err, OUTBOX_EINVAL, "%s needs a value (%s)", arg, s->env);
        }
        value = eq ? eq + 1 : argv[++i];
        if (value[0] == '\0') {
            continue; /* as an empty variable: not given (docs/configuration.md) */
        }
        /* Messages name the variable: the flag is the same setting. */
        if (set_value(cfg, s, s->env, value, err) != OUTBOX_OK) {
            return err != NULL ? err->code : OUTBOX_EINVAL;
        }
    }
    *rest = kept;
    return OUTBOX_OK;
}

outbox_status
obx_config_load(struct obx_config *cfg, int argc, char **argv, int *rest, outbox_error *err)
{
    outbox_status st = obx_config_init(cfg, OBX_FOR_ALL, err);

    if (st == OUTBOX_OK) {
        st = obx_config_load_env(cfg, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_config_load_args(cfg, argc, argv, rest, err);
    }
    if (st == OUTBOX_OK) {
        st = obx_config_resolve_files(cfg, err);
    }
    /* One without the other fails only when NATS is first reached: refuse it now. */
    if (st == OUTBOX_OK && (cfg->nats_tls_cert == NULL) != (cfg->nats_tls_key == NULL)) {
        st = obx_fail(err, OUTBOX_EINVAL,
                      "OUTBOX_NATS_TLS_CERT and OUTBOX_NATS_TLS_KEY must be set together (%s is "
                      "not set)",
                      cfg->nats_tls_cert == NULL ? "OUTBOX_NATS_TLS_CERT" : "OUTBOX_NATS_TLS_KEY");
    }
    return st;
}

void
obx_config_replica_name(const struct obx_config *cfg, char *out, size_t cap)
{
    char host[64] = "host";

    if (cfg->name != NULL) {
        snprintf(out, cap, "%s", cfg->name);
        return;
    }
    if (gethostname(host, sizeof(host)) != 0) {
        snprintf(host, sizeof(host), "host");
    }
    host[sizeof(host) - 1] = '\0';
    snprintf(out, cap, "%s-%ld", host, (long)getpid());
}

/* ---- the public handle ---- */

static unsigned
parts_of(outbox_config_kind kind)
{
    switch (kind) {
    case OUTBOX_CONFIG_WRITER:
        return OBX_FOR_WRITER;
    case OUTBOX_CONFIG_RELAY:
        return OBX_FOR_RELAY;
    case OUTBOX_CONFIG_CONSUMER:
        return OBX_FOR_CONSUMER;
    default:
        return 0;
    }
}

outbox_config *
outbox_config_new(outbox_config_kind kind)
{
    outbox_config *cfg;

    if (parts_of(kind) == 0 || (cfg = calloc(1, sizeof(*cfg))) == NULL) {
        return NULL;
    }
    if (obx_config_init(&cfg->values, parts_of(kind), NULL) != OUTBOX_OK) {
        free(cfg);
        return NULL;
    }
    return cfg;
}

void
outbox_config_free(outbox_config *cfg)
{
    if (cfg != NULL) {
        obx_config_fini(&cfg->values);
        free(cfg);
    }
}

static outbox_status
lookup(const outbox_config *cfg, const char *key, const struct obx_setting **out, outbox_error *err)
{
    const struct obx_setting *s = obx_setting_by_key(key);

    obx_error_reset(err);
    if (cfg == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "no configuration given");
    }
    if (s == NULL || (s->parts & cfg->values.parts) == 0) {
        return obx_fail(err, OUTBOX_EINVAL, "\"%.64s\" is not a setting of a %s configuration",
                        key ? key : "",
                        cfg->values.parts == OBX_FOR_WRITER  ? "writer"
                        : cfg->values.parts == OBX_FOR_RELAY ? "relay"
                                                             : "consumer");
    }
    *out = s;
    return OUTBOX_OK;
}

outbox_status
outbox_config_set(outbox_config *cfg, const char *key, const char *value, outbox_error *err)
{
    const struct obx_setting *s = NULL;
    outbox_status st = lookup(cfg, key, &s, err);

    return st == OUTBOX_OK ? obx_config_set_as(&cfg->values, s, key, value, err) : st;
}

outbox_status
outbox_config_set_int(outbox_config *cfg, const char *key, long long value, outbox_error *err)
{
    char text[32];

    snprintf(text, sizeof(text), "%lld", value);
    return outbox_config_set(cfg, key, text, err);
}

outbox_status
outbox_config_get(const outbox_config *cfg, const char *key, char *buf, size_t cap,
                  outbox_error *err)
{
    const struct obx_setting *s = NULL;
    outbox_status st = lookup(cfg, key, &s, err);

    if (st == OUTBOX_OK && buf != NULL && cap > 0) {
        obx_config_text(&cfg->values, s, buf, cap);
    }
    return st;
}

outbox_status
outbox_config_load_env(outbox_config *cfg, outbox_error *err)
{
    outbox_status st;

    obx_error_reset(err);
    if (cfg == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "no configuration given");
    }
    st = obx_config_load_env(&cfg->values, err);
    return st == OUTBOX_OK ? obx_config_resolve_files(&cfg->values, err) : st;
}
