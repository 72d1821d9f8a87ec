/* SPDX-License-Identifier: MIT */
/*
 * fuzz_nkey.c - an NKey seed file or a .creds file (OUTBOX_NATS_NKEY_SEED,
 * OUTBOX_NATS_CREDS), and a seed on its own.
 *
 * Input: the first byte's low bit picks the seed on its own (the rest of
 * the input as a string) or the file (the rest as its content).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "support/nkey.h"

static void
require_public_key(outbox_status st, const char *out, const outbox_error *err)
{
    if (st == OUTBOX_OK) {
        obx_fuzz_require(strlen(out) == OBX_NKEY_PUBLIC_LEN && out[0] == 'U',
                         "a derived public key is not 56 characters starting with U");
    } else {
        obx_fuzz_require(err->message[0] != '\0', "a refused seed has no reason");
    }
}

int
obx_fuzz_nkey(const uint8_t *data, size_t size)
{
    char out[OBX_NKEY_PUBLIC_LEN + 1] = "", path[64];
    outbox_error err = {0};

    if (size == 0) {
        return 0;
    }
    if ((data[0] & 1) == 0) {
        char *seed = obx_fuzz_cstr(data + 1, size - 1);

        require_public_key(obx_nkey_public_of_seed(seed, out, &err), out, &err);
        free(seed);
    } else {
        int fd = obx_fuzz_memfile(data + 1, size - 1, path, sizeof(path));

        require_public_key(obx_nkey_public_of_file("nats_creds", path, out, &err), out, &err);
        close(fd);
    }
    return 0;
}
