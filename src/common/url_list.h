/* SPDX-License-Identifier: MIT */
/*
 * url_list.h - a comma-separated list of NATS server URLs, split and
 * checked once for every connection of ours.
 *
 * OUTBOX_NATS_URL may name every node of a cluster
 * ("nats://a:4222,nats://b:4222,nats://c:4222"). nats.c 3.4.1 takes such a
 * list only as an array (natsOptions_SetServers): given as one URL it
 * accepts it and then never connects. So the list is split here, each
 * entry checked (scheme nats:// or tls:// or none, a host, a port in
 * 1..65535), and a bad entry refused with the field's name and the entry,
 * its password left out.
 */
#ifndef OBX_URL_LIST_H
#define OBX_URL_LIST_H

#include <stddef.h>

#include "outbox/outbox.h"

/* More servers than this in one list is a typo, not a cluster. */
#define OBX_URL_LIST_MAX 16

struct obx_url_list {
    size_t count;
    char *urls[OBX_URL_LIST_MAX]; /* trimmed entries; point into `text` */
    char *text;                   /* owned copy of the list */
};

/*
 * Splits `list` (entries trimmed of spaces) into `out`. `field` names the
 * setting in the error ("nats_url"). OUTBOX_EINVAL for an empty list or
 * entry, a bad entry or more than OBX_URL_LIST_MAX entries; OUTBOX_ENOMEM.
 * On success the caller frees `out` with obx_url_list_free.
 */
outbox_status obx_url_list_parse(const char *field, const char *list, struct obx_url_list *out,
                                 outbox_error *err);

void obx_url_list_free(struct obx_url_list *l);

/* The settings table's check for OUTBOX_NATS_URL: the list parses. */
outbox_status obx_nats_url_check(const char *list, outbox_error *err);

#endif
