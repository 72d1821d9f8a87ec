/* SPDX-License-Identifier: MIT */
/*
 * nkey.h - the public key of a NATS user NKey seed.
 *
 * nats.c 3.4.1 signs with a seed file (natsOptions_SetNKeyFromSeed) but
 * wants the user's public key beside it, and has no call that derives it.
 * An operator has the seed file (`nk -gen user`); asking for the public
 * key as a second setting would let the two disagree, so it is derived:
 * the seed is base32 of [prefix 2][ed25519 seed 32][crc16 2], the public
 * key base32 of ['U'][ed25519 public key 32][crc16 2].
 */
#ifndef OBX_NKEY_H
#define OBX_NKEY_H

#include <stddef.h>

#include "outbox/outbox.h"

/* A user public key: 56 characters starting with U. */
#define OBX_NKEY_PUBLIC_LEN 56

/*
 * The public key (OBX_NKEY_PUBLIC_LEN + 1 bytes into `out`) of the user
 * seed `seed` ("SU..."). OUTBOX_EINVAL when `seed` is not a user seed
 * (bad characters, length or checksum); the message never shows it.
 */
outbox_status obx_nkey_public_of_seed(const char *seed, char *out, outbox_error *err);

/*
 * The public key of the first user seed in the file at `path` (a seed
 * file, or a .creds file's seed block), named `setting` in errors.
 */
outbox_status obx_nkey_public_of_file(const char *setting, const char *path, char *out,
                                      outbox_error *err);

#endif
