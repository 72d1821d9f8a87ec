/* SPDX-License-Identifier: MIT */
/*
 * store_int.h - the insides of a store, shared by store_conn_pg.c (the
 * connection and the wake-up) and store_pg.c (lease, finish, prune).
 */
#ifndef OBX_STORE_INT_H
#define OBX_STORE_INT_H

#include <libpq-fe.h>

#include "store.h"
#include "support/pg_conn.h"

/* The store's statements, rendered for its schema at open. */
enum obx_store_sql {
    OBX_STORE_LEASE,
    OBX_STORE_FINISH_ROWS,
    OBX_STORE_DONE_PRUNE,
    OBX_STORE_DONE_MARK,
    OBX_STORE_PRUNE,
    OBX_STORE_LISTEN,
    OBX_STORE_SESSION,
    OBX_STORE_EXTEND,
    OBX_STORE_HEALTH,
    OBX_STORE_SQL_COUNT
};

struct obx_store {
    struct obx_pg_session pg; /* the connection and the statements of enum obx_store_sql */
    char *schema;             /* owned, unquoted: the wake-up channel is derived from it */
    int listening;            /* LISTEN was asked for: repeated after a reconnect */
};

#endif
