/* SPDX-License-Identifier: MIT */
/*
 * sql.h - puts the schema name into the embedded SQL, once.
 *
 * Queries and migrations put a marker comment holding the word "schema"
 * before each table name; being a comment, the file still runs by hand
 * through search_path. At start-up each
 * statement is rendered with the validated, quoted name and cached by its
 * owner. The schema is the only text ever substituted: values are $n.
 */
#ifndef OBX_SQL_H
#define OBX_SQL_H

#include <stddef.h>

#include "outbox/outbox.h"

/* Longest valid schema name, from PostgreSQL's NAMEDATALEN - 1. */
#define OBX_SCHEMA_MAX_LEN 63

/* Room for `"name".` plus the terminator. */
#define OBX_SCHEMA_QUOTED_CAP (OBX_SCHEMA_MAX_LEN + 4)

/*
 * Writes `"schema".` into `out` (OBX_SCHEMA_QUOTED_CAP bytes) after checking
 * the name against [a-z_][a-z0-9_]{0,62}. OUTBOX_EINVAL names the value.
 */
outbox_status obx_sql_quote_schema(const char *schema, char *out, outbox_error *err);

/*
 * Returns a malloc'd copy of `sql_template` with every schema marker replaced
 * by `quoted_schema`, or NULL when out of memory. The caller frees it.
 */
char *obx_sql_render(const char *sql_template, const char *quoted_schema);

/*
 * Checks `schema` and renders `count` statements for it into `out`
 * (malloc'd; the caller frees them with obx_sql_free_set). OUTBOX_EINVAL
 * for a bad schema name, OUTBOX_ENOMEM (with nothing left allocated).
 */
outbox_status obx_sql_render_set(const char *schema, const char *const *templates, size_t count,
                                 char **out, outbox_error *err);
void obx_sql_free_set(char **set, size_t count);

#endif
