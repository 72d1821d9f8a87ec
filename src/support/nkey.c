/* SPDX-License-Identifier: MIT */
/*
 * nkey.c - a NATS user seed's public key (see nkey.h): base32 and CRC-16
 * (XMODEM, as NATS's nkeys use), ed25519 by OpenSSL's libcrypto. Reads
 * the file, or nothing; the seed's bytes are wiped after use.
 */
#include "nkey.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "common/error.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define SEED_LEN       58 /* base32 of 36 bytes, unpadded */
#define SEED_RAW_LEN   36 /* prefix 2, seed 32, crc 2 */
#define PUBLIC_RAW_LEN 35 /* prefix 1, key 32, crc 2 */
#define PREFIX_SEED    (18 << 3)
#define PREFIX_USER    (20 << 3)
#define FILE_CAP       8192

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

static uint16_t
crc16(const unsigned char *p, size_t n)
{
    uint16_t crc = 0;

    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++) {
            crc = (crc & 0x8000) != 0 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
        }
    }
    return crc;
}

/* Decodes `n` base32 characters into `out`; the byte count, or -1 on a bad character. */
static int
base32_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
    unsigned buffer = 0;
    int bits = 0;
    size_t len = 0;

    for (size_t i = 0; i < n; i++) {
        const char *at = strchr(alphabet, in[i]);

        if (in[i] == '\0' || at == NULL) {
            return -1;
        }
        buffer = (buffer << 5) | (unsigned)(at - alphabet);
        bits += 5;
        if (bits >= 8) {
            bits -= 8;
            if (len == cap) {
                return -1;
            }
            out[len++] = (unsigned char)(buffer >> bits);
        }
    }
    return (int)len;
}

static void
base32_encode(const unsigned char *in, size_t n, char *out)
{
    unsigned buffer = 0;
    int bits = 0;
    size_t len = 0;

    for (size_t i = 0; i < n; i++) {
        buffer = (buffer << 8) | in[i];
        bits += 8;
        while (bits >= 5) {
            bits -= 5;
            out[len++] = alphabet[(buffer >> bits) & 31];
        }
    }
    if (bits > 0) {
        out[len++] = alphabet[(buffer << (5 - bits)) & 31];
    }
    out[len] = '\0';
}

/* ed25519 public key of a 32-byte seed; 0 or -1. */
static int
ed25519_public(const unsigned char *seed, unsigned char *pub)
{
    EVP_PKEY *key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
    size_t len = 32;
    int ok = key != NULL && EVP_PKEY_get_raw_public_key(key, pub, &len) == 1 && len == 32;

    EVP_PKEY_free(key);
    return ok ? 0 : -1;
}

outbox_status
obx_nkey_public_of_seed(const char *seed, char *out, outbox_error *err)
{
    unsigned char raw[SEED_RAW_LEN], pub[PUBLIC_RAW_LEN];
    int len = strlen(seed) == SEED_LEN ? base32_decode(seed, SEED_LEN, raw, sizeof(raw)) : -1;
    int user = len == SEED_RAW_LEN && (raw[0] & 0xf8) == PREFIX_SEED &&
               (((raw[0] & 7) << 5) | (raw[1] >> 3)) == PREFIX_USER;
    uint16_t crc;

    if (!user || crc16(raw, SEED_RAW_LEN - 2) !=
                     (uint16_t)(raw[SEED_RAW_LEN - 2] | (raw[SEED_RAW_LEN - 1] << 8))) {
        explicit_bzero(raw, sizeof(raw));
        return obx_fail(err, OUTBOX_EINVAL,
                        "not a NATS user NKey seed (58 characters SU..., checksum valid)");
    }
    pub[0] = PREFIX_USER;
    if (ed25519_public(raw + 2, pub + 1) != 0) {
        explicit_bzero(raw, sizeof(raw));
        return obx_fail(err, OUTBOX_EINVAL, "cannot derive the NKey's public key");
    }
    explicit_bzero(raw, sizeof(raw));
    crc = crc16(pub, PUBLIC_RAW_LEN - 2);
    pub[PUBLIC_RAW_LEN - 2] = (unsigned char)(crc & 0xff);
    pub[PUBLIC_RAW_LEN - 1] = (unsigned char)(crc >> 8);
    base32_encode(pub, PUBLIC_RAW_LEN, out);
    return OUTBOX_OK;
}

/* The first word starting "SU" in `text`, copied (SEED_LEN + 1 bytes); 0 or -1. */
static int
find_seed(const char *text, char *seed)
{
    for (const char *p = strstr(text, "SU"); p != NULL; p = strstr(p + 2, "SU")) {
        size_t n = strspn(p, alphabet);

        if (n == SEED_LEN && (p == text || strchr(alphabet, p[-1]) == NULL)) {
            memcpy(seed, p, SEED_LEN);
            seed[SEED_LEN] = '\0';
            return 0;
        }
    }
    return -1;
}

outbox_status
obx_nkey_public_of_file(const char *setting, const char *path, char *out, outbox_error *err)
{
    char text[FILE_CAP], seed[SEED_LEN + 1];
    FILE *f = fopen(path, "re");
    size_t n;
    outbox_status st;
    outbox_error why = {0};

    if (f == NULL) {
        return obx_fail(err, OUTBOX_EINVAL, "%s: cannot read %s", setting, path);
    }
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    if (find_seed(text, seed) != 0) {
        explicit_bzero(text, sizeof(text));
        return obx_fail(err, OUTBOX_EINVAL, "%s: %s holds no NATS user NKey seed (SU...)", setting,
                        path);
    }
    explicit_bzero(text, sizeof(text));
    st = obx_nkey_public_of_seed(seed, out, &why);
    explicit_bzero(seed, sizeof(seed));
    return st == OUTBOX_OK ? OUTBOX_OK
                           : obx_fail(err, st, "%s: %s: %s", setting, path, why.message);
}
