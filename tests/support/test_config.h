/* SPDX-License-Identifier: MIT */
/*
 * test_config.h - configurations for in-process writers and workers, the
 * way a service builds them: outbox_config set by key. A refused key or
 * value fails the test on the spot, naming it.
 */
#ifndef OBX_TEST_CONFIG_H
#define OBX_TEST_CONFIG_H

#include "outbox/outbox.h"

/*
 * A configuration of `kind` with the settings `kv` applied in order: pairs
 * of key and value, ended by NULL ({"schema", "billing_outbox", NULL}).
 */
outbox_config *test_config(outbox_config_kind kind, const char *const *kv);

/* A writer for `schema` (NULL: the default) and the envelope limit (0: the default). */
outbox_writer *test_writer(const char *schema, long long max_envelope_bytes);

#endif
