/* SPDX-License-Identifier: MIT */
/*
 * test_nkey.c - a NATS user seed's public key, as OUTBOX_NATS_NKEY_SEED
 * needs it (nats.c 3.4.1 wants both): the pair below was made by an
 * independent encoder (tests/scripts/mint_nats_keys.py), and a seed with a
 * bad checksum, of another kind or of the wrong length is refused without
 * being shown.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "support/nkey.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define SEED   "SUAHZSGTYEAJRLBSC7ZMEZNS66AL5YJD6Y3G75TNU3PTHQQV5BZ5QWR2KU"
#define PUBLIC "UAN3HCT4VKEPQPXKCAOHXIRLPWMY3JHMJQFKS7APC5AGBD5RSS3HGO73"

Test(nkey, derives_the_public_key_of_a_user_seed)
{
    char pub[OBX_NKEY_PUBLIC_LEN + 1];
    outbox_error err = {0};

    cr_assert_eq(obx_nkey_public_of_seed(SEED, pub, &err), OUTBOX_OK, "%s", err.message);
    cr_assert_str_eq(pub, PUBLIC);
}

Test(nkey, refuses_a_bad_checksum_another_kind_or_length_without_showing_the_seed)
{
    const char *bad[] = {
        "SUAHZSGTYEAJRLBSC7ZMEZNS66AL5YJD6Y3G75TNU3PTHQQV5BZ5QWR2KA", /* last char changed */
        "SAAKEVIDJEXIDVQCHIBAYNK4E6VA4K7NTZOA5XAYOH4KOONFB6MPKVEAFM", /* an account seed */
        "SUAHZSGTYEAJRLBSC7ZMEZNS66AL5YJD6Y3G75TNU3PTHQQV5BZ5QWR2K",  /* one short */
        "suahzsgtyeajrlbsc7zmezns66al5yjd6y3g75tnu3pthqqv5bz5qwr2ku", /* lower case */
    };
    char pub[OBX_NKEY_PUBLIC_LEN + 1];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        outbox_error err = {0};

        cr_assert_eq(obx_nkey_public_of_seed(bad[i], pub, &err), OUTBOX_EINVAL, "%s", bad[i]);
        cr_assert(strstr(err.message, "SUAH") == NULL && strstr(err.message, "SAAK") == NULL, "%s",
                  err.message);
    }
}

Test(nkey, finds_the_seed_in_a_seed_file_or_a_creds_file)
{
    char path[] = "/tmp/obx-nkey-XXXXXX", pub[OBX_NKEY_PUBLIC_LEN + 1];
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    outbox_error err = {0};

    cr_assert_not_null(f);
    fputs("-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ.e30.sig\n------END NATS USER "
          "JWT------\n\n-----BEGIN USER NKEY SEED-----\n" SEED "\n------END USER NKEY SEED------\n",
          f);
    fclose(f);
    cr_assert_eq(obx_nkey_public_of_file("OUTBOX_NATS_NKEY_SEED", path, pub, &err), OUTBOX_OK, "%s",
                 err.message);
    cr_assert_str_eq(pub, PUBLIC);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("no seed here\n", f);
    fclose(f);
    cr_assert_eq(obx_nkey_public_of_file("OUTBOX_NATS_NKEY_SEED", path, pub, &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "OUTBOX_NATS_NKEY_SEED") != NULL && strstr(err.message, path),
              "%s", err.message);
    unlink(path);
}
