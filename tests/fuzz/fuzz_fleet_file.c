/* SPDX-License-Identifier: MIT */
/*
 * fuzz_fleet_file.c - the fleet file, read at start and on every reload:
 * whoever may write it may write anything into it.
 *
 * Beyond memory safety: what a loaded file lists is complete and has no
 * name twice, a refused file leaves nothing behind and says why, and the
 * verdict and the message are the same with the file's passwords blanked,
 * so an error never shows one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "fleet/fleet.h"
#include "fuzz.h"

/* Loads `data` as a fleet file into `list`. */
static outbox_status
load(const struct obx_config *base, const uint8_t *data, size_t size, struct obx_fleet_list *list,
     outbox_error *err)
{
    char path[64];
    int fd = obx_fuzz_memfile(data, size, path, sizeof(path));
    outbox_status st = obx_fleet_file_load(path, base, list, err);

    close(fd); /* the next memfd gets the same number: the same path in messages */
    return st;
}

static void
check_list(const struct obx_fleet_list *list)
{
    obx_fuzz_require(list->count > 0, "a loaded fleet file lists no database");
    for (size_t i = 0; i < list->count; i++) {
        const struct obx_fleet_entry *e = &list->items[i];

        obx_fuzz_require(e->name[0] != '\0' && e->database_url != NULL && e->schema != NULL &&
                             e->stream != NULL && e->subject_prefix != NULL,
                         "a loaded fleet entry lacks a field");
        for (size_t j = 0; j < i; j++) {
            obx_fuzz_require(strcmp(e->name, list->items[j].name) != 0,
                             "a loaded fleet file repeats a name");
        }
    }
}

int
obx_fuzz_fleet_file(const uint8_t *data, size_t size)
{
    static struct obx_config base;
    static int have_base;
    struct obx_fleet_list list, other;
    outbox_error err = {0}, err2 = {0};
    char *blanked = obx_fuzz_cstr(data, size);
    outbox_status st;

    if (!have_base) {
        obx_fuzz_require(obx_config_init(&base, OBX_FOR_RELAY, &err) == OUTBOX_OK,
                         "the default relay configuration");
        have_base = 1;
    }
    st = load(&base, data, size, &list, &err);
    if (st == OUTBOX_OK) {
        check_list(&list);
    } else {
        obx_fuzz_require(list.count == 0 && list.items == NULL && err.message[0] != '\0',
                         "a refused fleet file left entries or gave no reason");
    }
    if (obx_fuzz_blank_passwords(blanked, size) > 0) {
        obx_fuzz_require(load(&base, (const uint8_t *)blanked, size, &other, &err2) == st &&
                             strcmp(err.message, err2.message) == 0,
                         "a password in a fleet file changes its verdict or its message");
        obx_fleet_list_fini(&other);
    }
    obx_fleet_list_fini(&list);
    free(blanked);
    return 0;
}
