/* SPDX-License-Identifier: MIT */
/*
 * test_config.c - configurations by key for the tests' in-process parts.
 */
#include "test_config.h"

#include <criterion/criterion.h>
#include <stdio.h>

#include "common/banned.h" /* last: poisons unsafe functions */

outbox_config *
test_config(outbox_config_kind kind, const char *const *kv)
{
    outbox_config *cfg = outbox_config_new(kind);
    outbox_error err;

    cr_assert_not_null(cfg, "outbox_config_new(%d) failed", (int)kind);
    for (size_t i = 0; kv != NULL && kv[i] != NULL; i += 2) {
        cr_assert_not_null(kv[i + 1], "setting %s has no value", kv[i]);
        cr_assert_eq(outbox_config_set(cfg, kv[i], kv[i + 1], &err), OUTBOX_OK, "%s", err.message);
    }
    return cfg;
}

outbox_writer *
test_writer(const char *schema, long long max_envelope_bytes)
{
    char limit[32];
    const char *kv[5] = {NULL};
    size_t n = 0;
    outbox_config *cfg;
    outbox_writer *w = NULL;
    outbox_error err;

    if (schema != NULL) {
        kv[n++] = "schema";
        kv[n++] = schema;
    }
    if (max_envelope_bytes > 0) {
        snprintf(limit, sizeof(limit), "%lld", max_envelope_bytes);
        kv[n++] = "max_envelope_bytes";
        kv[n++] = limit;
    }
    cfg = test_config(OUTBOX_CONFIG_WRITER, kv);
    cr_assert_eq(outbox_writer_new(cfg, &w, &err), OUTBOX_OK, "%s", err.message);
    outbox_config_free(cfg);
    return w;
}
