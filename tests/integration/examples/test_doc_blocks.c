/* SPDX-License-Identifier: MIT */
/*
 * test_doc_blocks.c - the SQL a reader copies from README.md and docs/ runs:
 * tests/scripts/check_doc_blocks.py executes every ```sql block (all but
 * those marked not runnable, with a reason) against a throwaway database of
 * the harness's PostgreSQL with the schema migrated, and checks the
 * commands, options and settings the shell blocks name. A block that no
 * longer runs fails here, naming its document and line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "harness.h"

#include "common/banned.h" /* last: poisons unsafe functions */

Test(doc_blocks, every_sql_block_runs_on_a_migrated_database, .timeout = 120)
{
    PGconn *conn = harness_pg_connect_fresh();
    char *argv[] = {"python3",
                    OBX_SOURCE_DIR "/tests/scripts/check_doc_blocks.py",
                    OBX_SOURCE_DIR,
                    "--database-url",
                    (char *)harness_db_url(),
                    NULL};
    struct harness_proc p;
    int status;
    char *log;

    harness_spawn(&p, argv, NULL);
    status = harness_proc_wait(&p, 100 * 1000);
    if (status == -1) {
        harness_proc_kill(&p);
    }
    log = harness_proc_log(&p);
    cr_log_info("check_doc_blocks.py:\n%s", log);
    cr_assert_eq(status, 0, "check_doc_blocks.py exited %d:\n%s", status, log);
    cr_assert(strstr(log, "sql blocks ran") != NULL, "no sql block ran:\n%s", log);
    free(log);
    PQfinish(conn);
}
